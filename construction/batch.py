"""Batched forward pass: many prompts of one length through the hand-wired network, each prompt with
its own spec (docs/construction.md, section 9).

A spec suited to a prompt (:func:`construction.parameters_for_prompt`) differs from prompt to
prompt of one length only in ``eta = 1 / lambda_max`` of that prompt's Hessian and in the beta
chosen for it; ``p, L, T, m``, the doubling choice, the penalty and ``theta = pi / (N + max_shift)``
are shared. Only two kinds of matrices read eta or beta, each linearly
(:data:`construction.weights.SCALED_WEIGHTS`): so the batch builds the layers once at
``beta = eta = 1`` and gives prompt b the matrices

    query_b = beta_b * query(beta = 1)   (history and label heads)
    value_b = eta_b * value(eta = 1)     (GD heads),

equal entry by entry to those of ``build_network(spec_b)``. Every prompt therefore keeps its own
parameters, and its error bound ``spec_b.error_bound(N)`` is checked on its own. The batched pass
computes the same numbers as the single-prompt pass up to the order of the sums inside the matrix
products (float rounding; the test derives the bound).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from construction import checks
from construction.layout import Layout
from construction.network import DEFAULT_TOLERANCE, build_network, embed, propagate
from construction.spec import ConstructionSpec
from construction.weights import SCALED_WEIGHTS, AttentionLayer, Layer

UNIT_NETWORKS = 4
"""Units at ``beta = eta = 1`` kept between calls (one per (p, L, T, m, theta, ...) in use)."""


@dataclass(frozen=True)
class BatchTrace:
    """The residual stream ``(B, D, N)`` of every prompt after the read-out (column 0 is the
    leading delimiter, column c holds prompt token c-1)."""

    layout: Layout
    stream: torch.Tensor

    def slot(self, name: str) -> torch.Tensor:
        """``(B, size, N)`` rows of slot ``name``."""
        rows = self.layout.rows(name)
        return self.stream[:, rows.start : rows.stop]

    @property
    def prediction(self) -> torch.Tensor:
        """``(B, p^m)``: ``output`` of the last column, ``W_T x_test`` of every prompt."""
        return self.slot("output")[:, :, -1]


def shared_spec(specs: Sequence[ConstructionSpec]) -> ConstructionSpec:
    """The common spec of ``specs`` at ``beta = eta = 1``; ``ValueError`` naming the first spec
    that differs in anything but beta and eta (or an empty sequence)."""
    if not specs:
        raise ValueError("specs: empty; expected one ConstructionSpec per prompt")
    unit = dataclasses.replace(specs[0], beta=1.0, eta=1.0)
    for index, spec in enumerate(specs):
        if dataclasses.replace(spec, beta=1.0, eta=1.0) != unit:
            raise ValueError(
                f"specs[{index}]: {spec}; expected the spec of specs[0] ({specs[0]}) up to beta and eta "
                f"(one batch shares p, L, T, m, theta, doubling and penalty)"
            )
    return unit


@dataclass(frozen=True)
class UnitTensors:
    """What a batched pass reads of the network at ``beta = eta = 1``: its ``layers`` with the
    heads' matrices dropped (:func:`construction.network.propagate` reads only a layer's name,
    stage, index and kind) and ``tensors``, :meth:`Network.torch_weights` in float64 (each head
    restricted to the rows it reads and writes).

    Kept instead of the :class:`Network`, whose heads hold dense ``D x D`` matrices: at the paper
    family's p = 16 with T = 32 the networks of L = 1, 2, 3 (D = 310, 583, 856) hold about 0.7,
    2.4 and 5 GB once built, and :data:`UNIT_NETWORKS` of them (one per prefix length of a
    prompt) did not fit 24 GiB (``hmmtf klmap`` at 128 states); their restricted tensors take a
    few MB."""

    layers: tuple[Layer, ...]
    tensors: list[dict]


@lru_cache(maxsize=UNIT_NETWORKS)
def unit_tensors(unit: ConstructionSpec) -> UnitTensors:
    """The :class:`UnitTensors` of ``build_network(unit)``, built once per unit spec; the network
    itself is not kept."""
    network = build_network(unit)
    layers = tuple(dataclasses.replace(layer, heads=()) if isinstance(layer, AttentionLayer) else layer
                   for layer in network.layers)
    return UnitTensors(layers, network.torch_weights(torch.float64))


def scaled_weights(unit: UnitTensors, specs: Sequence[ConstructionSpec], dtype: torch.dtype) -> list[dict]:
    """The layers' tensors of ``unit`` with each :data:`SCALED_WEIGHTS` matrix given a leading
    batch dimension: prompt b's copy times ``specs[b].beta`` or ``.eta`` (products taken in
    float64, then cast to ``dtype``, as the builders do)."""
    scales = {name: torch.tensor([getattr(spec, name) for spec in specs], dtype=torch.float64)
              for name in ("beta", "eta")}
    scaled = []
    for layer, tensors in zip(unit.layers, unit.tensors):
        if layer.stage in SCALED_WEIGHTS:
            part, parameter = SCALED_WEIGHTS[layer.stage]
            tensors = {**tensors, part: scales[parameter][:, None, None, None] * tensors[part]}
        scaled.append({name: value.to(dtype) if torch.is_tensor(value) and value.is_floating_point() else value
                       for name, value in tensors.items()})
    return scaled


def check_batch(tokens, layout: Layout) -> np.ndarray:
    """``tokens`` as an int64 array ``(B, n)``, every row a prompt :func:`checks.check_prompt`
    accepts; ``ValueError`` naming the row otherwise (rows may place their delimiters differently)."""
    array = np.asarray(tokens)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"tokens: shape {array.shape}; expected (B, n) with B >= 1 prompts of one length n")
    rows = []
    for index, prompt in enumerate(array):
        try:
            rows.append(checks.check_prompt(prompt, layout))
        except ValueError as error:
            raise ValueError(f"tokens[{index}]: {str(error).removeprefix('tokens: ')}") from error
    return np.stack(rows)


def forward_batch(specs: Sequence[ConstructionSpec], tokens, *, dtype: torch.dtype = torch.float64,
                  tolerance: float = DEFAULT_TOLERANCE, allow_leak: bool = False) -> BatchTrace:
    """Run prompt b of ``tokens (B, n)`` through the network of ``specs[b]``, all in one pass.

    ``specs[b]`` may differ from ``specs[0]`` only in beta and eta (:func:`shared_spec`). The
    refusals are those of :meth:`Network.forward`, per prompt: a malformed row, a theta that wraps,
    a beta whose error bound exceeds ``tolerance`` (unless ``allow_leak``), a step size at or above
    ``2 / lambda_max`` of the row's Hessian, a penalty that leaves a non-sample a positive GD score.
    """
    unit = shared_spec(specs)
    tokens = check_batch(tokens, unit.layout)
    if len(specs) != tokens.shape[0]:
        raise ValueError(f"specs: {len(specs)} specs for {tokens.shape[0]} prompts; expected one spec per prompt")
    num_columns = tokens.shape[1] + 1
    checks.check_angle(unit, num_columns)
    for spec in specs:
        checks.check_beta(spec, num_columns, tolerance, allow_leak)
    compiled = unit_tensors(unit)
    stream = torch.as_tensor(np.stack([embed(prompt, unit.layout, unit.theta) for prompt in tokens]), dtype=dtype)
    eta = torch.tensor([spec.eta for spec in specs], dtype=torch.float64)
    # propagate() holds the embedded stream before the loop rebinds the name to each layer's output.
    for _, stream, _, _ in propagate(stream, compiled.layers, scaled_weights(compiled, specs, dtype), unit, eta):  # noqa: B020
        continue  # only the stream after the read-out is kept: B residual streams per layer are too many
    return BatchTrace(layout=unit.layout, stream=stream)
