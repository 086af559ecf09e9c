"""Stages 3-4 against explicit gradient descent, and GD on the singular one-hot design.

At ``target = 1e-20`` the softmax leak is far below float64 resolution, so stages 1-2 hand the
GD layers exact features and stages 3-4 must match the reference to rounding (relative 1e-12).
"""
import numpy as np
import pytest
import torch

from construction import build_network, parameters_for_prompt, reference
from test_construction_helpers import hmm_prompt


def weight_copies(trace, layer: str) -> torch.Tensor:
    """``(N, p^m, pL)``: every column's copy of W after ``layer``."""
    layout = trace.layout
    stream = trace.residual(layer)
    return torch.stack([stream[list(layout.rows(f"weights.{k}"))].T for k in range(layout.target_dim)], dim=1)


P, L, T = 3, 3, 8
TOKENS = hmm_prompt(P, [14, 11, 13, 12, 15, 10], 7, seed=5)
NUM_COLUMNS = len(TOKENS) + 1
PARAMS = parameters_for_prompt(TOKENS, P, L, T, target=1e-20)
TRACE = build_network(P, L, T, **PARAMS._asdict()).forward(TOKENS)


def test_every_column_holds_the_same_copy_of_w():
    """Identical up to the summation order of the matrix products (a few units of 2^-53)."""
    for step in range(1, T + 1):
        copies = weight_copies(TRACE, f"gd.{step}")
        assert float((copies - copies[-1:]).abs().max()) <= 1e-15 * float(copies.abs().max())


def test_gd_layers_are_the_explicit_gd_iterates():
    X, Y, _ = reference.regression_problem(TOKENS, P, L)
    iterates = reference.gd_iterates(X, Y, PARAMS.eta, T, NUM_COLUMNS)
    assert torch.count_nonzero(weight_copies(TRACE, "label")) == 0  # W_0 = 0
    for step in range(1, T + 1):
        network_w = weight_copies(TRACE, f"gd.{step}")[-1].numpy()
        relative = np.linalg.norm(network_w - iterates[step]) / np.linalg.norm(iterates[step])
        assert relative <= 1e-12


def test_readout_writes_w_times_x_into_every_column():
    w_final = weight_copies(TRACE, f"gd.{T}")[-1]
    features = TRACE.features(f"gd.{T}")
    expected = features @ w_final.T
    output = TRACE.slot("output").T
    assert float((output - expected).abs().max()) <= 1e-12 * float(expected.abs().max())
    assert torch.equal(TRACE.prediction, output[-1])


def test_prediction_equals_reference_to_rounding():
    expected = reference.prediction(TOKENS, P, L, PARAMS.eta, T)
    assert np.linalg.norm(TRACE.prediction.numpy() - expected) <= 1e-12 * np.linalg.norm(expected)


@pytest.mark.parametrize("history_length", [2, 3, 4])
def test_one_hot_design_is_singular_with_rank_pL_minus_L_plus_1(history_length):
    """Each p-block of x sums to 1, so the L-1 differences of block sums span the null space."""
    tokens = hmm_prompt(3, [40, 40, 40], 5, seed=history_length)
    X, _, _ = reference.regression_problem(tokens, 3, history_length)
    assert np.linalg.matrix_rank(X) == 3 * history_length - (history_length - 1)
    for r in range(1, history_length):
        difference = np.zeros(3 * history_length)
        difference[:3], difference[3 * r : 3 * r + 3] = 1.0, -1.0
        assert np.abs(X @ difference).max() == 0.0


def test_gd_from_zero_converges_to_min_norm_solution_at_the_smallest_nonzero_eigenvalue():
    tokens = hmm_prompt(3, [40, 40, 40], 5, seed=2)
    num_columns, steps = len(tokens) + 1, 600
    X, Y, x_test = reference.regression_problem(tokens, 3, 3)
    eigenvalues, eigenvectors = np.linalg.eigh(reference.hessian(X, num_columns))
    nonzero = eigenvalues > 1e-10 * eigenvalues[-1]
    assert nonzero.sum() == 7  # pL - (L - 1)
    eta = 1.0 / eigenvalues[-1]
    contraction = 1.0 - eta * eigenvalues[nonzero][0]
    iterates = reference.gd_iterates(X, Y, eta, steps, num_columns)
    w_plus = reference.min_norm_solution(X, Y)
    errors = np.linalg.norm(iterates - w_plus, axis=(1, 2))
    # W_t stays in the row space: no component along the null space, ever.
    assert np.abs(iterates @ eigenvectors[:, ~nonzero]).max() <= 1e-12
    # ||W_t - W+|| <= (1 - eta lambda_min+)^t ||W+||, and the observed rate is that factor.
    t = np.arange(steps + 1)
    assert np.all(errors <= contraction**t * np.linalg.norm(w_plus) * (1 + 1e-9) + 1e-13)
    observed = (errors[400] / errors[200]) ** (1 / 200)
    assert abs(observed - contraction) <= 1e-3 * (1 - contraction)
    # The predictions converge to the minimum-norm least-squares prediction at the same rate.
    gaps = np.abs(iterates @ x_test - w_plus @ x_test).max(axis=1)
    assert np.all(gaps <= contraction**t * np.linalg.norm(w_plus) * np.linalg.norm(x_test) * (1 + 1e-9) + 1e-13)
    assert gaps[-1] <= 1e-6 * gaps[1]


def test_network_prediction_converges_to_the_min_norm_prediction():
    """The network's GD layers inherit the rate: after layer gd.t its W_t x_test approaches
    W+ x_test within (1 - eta lambda_min+)^t ||W+|| ||x_test||, at that rate asymptotically."""
    tokens = hmm_prompt(2, [12, 12, 12], 4, seed=3)
    steps = 50
    X, Y, x_test = reference.regression_problem(tokens, 2, 2)
    w_plus = reference.min_norm_solution(X, Y)
    eigenvalues = np.linalg.eigvalsh(reference.hessian(X, len(tokens) + 1))
    params = parameters_for_prompt(tokens, 2, 2, steps)
    trace = build_network(2, 2, steps, **params._asdict()).forward(tokens)
    contraction = 1.0 - params.eta * eigenvalues[eigenvalues > 1e-10 * eigenvalues[-1]][0]
    gaps = np.array(
        [np.abs(weight_copies(trace, f"gd.{t}")[-1].numpy() @ x_test - w_plus @ x_test).max() for t in range(1, steps + 1)]
    )
    t = np.arange(1, steps + 1)
    assert np.all(gaps <= contraction**t * np.linalg.norm(w_plus) * np.linalg.norm(x_test) + 1e-9)
    observed = (gaps[-1] / gaps[-11]) ** (1 / 10)
    assert abs(observed - contraction) <= 0.02 * contraction
