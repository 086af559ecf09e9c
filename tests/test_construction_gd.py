"""Stages 3-4 against explicit gradient descent, and GD on the singular one-hot design.

At ``target = 1e-20`` the softmax leak is far below float64 resolution, so stages 1-2 hand the
GD layers exact features and stages 3-4 must match the reference to rounding: within
:func:`test_construction_helpers.pass_rounding` of exact arithmetic, each.
"""
import numpy as np
import pytest
import torch

from bounds.theorem1 import EIGENVALUE_TOLERANCE
from construction import build_network, parameters_for_prompt, reference
from rounding import gamma, unit_roundoff
from test_construction_helpers import hmm_prompt, pass_rounding, pass_rounding_bound


def weight_copies(trace, layer: str) -> torch.Tensor:
    """``(N, p^m, pL)``: every column's copy of W after ``layer``."""
    layout = trace.layout
    stream = trace.residual(layer)
    return torch.stack([stream[list(layout.rows(f"weights.{k}"))].T for k in range(layout.target_dim)], dim=1)


P, L, T = 3, 3, 8
TOKENS = hmm_prompt(P, [14, 11, 13, 12, 15, 10], 7, seed=5)
NUM_COLUMNS = len(TOKENS) + 1
PARAMS = parameters_for_prompt(TOKENS, P, L, T, target=1e-20)
TRACE = build_network(PARAMS).forward(TOKENS)
WEIGHTS_ROUNDING, READOUT_ROUNDING = pass_rounding(TOKENS, PARAMS)


def test_every_column_holds_the_same_copy_of_w():
    """Identical up to the summation order of the matrix products: every copy is within the pass's
    rounding bound of exact arithmetic."""
    for step in range(1, T + 1):
        copies = weight_copies(TRACE, f"gd.{step}")
        assert float((copies - copies[-1:]).abs().max()) <= 2 * WEIGHTS_ROUNDING[step]


def test_gd_layers_are_the_explicit_gd_iterates():
    X, Y, _ = reference.regression_problem(TOKENS, P, L)
    iterates = reference.gd_iterates(X, Y, PARAMS.eta, T, NUM_COLUMNS)
    assert torch.count_nonzero(weight_copies(TRACE, "label")) == 0  # W_0 = 0
    for step in range(1, T + 1):
        network_w = weight_copies(TRACE, f"gd.{step}")[-1].numpy()
        assert np.linalg.norm(network_w - iterates[step]) <= 2 * WEIGHTS_ROUNDING[step], step


def test_readout_writes_w_times_x_into_every_column():
    w_final = weight_copies(TRACE, f"gd.{T}")[-1]
    features = TRACE.features(f"gd.{T}")
    expected = features @ w_final.T
    output = TRACE.slot("output").T
    # Same W on both sides: only the read-out's own rounding, in the network and in the check.
    assert float((output - expected).abs().max()) <= 2 * READOUT_ROUNDING
    assert torch.equal(TRACE.prediction, output[-1])


def test_prediction_equals_reference_to_rounding():
    expected = reference.prediction(TOKENS, P, L, PARAMS.eta, T)
    bound = pass_rounding_bound(TOKENS, PARAMS) + build_network(PARAMS).spec.error_bound(NUM_COLUMNS)
    assert np.abs(TRACE.prediction.numpy() - expected).max() <= bound


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


def exact_gd_errors(w_plus: np.ndarray, hessian: np.ndarray, eta: float, steps: int) -> np.ndarray:
    """``(steps+1, p^m, pL)``: ``E_t = W_t - W+ = -W+ (I - eta H)^t``, t = 0..steps, from the spectrum.

    GD from ``W_0 = 0`` on ``(1/2N) sum ||y_j - W x_j||^2`` maps ``E -> E (I - eta H)``, because W+
    satisfies the normal equations ``W+ H = Y^T X / N``. With ``H = sum_i lambda_i v_i v_i^T``::

        E_t = -sum_i (1 - eta lambda_i)^t (W+ v_i) v_i^T,
        ||E_t||_F^2 = sum_i (1 - eta lambda_i)^(2t) c_i^2,   c_i = ||W+ v_i||,

    and c_i = 0 on the null space of H, so the slowest mode is the smallest nonzero eigenvalue.
    """
    eigenvalues, eigenvectors = np.linalg.eigh(hessian)
    factors = (1.0 - eta * eigenvalues)[None, :] ** np.arange(steps + 1)[:, None]
    return -np.einsum("ai,ti,bi->tab", w_plus @ eigenvectors, factors, eigenvectors)


