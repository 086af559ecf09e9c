"""The assembled network: embedding, forward pass with a full trace, and parameter checks.

Depth ``(L-1) + m + [1 if m >= 2] + T + 1`` with the sequential history layers, or
``ceil(log2 L) + m + [1 if m >= 2] + T + 1`` with the doubling ones. Layer names, in order:
``history.1..L-1`` (doubling: ``history.shift1``, ``history.shift2``, ``history.shift4``, ...),
``label`` (or ``label.1..m``), ``joint`` (m >= 2, an MLP), ``gd.1..T``, ``readout``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from construction import leak
from construction.layout import Layout, build_layout
from construction.weights import (
    AttentionLayer,
    MLPLayer,
    doubling_history_layers,
    gd_layer,
    history_layers,
    joint_one_hot_layer,
    label_layers,
    max_shift,
    readout_layer,
)

DEFAULT_TOLERANCE = 1e-9
"""Largest accepted :func:`construction.leak.construction_error_bound` of a prompt."""


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
    residuals: tuple[torch.Tensor, ...]
    attn_logits: dict[str, torch.Tensor]
    attn_weights: dict[str, torch.Tensor]
    prediction: torch.Tensor

    def residual(self, layer: str) -> torch.Tensor:
        """``(D, N)`` stream after ``layer`` (``"embedding"`` for the input)."""
        if layer == "embedding":
            return self.residuals[0]
        if layer not in self.layer_names:
            raise ValueError(f"layer={layer!r} does not exist; expected 'embedding' or one of {self.layer_names}")
        return self.residuals[self.layer_names.index(layer) + 1]

    def slot(self, name: str, layer: str = "readout") -> torch.Tensor:
        """``(size, N)`` rows of slot ``name`` after ``layer``."""
        rows = self.layout.rows(name)
        return self.residual(layer)[rows.start : rows.stop]

    def features(self, layer: str) -> torch.Tensor:
        """``(N, pL)`` covariates x of every column after ``layer``."""
        return self.residual(layer)[self.layout.feature_rows()].T


@dataclass(frozen=True)
class Network:
    """Hand-wired transformer (see :func:`build_network`); call :meth:`forward` on a prompt."""

    layout: Layout
    layers: tuple[AttentionLayer | MLPLayer, ...]
    beta: float
    theta: float
    eta: float
    penalty: float
    steps: int
    doubling: bool
    tolerance: float
    allow_leak: bool
    _torch_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def error_bound(self, num_columns: int) -> float:
        """:func:`construction.leak.construction_error_bound` for a prompt of ``num_columns`` columns."""
        return leak.construction_error_bound(
            self.beta, self.theta, num_columns, self.layout, self.doubling, self.steps, self.eta, self.penalty
        )

    def forward(self, tokens, dtype: torch.dtype = torch.float64, record_attention: bool = True) -> Trace:
        """Run the prompt ``tokens`` (demo_1, p, demo_2, p, ..., demo_n, p, test) through every layer.

        ``record_attention=False`` leaves ``attn_logits`` and ``attn_weights`` empty (they take
        ``2 * heads * N^2`` numbers per layer; sweeps that need only predictions can skip them).

        Raises ``ValueError`` for a malformed prompt, a theta that wraps, a beta too small for the
        prompt (unless ``allow_leak``: then a warning states the error bound), a step size at or
        above ``2 / lambda_max`` of this prompt's Hessian, or a penalty that fails to switch off a
        non-sample.
        """
        tokens = check_prompt(tokens, self.layout)
        num_columns = len(tokens) + 1
        self._check_angle(num_columns)
        self._check_beta(num_columns)
        stream = torch.as_tensor(embed(tokens, self.layout, self.theta), dtype=dtype)
        residuals, logits_by_layer, weights_by_layer = [stream], {}, {}
        for layer, weights in zip(self.layers, self._torch_weights(dtype)):
            if layer.name == "gd.1":
                self._check_step_size(stream)
            if isinstance(layer, MLPLayer):
                update = weights["w_out"] @ torch.relu(weights["w_in"] @ stream)
            else:
                logits, attention = attend(stream, weights)
                if layer.name.startswith("gd."):
                    self._check_penalty(stream, logits)
                values = weights["value"] @ stream[weights["value_rows"]]
                update = (values @ attention.transpose(1, 2)).sum(0)
                if record_attention:
                    logits_by_layer[layer.name], weights_by_layer[layer.name] = logits, attention
            stream = stream + update
            residuals.append(stream)
        output = self.layout.rows("output")
        return Trace(
            layout=self.layout,
            layer_names=tuple(layer.name for layer in self.layers),
            residuals=tuple(residuals),
            attn_logits=logits_by_layer,
            attn_weights=weights_by_layer,
            prediction=stream[output.start : output.stop, -1],
        )

    def _torch_weights(self, dtype: torch.dtype) -> list[dict]:
        """Per layer, the stacked matrices as tensors of ``dtype``, cached.

        Each attention matrix is stored with only the residual rows it reads (``*_rows``): its
        other columns are exactly zero, so dropping them changes no sum and saves most of the work.
        """
        if dtype not in self._torch_cache:
            converted = []
            for layer in self.layers:
                if isinstance(layer, MLPLayer):
                    mlp = {name: torch.as_tensor(getattr(layer, name), dtype=dtype) for name in ("w_in", "w_out")}
                    converted.append(mlp)
                    continue
                tensors = {"activation": layer.heads[0].activation}
                for part in ("query", "key", "value"):
                    stacked = np.stack([getattr(head, part) for head in layer.heads])
                    rows = np.flatnonzero(np.abs(stacked).sum(axis=(0, 1)))
                    tensors[part] = torch.as_tensor(stacked[:, :, rows], dtype=dtype)
                    tensors[f"{part}_rows"] = torch.as_tensor(rows)
                converted.append(tensors)
            self._torch_cache[dtype] = converted
        return self._torch_cache[dtype]

    def _check_angle(self, num_columns: int) -> None:
        """Refuse a theta for which some offset ``|j - i + s| theta`` reaches pi (positions wrap)."""
        shift = max_shift(self.layout.history_length, self.doubling)
        reach = (num_columns - 1 + shift) * self.theta
        if reach >= math.pi:
            raise ValueError(
                f"theta={self.theta:.6g} wraps for a prompt of N={num_columns} columns: "
                f"(N-1+{shift})*theta = {reach:.6g} >= pi; expected theta < {math.pi / (num_columns - 1 + shift):.6g}"
            )

    def _check_beta(self, num_columns: int) -> None:
        """Refuse (or, with ``allow_leak``, warn about) a beta whose error bound exceeds the tolerance."""
        bound = self.error_bound(num_columns)
        if bound <= self.tolerance:
            return
        needed = leak.choose_beta(
            self.tolerance, self.theta, num_columns, self.layout, self.doubling, self.steps, self.eta, self.penalty
        )
        message = (
            f"beta={self.beta:.6g} too small for a prompt of N={num_columns} columns: the construction "
            f"error bound is {bound:.3g} > tolerance {self.tolerance:.3g}; expected beta >= {needed:.6g}"
        )
        if not self.allow_leak:
            raise ValueError(message)
        warnings.warn(message, stacklevel=3)

    def _check_step_size(self, stream: torch.Tensor) -> None:
        """Refuse eta >= 2 / lambda_max of ``(1/N) sum_samples x x^T`` read off the stage-2 stream."""
        samples = exclusion_count(stream, self.layout) < 0.5
        covariates = stream[self.layout.feature_rows()][:, samples].to(torch.float64)
        hessian = covariates @ covariates.T / stream.shape[1]
        lambda_max = float(torch.linalg.eigvalsh(hessian)[-1])
        if self.eta * lambda_max >= 2.0:
            raise ValueError(
                f"eta={self.eta:.6g} >= 2/lambda_max = {2.0 / lambda_max:.6g} for this prompt "
                f"(lambda_max of (1/N) sum_samples x x^T is {lambda_max:.6g}): gradient descent diverges; "
                f"expected eta < {2.0 / lambda_max:.6g}"
            )

    def _check_penalty(self, stream: torch.Tensor, logits: torch.Tensor) -> None:
        """Refuse a penalty that leaves a positive GD score on a non-sample key column."""
        outside = exclusion_count(stream, self.layout) >= 0.5
        worst = float(logits[:, :, outside].max()) if bool(outside.any()) else 0.0
        if worst > 0.0:
            raise ValueError(
                f"penalty={self.penalty:.6g} too small: a non-sample keeps GD score {worst:.3g} > 0; "
                f"expected penalty > max |<w_k, x_j> - y_jk| over non-samples"
            )


def attend(stream: torch.Tensor, weights: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``s[h, i, j] = (Q_h h_i) . (K_h h_j)`` and attention (softmax over j, or relu / N).

    ``weights`` holds the stacked ``query``/``key`` restricted to the rows they read
    (see :meth:`Network._torch_weights`).
    """
    queries = weights["query"] @ stream[weights["query_rows"]]
    keys = weights["key"] @ stream[weights["key_rows"]]
    logits = queries.transpose(1, 2) @ keys
    if weights["activation"] == "softmax":
        return logits, torch.softmax(logits, dim=-1)
    return logits, torch.relu(logits) / stream.shape[1]


