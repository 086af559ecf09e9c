"""Symbolic checks (sympy) of the identities the hand-set weights rely on.

The builders of :mod:`construction.weights` are called with sympy symbols, so every score below is
derived from the very matrices the network uses, not from a restatement of them.
"""
import itertools

import numpy as np
import pytest
import sympy

from construction.layout import build_layout
from construction.weights import (
    doubling_history_layers,
    gd_layer,
    history_layers,
    joint_one_hot_layer,
    label_layers,
    readout_layer,
    shift_head,
)

BETA, THETA, ETA, PENALTY = sympy.symbols("beta theta eta R", positive=True)
I, J = sympy.symbols("i j", integer=True)


def symbolic_column(layout, prefix: str, position_index) -> np.ndarray:
    """A residual column of free symbols, except the fixed ``one = 1`` and ``position = (cos k theta, sin k theta)``."""
    column = np.array([sympy.Symbol(f"{prefix}{row}", real=True) for row in range(layout.width)], dtype=object)
    column[layout.row("one")] = sympy.Integer(1)
    position = layout.rows("position")
    column[position.start] = sympy.cos(position_index * THETA)
    column[position.start + 1] = sympy.sin(position_index * THETA)
    return column


def exact(matrix: np.ndarray) -> np.ndarray:
    """The matrix with float entries as exact sympy rationals (binary floats are rationals)."""
    convert = lambda entry: sympy.Rational(entry) if isinstance(entry, float) else sympy.sympify(entry)  # noqa: E731
    return np.vectorize(convert, otypes=[object])(matrix)


def score(head, query_column, key_column):
    """``s_ij = (query h_i) . (key h_j)`` for one head, as a sympy expression."""
    return sympy.expand((exact(head.query) @ query_column) @ (exact(head.key) @ key_column))


def slot(layout, column, name):
    rows = layout.rows(name)
    return column[rows.start : rows.stop]


@pytest.mark.parametrize("p, L", [(2, 3), (3, 2)])
def test_history_and_label_scores_are_beta_cos_of_the_offset(p, L):
    """A layer (history): beta cos((j - i + 1) theta); B layer (label): beta cos((j - i - 1) theta)."""
    layout = build_layout(p, L)
    h_i, h_j = symbolic_column(layout, "a", I), symbolic_column(layout, "b", J)
    (a_head,) = history_layers(layout, BETA, THETA)[0].heads
    (b_head,) = label_layers(layout, BETA, THETA)[0].heads
    assert sympy.simplify(score(a_head, h_i, h_j) - BETA * sympy.cos((J - I + 1) * THETA)) == 0
    assert sympy.simplify(score(b_head, h_i, h_j) - BETA * sympy.cos((J - I - 1) * THETA)) == 0


def test_doubling_layers_scores_are_beta_cos_of_the_shifted_offset():
    """Doubling layer r uses A^s = R(s theta), s = 2^(r-1): score beta cos((j - i + s) theta)."""
    layout = build_layout(2, 5)
    layers = doubling_history_layers(layout, BETA, THETA)
    assert [layer.name for layer in layers] == ["history.shift1", "history.shift2", "history.shift4"]
    h_i, h_j = symbolic_column(layout, "a", I), symbolic_column(layout, "b", J)
    for shift, layer in zip((1, 2, 4), layers):
        (head,) = layer.heads
        assert sympy.simplify(score(head, h_i, h_j) - BETA * sympy.cos((J - I + shift) * THETA)) == 0


def test_shift_head_score_for_a_backward_shift():
    layout = build_layout(2, 2)
    head = shift_head(layout, -3, BETA, THETA, [("token", "history.1")])
    h_i, h_j = symbolic_column(layout, "a", I), symbolic_column(layout, "b", J)
    assert sympy.simplify(score(head, h_i, h_j) - BETA * sympy.cos((J - I - 3) * THETA)) == 0


def test_relu_pair_identity():
    z = sympy.Symbol("z", real=True)
    relu = lambda x: sympy.Max(x, 0)  # noqa: E731
    assert sympy.simplify((relu(z) - relu(-z) - z).rewrite(sympy.Piecewise)) == 0