def gd_rounding_tolerance(X: np.ndarray, Y: np.ndarray, eta: float, num_columns: int, iterates: np.ndarray,
                          w_plus: np.ndarray) -> np.ndarray:
    """``(steps+1,)``: a bound on ``||fl(W_t) - W+ - E_t||_F`` for the float64 iterates and the
    float64 evaluation of :func:`exact_gd_errors` (first order in u).

    *One step.* ``fl(W - a (W X^T - Y^T) X)`` with ``a = eta / N``; X is 0/1, so ``|X| = X``. The
    residual ``R = W X^T - Y^T`` sums ``pL + 1`` products, ``R X`` sums N' products, and the
    update rounds twice; with ``n = max(pL, N') + 2`` every error is within ``gamma_n`` of its
    magnitudes, so the step adds at most
    ``delta_s = 2 gamma_n a ||X||_F (||W_s||_F ||X||_F + ||Y||_F) + 2 u ||W_{s+1}||_F``.
    *Propagation.* An error made at step s is mapped by ``E -> E (I - eta H)``, whose eigenvalues
    ``1 - eta lambda_i`` lie in [0, 1] (``eta = 1/lambda_max``), so it never grows: the iterate's
    error at step t is at most ``sum_{s<t} delta_s``.
    *The oracle.* ``eigh`` is backward stable: its pairs are exact for ``H + dH`` with
    ``||dH||_F <= gamma_n ||X||_F^2 / N`` (forming H) ``+ pL gamma_pL ||H||_F`` (Householder/QR
    tridiagonalisation). ``f(lambda) = (1 - eta lambda)^t`` is ``t eta``-Lipschitz on
    ``[0, lambda_max]``, and Lipschitz functions of symmetric matrices are Lipschitz in the
    Frobenius norm with the same constant, so ``W+ f(H)`` errs by ``t eta ||dH||_F ||W+||_F``.
    ``W+`` itself (SVD least squares) errs by ``pL u (kappa + kappa^2 ||r||_F / (||X||_2 ||W+||_F)) ||W+||_F``
    with ``kappa = ||X||_2 / sigma_min+`` and r the residual (Higham, Theorem 20.1); it enters once
    through ``W+`` and once through ``E_t``.
    """
    num_samples, width = X.shape
    n = max(width, num_samples) + 2
    a = eta / num_columns
    norm_x, norm_y = np.linalg.norm(X), np.linalg.norm(Y)
    norm_w = np.linalg.norm(iterates, axis=(1, 2))
    per_step = 2 * gamma(n) * a * norm_x * (norm_w[:-1] * norm_x + norm_y) + 2 * unit_roundoff() * norm_w[1:]
    iteration = np.concatenate([[0.0], np.cumsum(per_step)])
    singular_values = np.linalg.svd(X, compute_uv=False)
    nonzero = singular_values[singular_values > singular_values[0] * width * np.finfo(np.float64).eps]
    kappa = nonzero[0] / nonzero[-1]
    norm_w_plus = np.linalg.norm(w_plus)
    residual = np.linalg.norm(Y - X @ w_plus.T)
    least_squares = width * unit_roundoff() * (kappa + kappa**2 * residual / (nonzero[0] * norm_w_plus)) * norm_w_plus
    hessian_error = gamma(n) * norm_x**2 / num_columns + width * gamma(width) * np.linalg.norm(X.T @ X) / num_columns
    steps = np.arange(iterates.shape[0])
    return iteration + 2 * least_squares + steps * eta * hessian_error * norm_w_plus


