"""Save and load a network as a named, documented safetensors file.

Tensor names (float64):

* ``{layer}.head{h}.query`` ``(d, D)``, ``{layer}.head{h}.key`` ``(d, D)``,
  ``{layer}.head{h}.value`` ``(D, D)`` for attention layers (``history.1``, ``label``, ``gd.3``,
  ``readout``, ...), logit ``s_ij = (query h_i) . (key h_j)``;
* ``joint.w_in`` ``(p^m, D)``, ``joint.w_out`` ``(D, p^m)`` for the Theorem 2 MLP.

The metadata (all strings) holds ``description`` (these conventions), ``parameters`` (JSON: p, L,
T, m, eta, beta, theta, penalty, doubling, tolerance), ``layout`` (JSON: slot -> [start, stop)),
and ``layers`` (JSON list of ``[name, kind, number of heads, activation]``).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from safetensors import safe_open

from construction.layout import build_layout
from construction.network import Network
from construction.weights import AttentionLayer, Head, MLPLayer

DESCRIPTION = (
    "Hand-wired attention-only residual transformer (construction/, docs/construction.md). "
    "Residual stream H is (D, N), one column per token; every layer adds its output to H. "
    "Head logits s_ij = (query h_i).(key h_j); softmax heads add sum_j softmax_j(s_ij) value h_j, "
    "relu heads add (1/N) sum_j relu(s_ij) value h_j; the joint MLP adds w_out relu(w_in h)."
)


def save_weights(network: Network, path: str | Path) -> None:
    """Write every weight matrix of ``network`` and its documented metadata to ``path``."""
    tensors, layers = {}, []
    for layer in network.layers:
        if isinstance(layer, MLPLayer):
            tensors[f"{layer.name}.w_in"] = torch.as_tensor(layer.w_in, dtype=torch.float64)
            tensors[f"{layer.name}.w_out"] = torch.as_tensor(layer.w_out, dtype=torch.float64)
            layers.append([layer.name, "mlp", 0, "relu"])
            continue
        for h, head in enumerate(layer.heads):
            for part in ("query", "key", "value"):
                tensors[f"{layer.name}.head{h}.{part}"] = torch.as_tensor(getattr(head, part), dtype=torch.float64)
        layers.append([layer.name, "attention", len(layer.heads), layer.heads[0].activation])
    layout = network.layout
    parameters = {
        "p": layout.num_tokens,
        "L": layout.history_length,
        "T": network.steps,
        "m": layout.future_length,
        "eta": network.eta,
        "beta": network.beta,
        "theta": network.theta,
        "penalty": network.penalty,
        "doubling": network.doubling,
        "tolerance": network.tolerance,
    }
    metadata = {
        "description": DESCRIPTION,
        "parameters": json.dumps(parameters),
        "layout": json.dumps({name: [start, stop] for name, start, stop in layout.slots}),
        "layers": json.dumps(layers),
    }
    save_file(tensors, str(path), metadata=metadata)


def load_weights(path: str | Path) -> Network:
    """Rebuild a :class:`Network` from a file written by :func:`save_weights` (weights as stored)."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors = {name: tensor.numpy() for name, tensor in load_file(str(path)).items()}
    parameters = json.loads(metadata["parameters"])
    layers = []
    for name, kind, num_heads, activation in json.loads(metadata["layers"]):
        if kind == "mlp":
            layers.append(MLPLayer(name=name, w_in=tensors[f"{name}.w_in"], w_out=tensors[f"{name}.w_out"]))
            continue
        heads = tuple(
            Head(
                query=tensors[f"{name}.head{h}.query"],
                key=tensors[f"{name}.head{h}.key"],
                value=tensors[f"{name}.head{h}.value"],
                activation=activation,
            )
            for h in range(num_heads)
        )
        layers.append(AttentionLayer(name=name, heads=heads))
    layout = build_layout(parameters["p"], parameters["L"], parameters["m"])
    stored = {name: tuple(rows) for name, rows in json.loads(metadata["layout"]).items()}
    if stored != {name: (start, stop) for name, start, stop in layout.slots}:
        raise ValueError(f"path={str(path)!r}: stored layout does not match build_layout of its parameters")
    return Network(
        layout=layout,
        layers=tuple(layers),
        beta=parameters["beta"],
        theta=parameters["theta"],
        eta=parameters["eta"],
        penalty=parameters["penalty"],
        steps=parameters["T"],
        doubling=parameters["doubling"],
        tolerance=parameters["tolerance"],
        allow_leak=False,
    )
