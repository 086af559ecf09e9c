"""The observability coefficient against a closed form, brute force and its own bounds."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hmm
from hmm.generators import as_generator
from hmm.observability import EXACT_MAX_STATES, multistep_emission, observability, observability_exact, observability_lower_bound, observability_upper_bound
from markov_oracles import stationary_rounding
from rounding import forward_rounding, gamma, least_squares_rounding, lp_value_accuracy, unit_roundoff

def random_directions(num_directions: int, num_states: int, seed) -> np.ndarray:
    """Random sum-zero, unit-l1 directions as :func:`observability_upper_bound` draws them."""
    directions = as_generator(seed).standard_normal((num_directions, num_states))
    directions -= directions.mean(axis=1, keepdims=True)
    directions /= np.abs(directions).sum(axis=1, keepdims=True)
    return directions


def sampled_value_rounding(directions: np.ndarray, emission: np.ndarray) -> float:
    """How far below the least computed ``||M^T x||_1`` over ``directions`` gamma can be pushed by
    rounding: ``max_x 2 |sum x| + | ||x||_1 - 1 | + 3 gamma_S + gamma_{S+q}``.

    A computed direction x is not exactly feasible, but ``x* = (x - mean(x) 1) / ||x - mean(x) 1||_1``
    is, and ``||x - x*||_1 <= 2 |sum x| + | ||x||_1 - 1 |``, which the check computes within
    ``3 gamma_S`` (its sums have S terms of magnitude at most ``||x||_1``, about 1). ``||M^T v||_1 <=
    ||v||_1`` for row-stochastic M, so ``gamma <= ||M^T x*||_1 <= ||M^T x||_1 + ||x - x*||_1``; the
    computed value of ``||M^T x||_1 <= 1`` adds ``gamma_{S+q}`` (S products per entry, q entries)."""
    num_states, num_tokens = emission.shape
    defect = 2 * np.abs(directions.sum(axis=1)) + np.abs(np.abs(directions).sum(axis=1) - 1)
    return float(defect.max()) + 3 * gamma(num_states) + gamma(num_states + num_tokens)


def lower_bound_rounding(emission: np.ndarray) -> float:
    """Relative rounding bound on :func:`observability_lower_bound` ``= 1 / ||P0 (M^T)^+||_{1->1}``
    where it is positive: the pseudo-inverse, a minimum-norm least-squares solution with targets I
    (``(M^T)^+ = I^T (X^T)^+`` for features ``X = M``), errs by at most :func:`rounding.least_squares_rounding`
    in the Frobenius norm; the product with ``P0`` (``||P0||_2 = 1``) adds ``gamma_S`` of the
    magnitudes; a column's l1 norm moves by at most ``sqrt(S)`` times its 2-norm's error, and its
    sum and the reciprocal add ``gamma_{S+1}``."""
    num_states = emission.shape[0]
    pseudo_inverse = np.linalg.pinv(emission.T)
    centering = np.eye(num_states) - np.full((num_states, num_states), 1.0 / num_states)
    product = (least_squares_rounding(emission, np.eye(num_states), pseudo_inverse)
               + gamma(num_states) * np.linalg.norm(np.abs(centering) @ np.abs(pseudo_inverse)))
    column_norm = np.abs(centering @ pseudo_inverse).sum(axis=0).max()
    return math.sqrt(num_states) * product / column_norm + gamma(num_states + 1)


@pytest.mark.parametrize("g", [0.05, 0.3, 0.7, 1.0])
def test_uniform_noise_knob_gives_gamma_equal_to_the_knob(g):
    assert observability_exact(hmm.observable_emission((), 4, 6, g)) == pytest.approx(g, abs=lp_value_accuracy(4, 6))


def test_more_states_than_tokens_has_gamma_zero():
    emission = hmm.dirichlet_rows((5, 3), 1.0, 0)
    assert observability_exact(emission) == pytest.approx(0.0, abs=lp_value_accuracy(5, 3))
    assert observability_lower_bound(emission) == 0.0


def test_three_states_against_a_dense_scan_of_the_feasible_set():
    """For S = 3 every feasible x is (a - b)/2 with a, b distributions on disjoint supports: one
    state against a mixture of the other two. Scanning the mixture weight finely bounds gamma."""
    emission = hmm.dirichlet_rows((3, 4), 0.5, 1).numpy()
    weights = np.linspace(0, 1, 20_001)
    values = []
    for single in range(3):
        others = [s for s in range(3) if s != single]
        mixed = weights[:, None] * emission[others[0]] + (1 - weights[:, None]) * emission[others[1]]
        values.append(np.abs(emission[single] - mixed).sum(axis=1) / 2)
    scanned = np.concatenate(values).min()
    exact = observability_exact(emission)
    # A scanned value is ||M^T x||_1 at a feasible x (the weights w and 1 - w sum to 1 within u),
    # computed from entries of magnitude at most 1 in 4 roundings and a sum of q: gamma_{q+4}.
    assert exact <= scanned + gamma(emission.shape[1] + 4) + lp_value_accuracy(*emission.shape)
    assert scanned - exact <= 1e-4  # the scan's grid step times the Lipschitz constant


@given(st.integers(2, 7), st.integers(2, 7), st.integers(0, 2**31 - 1))
def test_bounds_bracket_the_exact_value(S, q, seed):
    emission = hmm.dirichlet_rows((S, q), 0.7, seed)
    matrix = emission.numpy()
    exact = observability_exact(emission)
    accuracy = lp_value_accuracy(S, q)
    lower = observability_lower_bound(emission)
    if lower > 0:
        assert lower <= (exact + accuracy) * (1 + lower_bound_rounding(matrix))
    # The upper bound is the least sampled value or a face LP's value, itself at least the exact one.
    upper_slack = sampled_value_rounding(random_directions(512, S, seed), matrix) + accuracy
    assert exact <= observability_upper_bound(emission, num_directions=512, seed=seed) + upper_slack
    directions = random_directions(2000, S, seed)
    assert exact <= np.abs(directions @ matrix).sum(axis=1).min() + sampled_value_rounding(directions, matrix) + accuracy


def test_large_state_counts_report_bounds_not_an_exact_value():
    emission = hmm.observable_emission((), EXACT_MAX_STATES + 4, 20, 0.6)
    matrix = emission.numpy()
    result = observability(emission)
    assert not result.exact
    assert result.lower <= 0.6 * (1 + lower_bound_rounding(matrix))
    # observability() samples 4096 directions from seed 0, then solves the best one's face LP.
    sampled = sampled_value_rounding(random_directions(4096, matrix.shape[0], 0), matrix)
    assert 0.6 <= result.upper + sampled + lp_value_accuracy(*matrix.shape)
    assert result.lower > 0


def test_multistep_emission_rows_are_sequence_probabilities():
    """Each entry of ``O_m`` is a sum of nonnegative products built in ``m - 1`` levels of a
    transition product (``gamma_S``) and an emission product (u): relative ``gamma_{(m-1)(S+1)}``.
    The forward pass's log-likelihood is within :func:`rounding.forward_rounding` absolutely, which
    exp turns into a relative error, plus its own 4 ulps."""
    model = hmm.random_hmm(4, 3, seed=2)
    m, S = 3, 4
    operator = multistep_emission(model, m)
    assert operator.shape == (4, 27)
    for state in range(4):
        started = hmm.HMM(torch.nn.functional.one_hot(torch.tensor(state), 4).double(), model.transition, model.emission)
        for index in (0, 5, 13, 26):
            sequence = torch.tensor([index // 9, (index // 3) % 3, index % 3])
            log_probability = hmm.log_likelihood(started, sequence).item()
            relative = gamma((m - 1) * (S + 1)) + forward_rounding(S, m, log_probability) + 8 * unit_roundoff()
            assert operator[state, index].item() == pytest.approx(math.exp(log_probability), rel=relative, abs=0)


def test_more_steps_make_an_undercomplete_hmm_observable():
    """Theorem 2's setting: S > p gives gamma(O) = 0, but the 2-step operator can have gamma > 0."""
    model = hmm.random_hmm(4, 2, transition_concentration=0.5, emission_concentration=0.5, seed=3)
    assert observability_exact(model.emission) == pytest.approx(0.0, abs=lp_value_accuracy(4, 2))
    assert observability_exact(multistep_emission(model, 2)) > 1e-3


