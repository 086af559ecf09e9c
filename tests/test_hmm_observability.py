"""The observability coefficient against a closed form, brute force and its own bounds."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hmm
from hmm.observability import EXACT_MAX_STATES, multistep_emission, observability, observability_exact, observability_lower_bound, observability_upper_bound


@pytest.mark.parametrize("g", [0.05, 0.3, 0.7, 1.0])
def test_uniform_noise_knob_gives_gamma_equal_to_the_knob(g):
    assert observability_exact(hmm.observable_emission((), 4, 6, g)) == pytest.approx(g, abs=1e-9)


def test_more_states_than_tokens_has_gamma_zero():
    emission = hmm.dirichlet_rows((5, 3), 1.0, 0)
    assert observability_exact(emission) == pytest.approx(0.0, abs=1e-12)
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
    assert exact <= scanned + 1e-12
    assert scanned - exact <= 1e-4  # the scan's grid step times the Lipschitz constant


@given(st.integers(2, 7), st.integers(2, 7), st.integers(0, 2**31 - 1))
def test_bounds_bracket_the_exact_value(S, q, seed):
    emission = hmm.dirichlet_rows((S, q), 0.7, seed)
    exact = observability_exact(emission)
    assert observability_lower_bound(emission) <= exact + 1e-9
    assert exact <= observability_upper_bound(emission, num_directions=512, seed=seed) + 1e-9
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((2000, S))
    directions -= directions.mean(axis=1, keepdims=True)
    directions /= np.abs(directions).sum(axis=1, keepdims=True)
    assert exact <= np.abs(directions @ emission.numpy()).sum(axis=1).min() + 1e-9


def test_large_state_counts_report_bounds_not_an_exact_value():
    emission = hmm.observable_emission((), EXACT_MAX_STATES + 4, 20, 0.6)
    result = observability(emission)
    assert not result.exact
    assert result.lower <= 0.6 + 1e-9 <= result.upper + 2e-9
    assert result.lower > 0


def test_multistep_emission_rows_are_sequence_probabilities():
    model = hmm.random_hmm(4, 3, seed=2)
    operator = multistep_emission(model, 3)
    assert operator.shape == (4, 27)
    for state in range(4):
        started = hmm.HMM(torch.nn.functional.one_hot(torch.tensor(state), 4).double(), model.transition, model.emission)
        for index in (0, 5, 13, 26):
            sequence = torch.tensor([index // 9, (index // 3) % 3, index % 3])
            assert operator[state, index].item() == pytest.approx(hmm.log_likelihood(started, sequence).exp().item(), rel=1e-12)


def test_more_steps_make_an_undercomplete_hmm_observable():
    """Theorem 2's setting: S > p gives gamma(O) = 0, but the 2-step operator can have gamma > 0."""
    model = hmm.random_hmm(4, 2, transition_concentration=0.5, emission_concentration=0.5, seed=3)
    assert observability_exact(model.emission) == pytest.approx(0.0, abs=1e-12)
    assert observability_exact(multistep_emission(model, 2)) > 1e-3


def test_stationary_distribution_and_mixing_coefficients():
    transition = hmm.dirichlet_rows((5, 6, 6), 1.0, 4)
    pi = hmm.stationary_distribution(transition)
    torch.testing.assert_close(torch.einsum("bs,bst->bt", pi, transition), pi, rtol=0, atol=1e-13)
    two_state = torch.tensor([[0.9, 0.1], [0.3, 0.7]], dtype=torch.float64)
    torch.testing.assert_close(hmm.stationary_distribution(two_state), torch.tensor([0.75, 0.25], dtype=torch.float64))
    assert hmm.spectral_gap(two_state).item() == pytest.approx(1 - 0.6)  # eigenvalues 1 and 1 - 0.1 - 0.3
    assert hmm.dobrushin_coefficient(two_state).item() == pytest.approx(0.6)  # TV(row0, row1) = (0.6 + 0.6) / 2
    with pytest.raises(ValueError, match="no unique stationary distribution"):
        hmm.stationary_distribution(torch.eye(3, dtype=torch.float64))
