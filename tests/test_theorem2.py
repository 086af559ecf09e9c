"""Theorem 2: gamma_m on HMMs where it is known, the m-step network stage by stage, its refusals."""
import re

import numpy as np
import pytest
import torch

import hmm
from bounds import formulas, theorem1, theorem2
from construction import build_network, parameters_for_prompt, reference
from hmm.observability import multistep_emission, observability_exact, observability_lower_bound
from hmm.undercomplete import shift_register_gamma, shift_register_hmm
from rounding import gamma, lp_value_accuracy, unit_roundoff


def operator_tolerance(model: hmm.HMM, m: int) -> float:
    """How far the LP's gamma of the computed ``O_m`` may lie from the exact operator's: HiGHS's
    accuracy (:func:`rounding.lp_value_accuracy`) plus the operator's rounding. Each entry of ``O_m``
    is within ``gamma_{(m-1)(S+1)}`` relatively (tests/test_hmm_observability.py), so every row moves
    by at most that in l1, and ``|gamma(M) - gamma(M')| <= max_s ||M[s] - M'[s]||_1``."""
    S, q = model.num_states, model.num_tokens**m
    return lp_value_accuracy(S, q) + gamma((m - 1) * (S + 1) + 1)


def test_same_emission_row_with_different_successors_is_observable_two_steps_ahead():
    """States 0 and 1 both emit token 0; 0 stays, 1 moves to state 2, which emits token 1. One token
    cannot tell 0 from 1 (gamma_1 = 0); two can: O_2 has the distinct one-hot rows e(00), e(01),
    e(11), so ||O_2^T x||_1 = ||x||_1 and gamma_2 = 1."""
    emission = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    transition = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    model = hmm.HMM(torch.full((3,), 1 / 3, dtype=torch.float64), transition, emission)
    assert observability_exact(multistep_emission(model, 1)) == pytest.approx(0.0, abs=operator_tolerance(model, 1))
    assert observability_exact(multistep_emission(model, 2)) == pytest.approx(1.0, abs=operator_tolerance(model, 2))


@pytest.mark.parametrize("p, r", [(2, 2), (2, 3), (3, 2)])
def test_deterministic_shift_register_is_first_observable_at_its_length(p, r):
    """g = 1: the next r tokens are the state's digits, so O_r is a 0/1 matrix with S = p^r distinct
    one-hot rows (gamma_r = 1), while O_m for m < r has equal rows for states differing in u_r (0)."""
    model = shift_register_hmm(p, r, 1.0, transition_concentration=0.7, seed=p + r)
    for m in range(1, r):  # equal rows: a sum-zero kernel, which the certified bound reports as gamma = 0 exactly
        assert observability_lower_bound(multistep_emission(model, m)) == 0.0
    assert observability_exact(multistep_emission(model, r)) == pytest.approx(1.0, abs=operator_tolerance(model, r))


@pytest.mark.parametrize("r, g", [(2, 0.6), (2, 0.9), (3, 0.8)])
def test_noisy_binary_shift_register_has_gamma_g_to_the_r(r, g):
    """The closed form of hmm.undercomplete: O_r = A (x) ... (x) A with A = g I + (1 - g) U, gamma_r =
    g^r (computed within r u), 0 below r, and gamma_{r+1} >= gamma_r (marginalising contracts l1)."""
    model = shift_register_hmm(2, r, g, transition_concentration=0.5, seed=7)
    channel = g * torch.eye(2, dtype=torch.float64) + (1 - g) / 2
    kronecker = channel
    for _ in range(r - 1):
        kronecker = torch.kron(kronecker, channel)
    operator = multistep_emission(model, r)
    # Entries of O_r are sums of products of channel entries and transition probabilities whose sums are 1.
    assert torch.allclose(operator, kronecker, rtol=gamma((r - 1) * (model.num_states + 1) + r), atol=0)
    for m in range(1, r):
        assert shift_register_gamma(r, g, m) == observability_lower_bound(multistep_emission(model, m)) == 0.0
    at_r, beyond = (observability_exact(multistep_emission(model, m)) for m in (r, r + 1))
    assert at_r == pytest.approx(shift_register_gamma(r, g, r), abs=operator_tolerance(model, r) + r * unit_roundoff())
    assert beyond >= at_r - operator_tolerance(model, r) - operator_tolerance(model, r + 1)


def test_multistep_operator_refuses_bad_m_and_says_how_large():
    model = hmm.random_hmm(4, 16, seed=0)
    with pytest.raises(ValueError, match=r"m: 0; expected an integer >= 1"):
        multistep_emission(model, 0)
    with pytest.raises(ValueError, match=r"m: 8; O_m has S x p\^m = 4 x 16\^8 = 1.72e\+10 entries \(128 GiB\); "
                                         r"expected at most 1 GiB"):
        multistep_emission(model, 8)
    with pytest.raises(ValueError, match=r"m: 3; expected 1 <= m <= register_length = 2"):
        shift_register_gamma(2, 0.5, 3)


