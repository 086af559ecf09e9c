"""Hand-set weights of every stage: one builder per stage, its derivation in the docstring.

Conventions (the forward pass in :mod:`construction.network` implements exactly these):

* The residual stream ``H`` is ``(D, N)``: one column ``h_i`` per token, rows named by a
  :class:`~construction.layout.Layout`. Every layer is residual: ``H <- H + layer(H)``.
* An attention head has ``query (d_head, D)``, ``key (d_head, D)`` and ``value (D, D)`` (value and
  output projection in one matrix). Its logit for query column i and key column j is
  ``s_ij = (query h_i) . (key h_j)``.
* ``softmax`` heads write ``sum_j softmax_j(s_ij) value h_j`` into column i.
* ``relu`` heads write ``(1/N) sum_j relu(s_ij) value h_j`` (Bai et al. 2023), N = number of columns.
* An MLP layer writes ``w_out relu(w_in h_i)`` into column i (the constant row ``one`` is the bias).
* Every layer carries its :class:`Stage` and its 1-based index within the stage.

``R(a) = [[cos a, -sin a], [sin a, cos a]]`` and, with ``pos_k = (cos k theta, sin k theta)``,

    pos_i^T R(a) pos_j = cos((j - i) theta + a).                                         (1)

Builders accept floats or sympy expressions for ``beta``, ``theta``, ``eta``, ``penalty``; with a
sympy argument the matrices are numpy object arrays of sympy expressions, so the identities the
construction relies on can be derived symbolically from the very matrices the network uses.
"""
from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass

import numpy as np
import sympy

from construction.layout import Layout


@dataclass(frozen=True)
class Head:
    """One attention head: ``query (d_head, D)``, ``key (d_head, D)``, ``value (D, D)``, activation name."""

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    activation: str


class Stage(enum.Enum):
    """Stage of the construction a residual stream belongs to (docs/construction.md, section 3).

    ``EMBEDDING`` is the input stream; every layer belongs to one of the others. A layer also
    carries its 1-based ``index`` within its stage (``gd`` layer t is gradient step t).
    """

    EMBEDDING = "embedding"
    HISTORY = "history"
    LABEL = "label"
    JOINT = "joint"
    GD = "gd"
    READOUT = "readout"


@dataclass(frozen=True)
class AttentionLayer:
    """A residual multi-head attention layer: ``H <- H + sum_h head_h(H)``.

    ``name`` labels its tensors and trace entries (``history.1``, ``label``, ``gd.3``, ...);
    ``stage`` and ``index`` say what it computes.
    """

    name: str
    stage: Stage
    index: int
    heads: tuple[Head, ...]


@dataclass(frozen=True)
class MLPLayer:
    """A residual ReLU MLP acting on each column: ``h <- h + w_out relu(w_in h)`` (stage ``joint``)."""

    name: str
    stage: Stage
    index: int
    w_in: np.ndarray
    w_out: np.ndarray


Layer = AttentionLayer | MLPLayer

SCALED_WEIGHTS = {Stage.HISTORY: ("query", "beta"), Stage.LABEL: ("query", "beta"), Stage.GD: ("value", "eta")}
"""Per stage, the one weight matrix that reads beta or eta, and which: a shift head's query is
``beta R(s theta)^T`` (:func:`shift_head`) and a GD head's value is ``-sign eta`` on the covariate
rows (:func:`gd_head`); no other matrix reads either. So a layer of any spec equals the layer of
the same spec at ``beta = eta = 1`` with that matrix multiplied by the parameter, entry by entry
(exactly in floating point: each entry is one product), which lets a batch of prompts share the
layers and keep their own beta and eta (:func:`construction.forward_batch`)."""


def _is_symbolic(*values) -> bool:
    return any(isinstance(value, sympy.Basic) for value in values)


def _zeros(shape: tuple[int, ...], *params) -> np.ndarray:
    """float64 zeros, or an object array of integer zeros when a parameter is symbolic."""
    if _is_symbolic(*params):
        return np.full(shape, sympy.Integer(0), dtype=object)
    return np.zeros(shape)


def rotation(angle) -> np.ndarray:
    """``R(angle) = [[cos, -sin], [sin, cos]]`` for a float or sympy ``angle``."""
    if _is_symbolic(angle):
        return np.array([[sympy.cos(angle), -sympy.sin(angle)], [sympy.sin(angle), sympy.cos(angle)]], dtype=object)
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def shift_head(layout: Layout, shift: int, beta, theta, copies: list[tuple[str, str]]) -> Head:
    """Softmax head moving slots from column ``i - shift`` into column i (``shift < 0``: from ahead).

    ``query[:, position] = beta R(shift theta)^T`` and ``key[:, position] = I_2``, so by (1)

        s_ij = beta pos_i^T R(shift theta) pos_j = beta cos((j - i + shift) theta),

    which is maximal exactly at ``j = i - shift`` while every ``|j - i + shift| theta < pi``. All
    other rows of query and key are zero, so the logits see the positions only. The value copies
    slot ``source`` to slot ``destination`` for every ``(source, destination)`` in ``copies``; the
    destinations are empty before this layer, so after it they hold the source slots of column
    ``i - shift`` up to the softmax leak (bounded in :mod:`construction.leak`).
    """
    width = layout.width
    query, key = _zeros((2, width), beta, theta), _zeros((2, width), beta, theta)
    position = layout.rows("position")
    query[:, position.start : position.stop] = beta * rotation(shift * theta).T
    key[:, position.start : position.stop] = np.eye(2, dtype=int)
    value = _zeros((width, width), beta, theta)
    for source, destination in copies:
        src, dst = layout.rows(source), layout.rows(destination)
        value[dst.start : dst.stop, src.start : src.stop] = np.eye(len(src), dtype=int)
    return Head(query=query, key=key, value=value, activation="softmax")