def test_gd_from_zero_follows_the_exact_error_sequence_of_the_spectrum():
    """On the singular one-hot design GD from 0 converges to the minimum-norm W+, mode by mode at
    the rates ``1 - eta lambda_i``; the slowest nonzero mode sets the asymptotic rate."""
    tokens = hmm_prompt(3, [40, 40, 40], 5, seed=2)
    num_columns, steps = len(tokens) + 1, 600
    X, Y, x_test = reference.regression_problem(tokens, 3, 3)
    hessian = reference.hessian(X, num_columns)
    eigenvalues, eigenvectors = np.linalg.eigh(hessian)
    nonzero = eigenvalues > EIGENVALUE_TOLERANCE * eigenvalues[-1]
    assert nonzero.sum() == 7  # pL - (L - 1)
    eta = 1.0 / eigenvalues[-1]
    iterates = reference.gd_iterates(X, Y, eta, steps, num_columns)
    w_plus = reference.min_norm_solution(X, Y)
    tolerance = gd_rounding_tolerance(X, Y, eta, num_columns, iterates, w_plus)
    exact = exact_gd_errors(w_plus, hessian, eta, steps)
    # W_t stays in the row space: no component along the null space, ever (to rounding).
    assert np.all(np.abs(iterates @ eigenvectors[:, ~nonzero]).max(axis=(1, 2)) <= tolerance)
    # Every iterate is the exact one, mode by mode.
    assert np.all(np.linalg.norm(iterates - w_plus - exact, axis=(1, 2)) <= tolerance)
    # Hence the rate is the smallest nonzero eigenvalue's: the slowest mode alone is a lower bound,
    # c_min (1 - eta lambda_min+)^t <= ||W_t - W+|| <= (1 - eta lambda_min+)^t ||W+||.
    contraction = 1.0 - eta * eigenvalues[nonzero][0]
    slowest = np.linalg.norm(w_plus @ eigenvectors[:, nonzero][:, 0])
    t = np.arange(steps + 1)
    errors = np.linalg.norm(iterates - w_plus, axis=(1, 2))
    assert np.all(errors <= contraction**t * np.linalg.norm(w_plus) + tolerance)
    assert np.all(errors >= slowest * contraction**t - tolerance)
    # The predictions converge to the minimum-norm least-squares prediction at the same rate.
    gaps = np.abs(iterates @ x_test - w_plus @ x_test).max(axis=1)
    assert np.all(gaps <= (contraction**t * np.linalg.norm(w_plus) + tolerance) * np.linalg.norm(x_test))
    assert gaps[-1] <= 1e-6 * gaps[1]


def test_network_prediction_follows_the_exact_gd_sequence():
    """The network's GD layers inherit the exact sequence: after layer gd.t its ``W_t x_test - W+ x_test``
    is ``E_t x_test`` of :func:`exact_gd_errors`, within the construction-error bound plus rounding."""
    tokens = hmm_prompt(2, [12, 12, 12], 4, seed=3)
    steps = 50
    X, Y, x_test = reference.regression_problem(tokens, 2, 2)
    num_columns = len(tokens) + 1
    w_plus = reference.min_norm_solution(X, Y)
    hessian = reference.hessian(X, num_columns)
    params = parameters_for_prompt(tokens, 2, 2, steps)
    network = build_network(params)
    trace = network.forward(tokens)
    iterates = reference.gd_iterates(X, Y, params.eta, steps, num_columns)
    tolerance = (network.spec.error_bound(num_columns)
                 + gd_rounding_tolerance(X, Y, params.eta, num_columns, iterates, w_plus) * np.linalg.norm(x_test))
    exact = exact_gd_errors(w_plus, hessian, params.eta, steps) @ x_test
    for t in range(1, steps + 1):
        gap = weight_copies(trace, f"gd.{t}")[-1].numpy() @ x_test - w_plus @ x_test
        assert np.abs(gap - exact[t]).max() <= tolerance[t], t
    eigenvalues = np.linalg.eigvalsh(hessian)
    contraction = 1.0 - params.eta * eigenvalues[eigenvalues > EIGENVALUE_TOLERANCE * eigenvalues[-1]][0]
    t = np.arange(steps + 1)
    assert np.all(np.abs(exact).max(axis=1) <= contraction**t * np.linalg.norm(w_plus) * np.linalg.norm(x_test) + tolerance)