@pytest.mark.parametrize("p, L, m", [(2, 2, 1), (2, 1, 2)])
def test_gd_head_pair_is_one_exact_gradient_step(p, L, m):
    """Scores s_+- = +-(<w_k, x_j> - y_jk) - R D_j; on a sample (D_j = 0) the pair writes
    -eta d/dw_k (1/2)(<w_k, x_j> - y_jk)^2 into weights.k (before the 1/N of the ReLU heads)."""
    layout = build_layout(p, L, m)
    h_i, h_j = symbolic_column(layout, "a", I), symbolic_column(layout, "b", J)
    layer = gd_layer(layout, 1, ETA, PENALTY)
    assert len(layer.heads) == 2 * p**m
    x_j = h_j[layout.feature_rows()]
    exclusion = sum(h_j[layout.exclusion_rows()])
    for k in range(layout.target_dim):
        w_k = slot(layout, h_i, f"weights.{k}")
        y_jk = h_j[layout.target_rows()[k]]
        residual = sympy.expand(w_k @ x_j - y_jk)
        plus, minus = layer.heads[2 * k], layer.heads[2 * k + 1]
        assert sympy.expand(score(plus, h_i, h_j) - (residual - PENALTY * exclusion)) == 0
        assert sympy.expand(score(minus, h_i, h_j) - (-residual - PENALTY * exclusion)) == 0

        # On a sample (D_j = 0) the scores are z and -z with z = <w_k, x_j> - y_jk (just shown):
        z = sympy.Symbol("z", real=True)
        written = sympy.Max(z, 0) * (plus.value @ h_j) + sympy.Max(-z, 0) * (minus.value @ h_j)
        weights = layout.rows(f"weights.{k}")
        # -eta * gradient of (1/2) residual^2 wrt w_k, i.e. -eta * residual * d residual / d w_k:
        gradient_step = np.zeros(layout.width, dtype=object)
        gradient_step[weights.start : weights.stop] = [-ETA * z * sympy.diff(residual, w) for w in w_k]
        for w in w_k:
            assert sympy.expand(sympy.diff(sympy.Rational(1, 2) * residual**2, w) - residual * sympy.diff(residual, w)) == 0
        for got, want in zip(written, gradient_step):
            assert sympy.simplify((got - want).rewrite(sympy.Piecewise)) == 0


def test_readout_pair_writes_w_dot_x():
    layout = build_layout(2, 2)
    h_i, h_j = symbolic_column(layout, "a", I), symbolic_column(layout, "b", J)
    layer = readout_layer(layout)
    x_i = h_i[layout.feature_rows()]
    for k in range(layout.target_dim):
        w_k = slot(layout, h_j, f"weights.{k}")
        plus, minus = layer.heads[2 * k], layer.heads[2 * k + 1]
        z = sympy.expand(w_k @ x_i)
        assert sympy.expand(score(plus, h_i, h_j) - z) == 0
        assert sympy.expand(score(minus, h_i, h_j) + z) == 0
        written = sympy.Max(score(plus, h_i, h_j), 0) * (exact(plus.value) @ h_j) + sympy.Max(
            score(minus, h_i, h_j), 0
        ) * (exact(minus.value) @ h_j)
        got = written[layout.row("output", k)]
        assert sympy.simplify((got - z).rewrite(sympy.Piecewise)) == 0
        others = np.delete(written, layout.row("output", k))
        assert all(entry == 0 for entry in others)


@pytest.mark.parametrize("p, m", [(2, 2), (3, 2), (2, 3)])
def test_joint_mlp_is_the_product_of_one_hots(p, m):
    """relu(sum_r future.r[u_r] - (m-1)) = prod_r future.r[u_r] on every 0/1 one-hot input."""
    layout = build_layout(p, 1, m)
    mlp = joint_one_hot_layer(layout)
    for symbols in itertools.product(range(p + 1), repeat=m):
        column = np.zeros(layout.width)
        column[layout.row("one")] = 1.0
        for r, symbol in enumerate(symbols, start=1):
            column[layout.row(f"future.{r}", symbol)] = 1.0
        joint = (mlp.w_out @ np.maximum(mlp.w_in @ column, 0.0))[layout.rows("joint").start : layout.rows("joint").stop]
        expected = np.zeros(p**m)
        if p not in symbols:
            expected[sum(s * p ** (m - 1 - r) for r, s in enumerate(symbols))] = 1.0
        assert np.array_equal(joint, expected)