def doubling_layer_count(history_length: int) -> int:
    """``ceil(log2 L)``: doubling history layers needed to reach ``history.{L-1}`` (0 for L = 1)."""
    return math.ceil(math.log2(history_length)) if history_length > 1 else 0


def max_shift(history_length: int, doubling: bool) -> int:
    """Largest ``|shift|`` of a position head: 1, or ``2^(ceil(log2 L) - 1)`` with doubling layers.

    Logit offsets ``j - i + shift`` then reach ``N - 1 + max_shift`` in an N-column prompt, so
    positions never wrap iff ``(N - 1 + max_shift) theta < pi``.
    """
    if doubling and history_length > 1:
        return 2 ** (doubling_layer_count(history_length) - 1)
    return 1


def history_layers(layout: Layout, beta, theta) -> list[Layer]:
    """Stage 1, as in the paper: L-1 single-head layers with ``A = R(theta)``.

    Layer r (r = 1..L-1) has logits ``beta cos((j - i + 1) theta)`` (peak at j = i-1) and copies
    ``history.{r-1}`` (``token`` for r = 1) of column i-1 into ``history.r`` of column i. By
    induction column i then holds ``o_i, o_{i-1}, ..., o_{i-L+1}``.
    """
    return [
        AttentionLayer(
            name=f"history.{r}",
            stage=Stage.HISTORY,
            index=r,
            heads=(shift_head(layout, 1, beta, theta, [(layout.history_slot(r - 1), layout.history_slot(r))]),),
        )
        for r in range(1, layout.history_length)
    ]


def doubling_history_layers(layout: Layout, beta, theta) -> list[Layer]:
    """Stage 1, doubling variant (not in the paper): ceil(log2 L) single-head layers.

    Layer r uses ``A^(2^(r-1)) = R(2^(r-1) theta)``, peaking at ``j = i - s`` with ``s = 2^(r-1)``,
    and copies the whole accumulated block ``history.0..s-1`` of column i-s into
    ``history.s..2s-1`` of column i (truncated at L-1); the layer is named ``history.shift{s}``.
    Since ``history.q`` of column i-s is ``o_{i-s-q}``, column i afterwards holds
    ``o_i..o_{i-2s+1}``: the same features as the sequential layers after ``2s - 1`` of them.
    """
    layers: list[Layer] = []
    for index in range(1, doubling_layer_count(layout.history_length) + 1):
        shift = 2 ** (index - 1)
        copies = [
            (layout.history_slot(q), layout.history_slot(shift + q))
            for q in range(shift)
            if shift + q < layout.history_length
        ]
        head = shift_head(layout, shift, beta, theta, copies)
        layers.append(AttentionLayer(name=f"history.shift{shift}", stage=Stage.HISTORY, index=index, heads=(head,)))
    return layers


def label_layers(layout: Layout, beta, theta) -> list[Layer]:
    """Stage 2: m single-head layers with ``B = R(-theta)`` (the future matrix).

    Logits ``beta cos((j - i - 1) theta)`` peak at j = i+1: layer r copies ``future.{r-1}``
    (``token`` for r = 1) of column i+1 into ``future.r`` of column i, so column i holds
    ``o_{i+1}, ..., o_{i+m}``. Attending forward is why the network is non-causal.
    Named ``label`` when m = 1, ``label.r`` otherwise.
    """
    m = layout.future_length
    return [
        AttentionLayer(
            name="label" if m == 1 else f"label.{r}",
            stage=Stage.LABEL,
            index=r,
            heads=(shift_head(layout, -1, beta, theta, [("token" if r == 1 else f"future.{r - 1}", f"future.{r}")]),),
        )
        for r in range(1, m + 1)
    ]