def exclusion_count(stream: torch.Tensor, layout: Layout) -> torch.Tensor:
    """``D_j`` of every column (0 on regression samples, >= 1 elsewhere, up to the leak)."""
    return stream[layout.exclusion_rows()].sum(0)


def check_prompt(tokens, layout: Layout) -> np.ndarray:
    """Validate a prompt and return it as an int64 array.

    Expects a 1-d sequence of integers in ``0..p`` containing at least one delimiter ``p``, every
    demonstration (maximal delimiter-free run before the last delimiter) of length >= L + m so that
    it yields a regression sample, and a test sequence (after the last delimiter) of length >= L.
    """
    p, L, m = layout.num_tokens, layout.history_length, layout.future_length
    array = np.asarray(tokens)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"tokens: shape {array.shape}, dtype {array.dtype}; expected a 1-d integer sequence")
    if array.size and (array.min() < 0 or array.max() > p):
        raise ValueError(
            f"tokens: values in [{array.min()}, {array.max()}]; expected tokens 0..{p - 1} and delimiter {p}"
        )
    delimiters = np.flatnonzero(array == p)
    if delimiters.size == 0:
        raise ValueError(f"tokens: no delimiter {p}; expected demo_1, {p}, ..., demo_n, {p}, test sequence")
    starts = np.concatenate([[0], delimiters[:-1] + 1])
    for index, (start, stop) in enumerate(zip(starts, delimiters), start=1):
        if stop - start < L + m:
            raise ValueError(
                f"history_length L={L} plus future_length m={m} exceeds demonstration {index} of length "
                f"{stop - start}; expected every demonstration to have at least L+m = {L + m} tokens"
            )
    test_length = array.size - delimiters[-1] - 1
    if test_length < L:
        raise ValueError(f"test sequence length {test_length} < history_length L={L}; expected at least L tokens")
    return array.astype(np.int64)


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