def test_theorem2_config_refuses_bad_m_and_a_network_too_large():
    with pytest.raises(ValueError, match=r"futures: 0; expected integers m >= 1"):
        theorem2.Theorem2Config(futures=(0, 2))
    with pytest.raises(ValueError, match=r"expected at least one m >= 2"):
        theorem2.Theorem2Config(futures=(1,))
    suite = theorem2.UndercompleteSpec(num_tokens=3, register_length=2)
    expected = theorem2.network_bytes(3, 3, 7, 20) / 2**30
    with pytest.raises(ValueError, match=rf"futures: m = 7 with p = 3, L = 3, T = 20 needs a network of 4374 heads "
                                         rf"per GD layer and width \d+: {re.escape(f'{expected:.3g}')} GiB of value matrices; expected "
                                         rf"at most 1 GiB \(a smaller m: p\^m = 2187\)"):
        theorem2.Theorem2Config(suite=suite, futures=(1, 7), demo_length=20)


def shift_prompt(m: int, seed: int) -> tuple[hmm.HMM, np.ndarray]:
    model = shift_register_hmm(2, 2, 0.8, transition_concentration=1.0, seed=seed)
    return model, theorem1.sample_prompt_tokens(model, 1, hmm.PromptFormat(4, 10, 6), seed)[0]


@pytest.mark.parametrize("m", [2, 3])
def test_m_step_network_every_stage_against_its_reference(m):
    """The stage checks of bounds.theorem1 on an under-complete HMM's prompt: every history and
    label block, the joint one-hot, every GD iterate and the read-out within their derived bounds;
    the network's size equals network_counts'."""
    model, tokens = shift_prompt(m, seed=m)
    L, T = 2, 6
    W_star, _ = theorem1.population_regression(model, L, m)
    row = theorem1.decompose_prompt(model, tokens, L, T, W_star, m)
    assert set(row.stages) == {"history.1", *(f"label.{r}" for r in range(1, m + 1)), "joint", "gd", "readout"}
    for name, stage in row.stages.items():
        assert stage.deviation <= stage.allowed, name
    assert row.construction <= row.construction_bound
    assert row.optimization <= row.optimization_bound <= row.optimization_bound_paper
    network = build_network(parameters_for_prompt(tokens, 2, L, T, future_length=m))
    counts = formulas.network_counts(2, L, T, m)
    assert counts.layers == len(network.layers)
    assert {len(layer.heads) for layer in network.layers if layer.name.startswith("gd.")} == {counts.heads_per_gd_layer}
    assert counts.width == network.layout.width


@pytest.mark.parametrize("m", [2, 3])
def test_next_token_marginal_of_the_m_step_regression_is_the_one_step_regression(m):
    """Summing the targets over the last m - 1 tokens is linear, and so are GD and least squares in
    the targets: the next-token marginal of the m-step predictor is the one-step predictor on the
    same samples (the m-step sample set) with the same eta. Same operations up to the order of sums:
    each GD step is a product with N' <= 40 terms, T steps, entries of magnitude <= 2 (bounded
    contraction), so the gap is within T gamma_{N' + pL + p^m} times that magnitude."""
    model, tokens = shift_prompt(m, seed=10 + m)
    L, T, p = 2, 6, 2
    X, Y, x_test = reference.regression_problem(tokens, p, L, m)
    N = len(tokens) + 1
    eta = 1.0 / theorem1.spectrum(reference.hessian(X, N))[0]
    joint = reference.gd_iterates(X, Y, eta, T, N)[-1] @ x_test
    marginal_targets = Y.reshape(len(Y), p, -1).sum(2)
    one_step = reference.gd_iterates(X, marginal_targets, eta, T, N)[-1] @ x_test
    bound = 2 * T * gamma(X.shape[0] + p * L + p**m)
    assert np.abs(joint.reshape(p, -1).sum(1) - one_step).max() <= bound


def test_ahead_law_marginalises_to_the_shorter_law_and_to_the_next_token():
    """``b^T Q O_m`` summed over its last token is ``b^T Q O_{m-1}`` and for m = 1 it is filtering's
    next-token law: within the rounding of the two computations (S + p^m terms per entry)."""
    model = shift_register_hmm(2, 2, 0.7, seed=3)
    tokens = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    beliefs = hmm.filter_beliefs(model, tokens).filtered
    next_token = hmm.next_token_probs(model, tokens)
    tolerance = gamma(2 * model.num_states + 8)
    assert torch.allclose(theorem1.ahead_law(model, beliefs, 1), next_token, rtol=0, atol=tolerance)
    for m in (2, 3):
        longer = theorem1.ahead_law(model, beliefs, m).reshape(len(tokens), -1, 2).sum(-1)
        assert torch.allclose(longer, theorem1.ahead_law(model, beliefs, m - 1), rtol=0, atol=tolerance)


def test_approximation_error_grows_with_m_and_decays_with_L():
    """``|(b - b_L)^T Q O_m|_1`` is nondecreasing in m (the m-step law marginalises to the shorter
    one, and summing entries contracts l1), up to rounding; on a g = 0.8 register it decays in L."""
    config = theorem2.Theorem2Config(num_sequences=60, lengths=(1, 2, 4, 6), demo_length=20)
    member = theorem2.build_undercomplete_suite(theorem2.UndercompleteSpec(gammas=(0.8,), concentrations=(1.0,)), 3,
                                                config.seed)[0]
    errors = theorem2.approximation_errors(member, config)
    assert (np.diff(errors, axis=0) >= -gamma(4 * member.model.num_states + 8)).all()
    assert (np.diff(errors, axis=1) < 0).all()