def joint_one_hot_layer(layout: Layout) -> MLPLayer:
    """Theorem 2 variant: exact ReLU MLP writing the joint one-hot of ``future.1..m`` into ``joint``.

    Hidden unit u = (u_1, ..., u_m) (index ``sum_r u_r p^(m-r)``, u_1 most significant) computes
    ``relu(sum_r future.r[u_r] - (m - 1))``. For 0/1 one-hot inputs the sum is m exactly when every
    ``future.r`` equals ``e(u_r)`` and at most m-1 otherwise, so the unit is ``prod_r future.r[u_r]``
    (for m = 2: ``relu(a_u + b_v - 1) = a_u b_v``). The unit's output is copied into ``joint[u]``.
    ReLU is 1-Lipschitz, so an input error of at most e per coordinate gives at most m e.
    """
    p, m = layout.num_tokens, layout.future_length
    w_in, w_out = np.zeros((p**m, layout.width)), np.zeros((layout.width, p**m))
    for index, digits in enumerate(itertools.product(range(p), repeat=m)):
        for r, digit in enumerate(digits, start=1):
            w_in[index, layout.row(f"future.{r}", digit)] = 1.0
        w_in[index, layout.row("one")] = -(m - 1)
        w_out[layout.row("joint", index), index] = 1.0
    return MLPLayer(name="joint", stage=Stage.JOINT, index=1, w_in=w_in, w_out=w_out)


def gd_head(layout: Layout, k: int, sign: int, eta, penalty) -> Head:
    """One ReLU head of a gradient step on row k of W (Bai et al. 2023, Theorem 4).

    With ``w_k`` read from the query column's ``weights.k`` and ``x_j``, ``y_j``, ``D_j`` from the
    key column (``D_j`` = sum of the ``exclusion_rows``: 0 on samples, >= 1 elsewhere),

        query h_i = [w_k; 1],   key h_j = [sign x_j; -sign y_jk - penalty D_j],
        s_ij = sign (<w_k, x_j> - y_jk) - penalty D_j,     value h_j = -sign eta x_j -> weights.k.

    For a sample (D_j = 0) the pair sign = +1, -1 writes, since ``relu(z) - relu(-z) = z``,

        -(eta/N) sum_j (<w_k, x_j> - y_jk) x_j = -eta grad_{w_k} (1/2N) sum_samples ||W x_j - y_j||^2,

    and a non-sample adds nothing once ``penalty > |<w_k, x_j> - y_jk|``. Every column holds the
    same copy of W, so every copy takes the same exact gradient step.
    """
    p_l = layout.feature_dim
    features, weights = layout.feature_rows(), layout.rows(f"weights.{k}")
    query = _zeros((p_l + 1, layout.width), eta, penalty)
    key = _zeros((p_l + 1, layout.width), eta, penalty)
    value = _zeros((layout.width, layout.width), eta, penalty)
    for a, feature in enumerate(features):
        query[a, weights[a]] = 1
        key[a, feature] = sign
        value[weights[a], feature] = -sign * eta
    query[p_l, layout.row("one")] = 1
    key[p_l, layout.target_rows()[k]] = -sign
    for row in layout.exclusion_rows():
        key[p_l, row] = -penalty
    return Head(query=query, key=key, value=value, activation="relu")


def gd_layer(layout: Layout, step: int, eta, penalty) -> AttentionLayer:
    """Stage 3: layer ``gd.step`` with 2 p^m ReLU heads, one pair per row of W (see :func:`gd_head`).

    One exact gradient step ``W <- W - (eta/N) sum_samples (W x_j - y_j) x_j^T``.
    """
    heads = tuple(gd_head(layout, k, sign, eta, penalty) for k in range(layout.target_dim) for sign in (1, -1))
    return AttentionLayer(name=f"gd.{step}", stage=Stage.GD, index=step, heads=heads)


def readout_head(layout: Layout, k: int, sign: int) -> Head:
    """One ReLU head of the read-out of entry k of ``W x``.

    ``query h_i = x_i``, ``key h_j = sign w_k`` (column j's copy of W), so ``s_ij = sign <w_k, x_i>``
    for every j; the value writes ``sign * one = sign`` into ``output[k]``. The head adds
    ``(1/N) sum_j relu(sign <w_k, x_i>) sign = sign relu(sign <w_k, x_i>)``; the pair adds
    ``relu(z) - relu(-z) = z = <w_k, x_i>``.
    """
    features, weights = layout.feature_rows(), layout.rows(f"weights.{k}")
    query, key = np.zeros((layout.feature_dim, layout.width)), np.zeros((layout.feature_dim, layout.width))
    for a, feature in enumerate(features):
        query[a, feature] = 1.0
        key[a, weights[a]] = float(sign)
    value = np.zeros((layout.width, layout.width))
    value[layout.row("output", k), layout.row("one")] = float(sign)
    return Head(query=query, key=key, value=value, activation="relu")


def readout_layer(layout: Layout) -> AttentionLayer:
    """Stage 4: 2 p^m ReLU heads writing ``W_T x_i`` into ``output`` of every column i.

    The prediction of the network is ``output`` of the last column, ``W_T x_test``.
    """
    heads = tuple(readout_head(layout, k, sign) for k in range(layout.target_dim) for sign in (1, -1))
    return AttentionLayer(name="readout", stage=Stage.READOUT, index=1, heads=heads)
