"""Save and load a network as a named, documented safetensors file.

Tensor names (float64):

* ``{layer}.head{h}.query`` ``(d_head, D)``, ``{layer}.head{h}.key`` ``(d_head, D)``,
  ``{layer}.head{h}.value`` ``(D, D)`` for attention layers (``history.1``, ``label``, ``gd.3``,
  ``readout``, ...), logit ``s_ij = (query h_i) . (key h_j)``;
* ``joint.w_in`` ``(p^m, D)``, ``joint.w_out`` ``(D, p^m)`` for the Theorem 2 MLP.

The metadata (all strings) holds ``description`` (these conventions), ``parameters`` (JSON: the
:class:`~construction.spec.ConstructionSpec` under the docs' symbols p, L, T, m, eta, beta, theta,
penalty, doubling, and the network's tolerance), ``layout`` (JSON: slot -> [start, stop)), and
``layers`` (JSON list of ``[name, kind, number of heads, activation, stage, index in the stage]``).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from construction.network import Network
from construction.spec import ConstructionSpec
from construction.weights import AttentionLayer, Head, Layer, MLPLayer, Stage

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
            layers.append([layer.name, "mlp", 0, "relu", layer.stage.value, layer.index])
            continue
        for h, head in enumerate(layer.heads):
            for part in ("query", "key", "value"):
                tensors[f"{layer.name}.head{h}.{part}"] = torch.as_tensor(getattr(head, part), dtype=torch.float64)
        activation = layer.heads[0].activation
        layers.append([layer.name, "attention", len(layer.heads), activation, layer.stage.value, layer.index])
    spec = network.spec
    parameters = {
        "p": spec.num_tokens,
        "L": spec.history_length,
        "T": spec.gd_steps,
        "m": spec.future_length,
        "eta": spec.eta,
        "beta": spec.beta,
        "theta": spec.theta,
        "penalty": spec.penalty,
        "doubling": spec.doubling,
        "tolerance": network.tolerance,
    }
    metadata = {
        "description": DESCRIPTION,
        "parameters": json.dumps(parameters, allow_nan=False),
        "layout": json.dumps({name: [start, stop] for name, start, stop in network.layout.slots}, allow_nan=False),
        "layers": json.dumps(layers, allow_nan=False),
    }
    save_file(tensors, str(path), metadata=metadata)


def load_weights(path: str | Path) -> Network:
    """Rebuild a :class:`Network` from a file written by :func:`save_weights` (weights as stored)."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors = {name: tensor.numpy() for name, tensor in load_file(str(path)).items()}
    parameters = json.loads(metadata["parameters"])
    layers: list[Layer] = []
    for name, kind, num_heads, activation, stage, index in json.loads(metadata["layers"]):
        if kind == "mlp":
            w_in, w_out = tensors[f"{name}.w_in"], tensors[f"{name}.w_out"]
            layers.append(MLPLayer(name=name, stage=Stage(stage), index=index, w_in=w_in, w_out=w_out))
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
        layers.append(AttentionLayer(name=name, stage=Stage(stage), index=index, heads=heads))
    spec = ConstructionSpec(
        num_tokens=parameters["p"],
        history_length=parameters["L"],
        gd_steps=parameters["T"],
        eta=parameters["eta"],
        beta=parameters["beta"],
        theta=parameters["theta"],
        future_length=parameters["m"],
        doubling=parameters["doubling"],
        penalty=parameters["penalty"],
    )
    stored = {name: tuple(rows) for name, rows in json.loads(metadata["layout"]).items()}
    if stored != {name: (start, stop) for name, start, stop in spec.layout.slots}:
        raise ValueError(f"path={str(path)!r}: stored layout does not match build_layout of its parameters")
    return Network(spec=spec, layers=tuple(layers), tolerance=parameters["tolerance"], allow_leak=False)
