"""The assembled network: embedding and forward pass with a full trace (refusals: construction.checks).

Depth ``(L-1) + m + [1 if m >= 2] + T + 1`` with the sequential history layers, or
``ceil(log2 L) + m + [1 if m >= 2] + T + 1`` with the doubling ones. Layer names, in order:
``history.1..L-1`` (doubling: ``history.shift1``, ``history.shift2``, ``history.shift4``, ...),
``label`` (or ``label.1..m``), ``joint`` (m >= 2, an MLP), ``gd.1..T``, ``readout``; each layer
also carries its :class:`~construction.weights.Stage` and its index within the stage.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from construction import checks
from construction.layout import Layout
from construction.spec import ConstructionSpec
from construction.weights import (
    Layer,
    MLPLayer,
    Stage,
    doubling_history_layers,
    gd_layer,
    history_layers,
    joint_one_hot_layer,
    label_layers,
    readout_layer,
)

DEFAULT_TOLERANCE = 1e-9
"""Largest accepted construction-error bound (:meth:`ConstructionSpec.error_bound`) of a prompt."""


@dataclass(frozen=True)
class Trace:
    """Everything a forward pass computed, as torch tensors of the pass's dtype.

    ``residuals[0]`` is the embedding and ``residuals[l]`` the stream after ``layer_names[l-1]``;
    each is ``(D, N)`` with one column per token (column 0 is the leading delimiter, column n the
    n-th prompt token). ``attn_logits[name]`` and ``attn_weights[name]`` are ``(heads, N, N)``
    indexed ``[head, query i, key j]`` for every attention layer (not for the ``joint`` MLP; both
    dicts are empty when the pass ran with ``record_attention=False``):
    softmax weights for softmax heads, ``relu(s_ij) / N`` for ReLU heads. ``prediction`` is
    ``output`` of the last column, the network's ``W_T x_test`` (shape ``(p^m,)``).
    """

    layout: Layout
    layer_names: tuple[str, ...]
    layer_stages: tuple[Stage, ...]
    residuals: tuple[torch.Tensor, ...]
    attn_logits: dict[str, torch.Tensor]
    attn_weights: dict[str, torch.Tensor]
    prediction: torch.Tensor

    def residual(self, layer: str) -> torch.Tensor:
        """``(D, N)`` stream after ``layer`` (``"embedding"`` for the input)."""
        if layer == Stage.EMBEDDING.value:
            return self.residuals[0]
        if layer not in self.layer_names:
            raise ValueError(f"layer={layer!r} does not exist; expected 'embedding' or one of {self.layer_names}")
        return self.residuals[self.layer_names.index(layer) + 1]

    def layers_of(self, *stages: Stage) -> tuple[str, ...]:
        """Names of the layers of ``stages``, in forward order."""
        return tuple(name for name, stage in zip(self.layer_names, self.layer_stages) if stage in stages)

    def slot(self, name: str, layer: str = "readout") -> torch.Tensor:
        """``(size, N)`` rows of slot ``name`` after ``layer``."""
        rows = self.layout.rows(name)
        return self.residual(layer)[rows.start : rows.stop]

    def features(self, layer: str) -> torch.Tensor:
        """``(N, pL)`` covariates x of every column after ``layer``."""
        return self.residual(layer)[self.layout.feature_rows()].T


@dataclass(frozen=True)
class Network:
    """Hand-wired transformer of ``spec`` (see :func:`build_network`); call :meth:`forward` on a prompt.

    ``tolerance`` is the largest accepted construction-error bound of a prompt; ``allow_leak``
    turns that refusal into a warning.
    """

    spec: ConstructionSpec
    layers: tuple[Layer, ...]
    tolerance: float
    allow_leak: bool
    _torch_cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def layout(self) -> Layout:
        """The residual-stream layout (``spec.layout``)."""
        return self.spec.layout

    def forward(self, tokens, dtype: torch.dtype = torch.float64, record_attention: bool = True,
                patch: Callable[[str, torch.Tensor], torch.Tensor] | None = None) -> Trace:
        """Run the prompt ``tokens`` (demo_1, p, demo_2, p, ..., demo_n, p, test) through every layer.

        ``record_attention=False`` leaves ``attn_logits`` and ``attn_weights`` empty (they take
        ``2 * heads * N^2`` numbers per layer; sweeps that need only predictions can skip them).
        ``patch(name, stream)`` is an intervention: it is called with ``"embedding"`` and the
        input stream, then with each layer's name and the stream after that layer, and what it
        returns (a ``(D, N)`` tensor) is what the next layer reads and the trace records.
        Many prompts at once, each with its own spec: :func:`construction.forward_batch`.

        Raises ``ValueError`` (:mod:`construction.checks`) for a malformed prompt, a theta that
        wraps, a beta too small for the prompt (unless ``allow_leak``: then a warning states the
        error bound), a step size at or above ``2 / lambda_max`` of this prompt's Hessian (checked
        on the stream entering the first GD layer), or a penalty that fails to switch off a
        non-sample (checked on every GD layer's scores).
        """
        tokens = checks.check_prompt(tokens, self.layout)
        num_columns = len(tokens) + 1
        checks.check_angle(self.spec, num_columns)
        checks.check_beta(self.spec, num_columns, self.tolerance, self.allow_leak)
        stream = torch.as_tensor(embed(tokens, self.layout, self.spec.theta), dtype=dtype)
        if patch is not None:
            stream = patch(Stage.EMBEDDING.value, stream)
        stream = stream[None]
        eta = torch.tensor([self.spec.eta], dtype=torch.float64)
        batch_patch = None if patch is None else (lambda name, batch: patch(name, batch[0])[None])
        residuals, logits_by_layer, weights_by_layer = [stream[0]], {}, {}
        # propagate() holds the embedded stream before the loop rebinds the name to each layer's output.
        for layer, stream, logits, attention in propagate(stream, self.layers, self.torch_weights(dtype), self.spec,  # noqa: B020
                                                          eta, batch_patch):
            residuals.append(stream[0])
            if record_attention and logits is not None:  # then attention is too (propagate: None for both at an MLP)
                logits_by_layer[layer.name], weights_by_layer[layer.name] = logits[0], attention[0]  # type: ignore[index]
        output = self.layout.rows("output")
        return Trace(
            layout=self.layout,
            layer_names=tuple(layer.name for layer in self.layers),
            layer_stages=tuple(layer.stage for layer in self.layers),
            residuals=tuple(residuals),
            attn_logits=logits_by_layer,
            attn_weights=weights_by_layer,
            prediction=residuals[-1][output.start : output.stop, -1],
        )

    def torch_weights(self, dtype: torch.dtype) -> list[dict]:
        """Per layer, the heads' matrices as tensors of ``dtype``, cached.

        An attention layer keeps, for each head, only the residual rows its matrices read and the
        rows its value writes: ``query``, ``key`` ``(1, heads, d_head, r)`` and ``value``
        ``(1, heads, out, r)`` with the rows they read in ``query_rows``, ``key_rows``,
        ``value_rows`` ``(heads, r)`` and the rows the value writes in ``value_out_rows``
        ``(heads, out)``; the leading 1 is the batch dimension (shared by every prompt). The
        dropped entries are exact zeros, so no sum changes and most of the work is saved. An MLP
        layer keeps ``w_in`` and ``w_out``.
        """
        if dtype not in self._torch_cache:
            self._torch_cache[dtype] = [_layer_tensors(layer, dtype) for layer in self.layers]
        return self._torch_cache[dtype]


def _nonzero_rows(matrices: list[np.ndarray], axis: int, what: str) -> np.ndarray:
    """``(heads, r)``: per matrix, the indices along ``axis`` of its nonzero rows (``axis=1``) or
    columns (``axis=0``); every head of a layer must have as many (``what`` names them)."""
    rows = [np.flatnonzero(np.abs(matrix).sum(axis=axis)) for matrix in matrices]
    if len({index.size for index in rows}) != 1:
        raise ValueError(f"{what}: counts {[index.size for index in rows]} differ between heads; expected equal counts")
    return np.stack(rows)


def _layer_tensors(layer: Layer, dtype: torch.dtype) -> dict:
    """One layer's entry of :meth:`Network.torch_weights`."""
    if isinstance(layer, MLPLayer):
        return {name: torch.as_tensor(getattr(layer, name), dtype=dtype) for name in ("w_in", "w_out")}
    tensors: dict[str, str | torch.Tensor] = {"activation": layer.heads[0].activation}
    values = [head.value for head in layer.heads]
    written = _nonzero_rows(values, axis=1, what=f"rows written by the heads of {layer.name}")
    values = [value[rows] for value, rows in zip(values, written)]
    for part, matrices in (("query", [head.query for head in layer.heads]),
                           ("key", [head.key for head in layer.heads]), ("value", values)):
        read = _nonzero_rows(matrices, axis=0, what=f"rows read by the {part} of {layer.name}")
        tensors[part] = torch.as_tensor(np.stack([matrix[:, rows] for matrix, rows in zip(matrices, read)]),
                                        dtype=dtype)[None]
        tensors[f"{part}_rows"] = torch.as_tensor(read)
    tensors["value_out_rows"] = torch.as_tensor(written)
    return tensors


def propagate(stream: torch.Tensor, layers: tuple[Layer, ...], weights: list[dict], spec: ConstructionSpec,
              eta: torch.Tensor, patch: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
              ) -> Iterator[tuple[Layer, torch.Tensor, torch.Tensor | None, torch.Tensor | None]]:
    """Run a batch of embedded prompts ``stream (B, D, N)`` through ``layers``; yield, per layer,
    ``(layer, stream after it, logits, attention)`` (``(B, heads, N, N)``; ``None`` for an MLP).

    ``weights`` are the layers' tensors (:meth:`Network.torch_weights`), each with a leading
    dimension of 1 (shared) or B (one per prompt); ``eta (B,)`` is each prompt's step size, read
    by the step-size refusal on the stream entering GD step 1; ``spec`` gives the layout and the
    penalty, read by the penalty refusal on every GD layer's scores (:mod:`construction.checks`).
    A layer adds ``sum_h value_h H attention_h^T`` (head outputs summed, then added to the stream).
    ``patch(layer name, stream)``, if given, replaces the stream after each layer (an intervention).
    """
    for layer, tensors in zip(layers, weights):
        if layer.stage is Stage.GD and layer.index == 1:
            checks.check_step_size(stream, spec.layout, eta)
        if isinstance(layer, MLPLayer):
            stream = stream + tensors["w_out"] @ torch.relu(tensors["w_in"] @ stream)
            if patch is not None:
                stream = patch(layer.name, stream)
            yield layer, stream, None, None
            continue
        logits, attention = attend(stream, tensors)
        if layer.stage is Stage.GD:
            checks.check_penalty(stream, logits, spec)
        values = tensors["value"] @ stream[:, tensors["value_rows"]]
        written = (attention @ values.transpose(-1, -2)).transpose(-1, -2).flatten(1, 2)
        update = torch.zeros_like(stream).index_add_(1, tensors["value_out_rows"].flatten(), written)
        stream = stream + update
        if patch is not None:
            stream = patch(layer.name, stream)
        yield layer, stream, logits, attention


def attend(stream: torch.Tensor, weights: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``s[b, h, i, j] = (query_h h_i) . (key_h h_j)`` of prompt b and attention (softmax
    over j, or relu / N) for streams ``(B, D, N)``.

    ``weights`` holds each head's ``query``/``key`` restricted to the rows it reads
    (see :meth:`Network.torch_weights`).
    """
    queries = weights["query"] @ stream[:, weights["query_rows"]]
    keys = weights["key"] @ stream[:, weights["key_rows"]]
    logits = queries.transpose(-1, -2) @ keys
    if weights["activation"] == "softmax":
        return logits, torch.softmax(logits, dim=-1)
    return logits, torch.relu(logits).div_(stream.shape[-1])


def embed(tokens: np.ndarray, layout: Layout, theta: float) -> np.ndarray:
    """Input matrix ``(D, N)``, N = len(tokens) + 1, float64.

    Column 0 is a leading delimiter, so every demonstration (the first included) is preceded by a
    delimiter; column c holds prompt token c-1. Each column gets the one-hot ``token`` (delimiter
    = row p), ``position = (cos k theta, sin k theta)`` with global index k = c + 1, ``one = 1``
    and ``test = 1`` after the last delimiter; every other slot (history, future, joint, W_0 = 0,
    output) starts at 0.
    """
    columns = np.concatenate([[layout.num_tokens], tokens])
    stream = np.zeros((layout.width, columns.size))
    stream[layout.rows("token").start + columns, np.arange(columns.size)] = 1.0
    index = np.arange(1, columns.size + 1)
    position = layout.rows("position")
    stream[position.start] = np.cos(index * theta)
    stream[position.start + 1] = np.sin(index * theta)
    stream[layout.row("one")] = 1.0
    last_delimiter = np.flatnonzero(columns == layout.num_tokens)[-1]
    stream[layout.row("test"), last_delimiter + 1 :] = 1.0
    return stream


def build_network(spec: ConstructionSpec, *, tolerance: float = DEFAULT_TOLERANCE, allow_leak: bool = False) -> Network:
    """The network of ``spec``: stage 1 (history, or doubling), stage 2 (labels), the joint MLP when
    m >= 2, T gradient-descent layers, the read-out (one builder per stage, :mod:`construction.weights`).

    Pick beta with :func:`construction.parameters_for_prompt` (or :func:`construction.leak.choose_beta`).
    ``tolerance`` bounds the accepted construction-error bound of a prompt (``allow_leak`` turns
    the refusal into a warning).
    """
    layout = spec.layout
    if spec.doubling:
        stage1 = doubling_history_layers(layout, spec.beta, spec.theta)
    else:
        stage1 = history_layers(layout, spec.beta, spec.theta)
    layers = stage1 + label_layers(layout, spec.beta, spec.theta)
    if spec.future_length >= 2:
        layers.append(joint_one_hot_layer(layout))
    layers += [gd_layer(layout, step, spec.eta, spec.penalty) for step in range(1, spec.gd_steps + 1)]
    layers.append(readout_layer(layout))
    return Network(spec=spec, layers=tuple(layers), tolerance=tolerance, allow_leak=allow_leak)