def default_penalty(num_tokens: int, history_length: int) -> float:
    """``10 p L``: comfortably above ``|<w_k, x> - y_k| <= L max|W| + 1`` for the O(1) iterates seen."""
    return 10.0 * num_tokens * history_length


def check_parameters(p: int, L: int, T: int, m: int, eta: float, beta: float, theta: float, penalty: float) -> None:
    """Raise ``ValueError`` naming the first construction parameter out of its range."""
    for name, value, least in (("p", p, 2), ("L", L, 1), ("T", T, 1), ("future_length", m, 1)):
        if not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"{name}={value!r}: expected an integer >= {least}")
    for name, value in (("eta", eta), ("beta", beta), ("penalty", penalty)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}={value!r}: expected a finite number > 0")
    if not 0 < theta < math.pi:
        raise ValueError(f"theta={theta!r}: expected 0 < theta < pi (and N*theta < pi for an N-column prompt)")


def build_network(
    p: int,
    L: int,
    T: int,
    eta: float,
    beta: float,
    theta: float,
    *,
    future_length: int = 1,
    doubling: bool = False,
    penalty: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    allow_leak: bool = False,
) -> Network:
    """Build the network for ``p`` tokens, history ``L``, ``T`` GD steps of size ``eta``.

    ``beta`` is the softmax scale and ``theta`` the position angle of the history/label heads
    (pick beta with :func:`construction.leak.choose_beta`); ``future_length = m >= 2`` is the
    Theorem 2 variant; ``doubling`` uses ceil(log2 L) history layers; ``penalty`` (default
    ``10 p L``) switches non-samples off in the GD heads. ``tolerance`` bounds the accepted
    construction error bound of a prompt (``allow_leak`` turns the refusal into a warning).
    """
    penalty = default_penalty(p, L) if penalty is None else penalty
    check_parameters(p, L, T, future_length, eta, beta, theta, penalty)
    layout = build_layout(p, L, future_length)
    stage1 = doubling_history_layers(layout, beta, theta) if doubling else history_layers(layout, beta, theta)
    layers = stage1 + label_layers(layout, beta, theta)
    if future_length >= 2:
        layers.append(joint_one_hot_layer(layout))
    layers += [gd_layer(layout, step, eta, penalty) for step in range(1, T + 1)]
    layers.append(readout_layer(layout))
    return Network(
        layout=layout,
        layers=tuple(layers),
        beta=float(beta),
        theta=float(theta),
        eta=float(eta),
        penalty=float(penalty),
        steps=T,
        doubling=doubling,
        tolerance=tolerance,
        allow_leak=allow_leak,
    )