def test_stationary_distribution_and_mixing_coefficients():
    transition = hmm.dirichlet_rows((5, 6, 6), 1.0, 4)
    pi = hmm.stationary_distribution(transition)
    # hmm.stationary_distribution solves the system markov_oracles.stationary_rounding analyses, so
    # pi is within R of the exact law entrywise; pi T - pi then moves by at most R (column sum of
    # T + 1) <= (S + 1) R, and forming pi T adds gamma_S.
    for law, kernel in zip(pi, transition):
        allowed = (kernel.shape[0] + 1) * stationary_rounding(kernel.numpy()) + gamma(kernel.shape[0])
        torch.testing.assert_close(law @ kernel, law, rtol=0, atol=allowed)
    two_state = torch.tensor([[0.9, 0.1], [0.3, 0.7]], dtype=torch.float64)
    u = unit_roundoff()
    # The stored matrix's law, pi_0 = T_10 / (1 - T_00 + T_10), is moved from 0.75 by the literals 0.9
    # and 0.3 (each within u of its value) by at most (0.3 x 0.9 u + 0.1 x 0.3 u) / 0.4^2 = 1.875 u.
    torch.testing.assert_close(hmm.stationary_distribution(two_state), torch.tensor([0.75, 0.25], dtype=torch.float64),
                               rtol=0, atol=stationary_rounding(two_state.numpy()) + 1.875 * u)
    # Eigenvalues 1 and 1 - 0.1 - 0.3. lambda_2 = 0.6 has right and left eigenvectors (1, -3) and (1, -1):
    # condition number kappa = ||x|| ||y|| / |y^T x| = sqrt(20) / 4. The stored matrix is within u |T| of
    # the decimal one (u ||T||_F in the 2-norm), and eigvals returns the eigenvalues of a matrix within
    # p(n) u ||T||_2 of its input, p(n) a modestly growing function taken as n (LAPACK Users' Guide, as
    # test_bounds_formulas.contraction_rounding takes it): first order, kappa (||T||_F + 2 ||T||_2) u.
    # A real eigenvalue's modulus is exact; 1 - |lambda_2| rounds by 0.4 u, the closed form by 0.6 u + 0.4 u.
    norms = torch.linalg.matrix_norm(two_state) + 2 * torch.linalg.matrix_norm(two_state, 2)
    eigenvalue = math.sqrt(20) / 4 * norms.item() * u
    assert hmm.spectral_gap(two_state).item() == pytest.approx(1 - 0.6, rel=0, abs=eigenvalue + 1.4 * u)
    # TV(row0, row1) = (0.6 + 0.6) / 2. Exact: the rows' overlap min(0.9, 0.3) + min(0.1, 0.7) and one
    # minus it are these two roundings.
    assert hmm.dobrushin_coefficient(two_state).item() == 1 - (0.3 + 0.1)
    with pytest.raises(ValueError, match="no unique stationary distribution"):
        hmm.stationary_distribution(torch.eye(3, dtype=torch.float64))
