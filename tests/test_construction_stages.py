"""Stages 1-2 (and end to end) against the plain-numpy reference, within the leak formula.

Every check compares the network's residual stream, read by slot name, with
:mod:`construction.reference`, which shares no code with the network. Stage 1-2 errors are
bounded by ``r * eps`` (``eps`` = :func:`construction.layer_leak`, ``r`` = the number of leaky
copies behind a slot) plus their float64 rounding (:func:`copy_rounding`).
"""
import contextlib
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hmm.memory
from construction import (
    ConstructionSpec,
    amplification,
    build_layout,
    build_network,
    choose_beta,
    layer_leak,
    parameters_for_prompt,
    reference,
)
from construction.leak import error_factors, history_error_factor
from construction.layout import exclusion_count
from construction.spec import default_penalty
from rounding import gamma, least_squares_rounding, unit_roundoff
from test_construction_helpers import hmm_prompt

def position_weight_rounding(beta: float, num_columns: int) -> float:
    """Relative float64 rounding of a position head's softmax weight over ``N = num_columns`` keys at
    logit scale beta, or of a sum of its weights over their total: ``2 ((c + 2) beta u + 2 u) +
    gamma_{N+1}``, ``c = 6 + 2 sqrt(2) + 4 (4 + pi)``, first order in u.

    A position ``(cos k theta, sin k theta)`` is within ``(4 + pi) u`` of its exact value (numpy's
    4 ulps; ``k theta < pi``, as :meth:`construction.Network.forward` demands, rounds by at most
    ``pi u``); a query weight ``beta R_ab`` within ``2 beta u`` (math's 1 ulp, the product). The query
    ``beta R^T pos_i`` (2-term sums; rows of R and positions are unit vectors) is then within
    ``(2 sqrt(2) + (4 + pi) sqrt(2) + 2) beta u`` entrywise and at most beta in norm, and the logit,
    its dot product with ``pos_j`` (the key is the identity), within ``c beta u``. Softmax subtracts
    the row's maximum (common to all weights, it cancels, but the difference of two numbers below
    beta rounds by ``2 beta u``) and exponentiates (torch's exp, 1 ulp): each exponential is within
    ``(c + 2) beta u + 2 u`` relative, a weight, a ratio of one exponential (or a sum of some) to the
    sum of all, within twice that, and the normalisation adds ``gamma_{N+1}``.
    """
    u = unit_roundoff()
    logit = 6 + 2 * math.sqrt(2) + 4 * (4 + math.pi)
    return 2 * ((logit + 2) * beta * u + 2 * u) + gamma(num_columns + 1)


def copy_rounding(copies: float, num_columns: int, beta: float, eps: float) -> float:
    """Float64 rounding a stage 1-2 coordinate carries beyond its leak error ``copies * eps`` after
    ``copies`` softmax copies over ``N = num_columns`` keys at logit scale beta (first order in u):
    ``copies (gamma_{2N+1} (1 + copies eps) + phi eps)``, ``phi`` = :func:`position_weight_rounding`.

    A copy writes ``sum_j w_j v_j`` into an empty slot; with ``j*`` the target key,
    ``sum_j w_j v_j - v_j* = (sum_j w_j - 1) v_j* + sum_{j != j*} w_j (v_j - v_j*)``. The values are
    convex combinations of 0/1 coordinates, in ``[0, 1 + copies eps]`` with their rounding.

    * The computed weights are computed exponentials over their computed sum, so they sum to 1
      within ``gamma_{N+1}`` whatever the exponentials' error; summing the N products ``w_j v_j``
      rounds by ``gamma_N`` of their magnitudes: ``gamma_{2N+1} (1 + copies eps)`` a copy.
    * Off target, a computed weight is within ``phi`` of the exact one, relatively, so the leak
      term grows from at most eps to ``eps (1 + phi)``.
    """
    phi = position_weight_rounding(beta, num_columns)
    return copies * (gamma(2 * num_columns + 1) * (1 + copies * eps) + phi * eps)


def count_rounding(layout, num_columns: int, beta: float, eps: float) -> float:
    """Float64 rounding of an exclusion count (:func:`construction.layout.exclusion_count`): the
    copies behind its rows (their factors add up to ``error_factors(...)["D"]``) plus summing the
    rows, each at most ``1 + D eps``: ``gamma_rows`` of their number."""
    factor = error_factors(layout, False)["D"]
    rows = len(layout.exclusion_rows())
    return copy_rounding(factor, num_columns, beta, eps) + gamma(rows) * rows * (1 + factor * eps)


def beta_for_leak(eps: float, theta: float, num_columns: int) -> float:
    """The beta at which the leak formula equals ``eps`` (bisection; eps decreases in beta)."""
    low, high = 0.0, 1.0
    while layer_leak(high, theta, num_columns) > eps:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if layer_leak(middle, theta, num_columns) > eps else (low, middle)
    return high


def shared_parameters(tokens, p: int, history_length: int, steps: int):
    """Parameters valid for both the sequential and the doubling network (beta: the larger one)."""
    params = parameters_for_prompt(tokens, p, history_length, steps, doubling=True)
    layout = build_layout(p, history_length)
    beta = max(
        choose_beta(1e-9, params.theta, len(tokens) + 1, amplification(layout, doubling, steps, params.eta, params.penalty))
        for doubling in (False, True)
    )
    return replace(params, beta=beta)


def block_errors(trace, tokens, p: int, L: int, m: int) -> dict[str, float]:
    """Max |network - reference| of every history and future slot after stage 2."""
    stage2 = "label" if m == 1 else f"label.{m}"
    history, future = reference.history(tokens, p, L), reference.future(tokens, p, m)
    errors = {}
    for r in range(1, L):
        errors[f"history.{r}"] = float(np.abs(trace.slot(f"history.{r}", stage2).double().numpy().T - history[:, r]).max())
    for r in range(1, m + 1):
        errors[f"future.{r}"] = float(np.abs(trace.slot(f"future.{r}", stage2).double().numpy().T - future[:, r - 1]).max())
    return errors


def off_target_mass(weights: torch.Tensor, shift: int) -> np.ndarray:
    """Per query, the softmax mass outside the target column ``clamp(i - shift, 0, N-1)``."""
    N = weights.shape[-1]
    target = np.clip(np.arange(N) - shift, 0, N - 1)
    mass = weights[0].double().numpy().copy()
    mass[np.arange(N), target] = 0.0
    return mass.sum(axis=1)


P, L, T = 3, 4, 6
TOKENS = hmm_prompt(P, [10, 12, 9, 11, 10], 8, seed=11)
N = len(TOKENS) + 1
THETA = math.pi / (N + 1)
ETA = parameters_for_prompt(TOKENS, P, L, T).eta


@pytest.mark.parametrize("eps", [1e-1, 1e-2, 1e-4, 1e-7, 1e-10, 1e-12])
def test_leak_formula_matches_measured_attention_and_bounds_stage_1_2(eps):
    beta = beta_for_leak(eps, THETA, N)
    network = build_network(ConstructionSpec(P, L, T, ETA, beta, THETA), allow_leak=True)
    leaky = network.spec.error_bound(N) > network.tolerance
    with pytest.warns(UserWarning, match="too small") if leaky else contextlib.nullcontext():
        trace = network.forward(TOKENS)
    # The leak formula is the measured worst off-target mass S/(1+S), S = eps: attained to 1e-6
    # relative (a claim of tightness), never exceeded beyond the softmax's rounding.
    for name, shift in [(f"history.{r}", 1) for r in range(1, L)] + [("label", -1)]:
        worst = off_target_mass(trace.attn_weights[name], shift).max()
        # The off-target mass is a sum of weights over their total; off_target_mass's sum adds gamma_N.
        rounding = position_weight_rounding(beta, N) + gamma(N)
        assert eps / (1.0 + eps) * (1 - 1e-6) <= worst <= eps / (1.0 + eps) * (1 + rounding)
    errors = block_errors(trace, TOKENS, P, L, 1)
    for r in range(1, L):
        assert errors[f"history.{r}"] <= r * eps + copy_rounding(r, N, beta, eps)
    assert errors["future.1"] <= eps + copy_rounding(1, N, beta, eps)
    # ... and the bound is attained to within a factor 2 on the first copy of each kind.
    assert errors["history.1"] >= 0.5 * eps and errors["future.1"] >= 0.5 * eps
    # The end-to-end bound (first order in eps) holds at every beta of the range.
    end_to_end = np.abs(trace.prediction.numpy() - reference.prediction(TOKENS, P, L, ETA, T)).max()
    assert end_to_end <= network.spec.error_bound(N)


def test_end_to_end_at_the_chosen_beta():
    params = parameters_for_prompt(TOKENS, P, L, T, target=1e-9)
    network = build_network(params)
    assert network.spec.error_bound(N) <= 1e-9
    trace = network.forward(TOKENS)
    expected = reference.prediction(TOKENS, P, L, params.eta, T)
    error = float(np.abs(trace.prediction.numpy() - expected).max())
    assert error <= 1e-9
    # The first-order bound is conservative but not absurdly so at this beta.
    assert error <= network.spec.error_bound(N)
    assert error > 0.0


def test_sample_indicator_matches_the_reference_mask():
    params = parameters_for_prompt(TOKENS, P, L, T)
    network = build_network(params)
    trace = network.forward(TOKENS)
    count = exclusion_count(trace.residual("label"), network.layout).numpy()
    mask = reference.sample_mask(TOKENS, P, L)
    assert np.array_equal(count < 0.5, mask)
    eps = layer_leak(params.beta, params.theta, N)
    rounding = count_rounding(network.layout, N, params.beta, eps)
    assert count[mask].max() <= error_factors(network.layout, False)["D"] * eps + rounding
    assert count[~mask].min() >= 1.0 - error_factors(network.layout, False)["D"] * eps - rounding
    # N' = sum over demonstrations of (n_d - L): lengths 10, 12, 9, 11, 10 with L = 4.
    assert mask.sum() == (10 + 12 + 9 + 11 + 10) - 5 * L


@pytest.mark.parametrize("history_length", [2, 3, 5, 8])
def test_doubling_gives_the_sequential_features(history_length):
    tokens = hmm_prompt(2, [12, 10, 11], 9, seed=history_length)
    params = shared_parameters(tokens, 2, history_length, 3)
    sequential = build_network(replace(params, doubling=False)).forward(tokens)
    doubling = build_network(replace(params, doubling=True)).forward(tokens)
    assert len([name for name in doubling.layer_names if name.startswith("history")]) == math.ceil(math.log2(history_length))
    eps = layer_leak(params.beta, params.theta, len(tokens) + 1)
    both = history_error_factor(history_length, True) + history_error_factor(history_length, False)
    for r in range(1, history_length):
        gap = (sequential.slot(f"history.{r}", "label") - doubling.slot(f"history.{r}", "label")).abs().max()
        assert float(gap) <= both * eps + copy_rounding(both, len(tokens) + 1, params.beta, eps)
    assert float((sequential.prediction - doubling.prediction).abs().max()) <= 1e-9


@pytest.mark.parametrize("m", [2, 3])
def test_theorem_2_variant_joint_targets(m):
    p, history_length, steps = 2, 2, 5
    tokens = hmm_prompt(p, [9, 8, 10, 9], 5, seed=m)
    params = parameters_for_prompt(tokens, p, history_length, steps, future_length=m)
    network = build_network(params)
    trace = network.forward(tokens)
    assert "joint" in trace.layer_names and trace.prediction.shape == (p**m,)
    eps = layer_leak(params.beta, params.theta, len(tokens) + 1)
    expected_joint = reference.joint(reference.future(tokens, p, m), p)
    joint_error = float(np.abs(trace.slot("joint", "joint").numpy().T - expected_joint).max())
    # The joint unit relu(sum of m coordinates - (m - 1)) adds gamma_{m+1} of its 2m - 1 magnitudes.
    y_factor = error_factors(network.layout, False)["y"]
    rounding = copy_rounding(y_factor, len(tokens) + 1, params.beta, eps) + gamma(m + 1) * (2 * m - 1)
    assert joint_error <= y_factor * eps + rounding
    count = exclusion_count(trace.residual("joint"), network.layout).numpy()
    assert np.array_equal(count < 0.5, reference.sample_mask(tokens, p, history_length, m))
    expected = reference.prediction(tokens, p, history_length, params.eta, steps, m)
    assert float(np.abs(trace.prediction.numpy() - expected).max()) <= 1e-9


@st.composite
def prompts(draw):
    p = draw(st.integers(2, 6))
    history_length = draw(st.integers(1, 5))
    demo_lengths = draw(st.lists(st.integers(history_length + 1, history_length + 9), min_size=2, max_size=5))
    test_length = draw(st.integers(history_length, history_length + 5))
    seed = draw(st.integers(0, 10_000))
    return p, history_length, hmm_prompt(p, demo_lengths, test_length, seed, num_states=draw(st.integers(2, 5)))


@given(prompts())
def test_random_hmm_prompts_every_stage_and_end_to_end(case):
    p, history_length, tokens = case
    steps, num_columns = 4, len(tokens) + 1
    params = shared_parameters(tokens, p, history_length, steps)
    eps = layer_leak(params.beta, params.theta, num_columns)
    expected = reference.prediction(tokens, p, history_length, params.eta, steps)
    predictions = []
    for doubling in (False, True):
        network = build_network(replace(params, doubling=doubling))
        trace = network.forward(tokens)
        errors = block_errors(trace, tokens, p, history_length, 1)
        for r in range(1, history_length):
            copies = history_error_factor(r + 1, doubling)
            assert errors[f"history.{r}"] <= copies * eps + copy_rounding(copies, num_columns, params.beta, eps)
        assert errors["future.1"] <= eps + copy_rounding(1, num_columns, params.beta, eps)
        count = exclusion_count(trace.residual("label"), network.layout).numpy()
        assert np.array_equal(count < 0.5, reference.sample_mask(tokens, p, history_length))
        assert float(np.abs(trace.prediction.numpy() - expected).max()) <= 1e-9
        predictions.append(trace.prediction)
    assert float((predictions[0] - predictions[1]).abs().max()) <= 1e-9


def test_default_penalty_switches_off_every_non_sample():
    """At the default penalty 10 p L every GD score on a non-sample key is negative."""
    params = parameters_for_prompt(TOKENS, P, L, T)
    assert params.penalty == default_penalty(P, L)
    trace = build_network(params).forward(TOKENS)
    outside = ~reference.sample_mask(TOKENS, P, L)
    for step in range(1, T + 1):
        assert float(trace.attn_logits[f"gd.{step}"][:, :, outside].max()) < 0.0


def test_choose_beta_is_the_smallest_beta_meeting_the_target():
    layout = build_layout(P, L)
    penalty = default_penalty(P, L)
    beta = choose_beta(1e-9, THETA, N, amplification(layout, False, T, ETA, penalty))
    network = build_network(ConstructionSpec(P, L, T, ETA, beta, THETA))
    assert network.spec.error_bound(N) <= 1e-9 < build_network(ConstructionSpec(P, L, T, ETA, beta * (1 - 1e-6), THETA)).spec.error_bound(N)


@pytest.mark.parametrize("history_length", [1, 2, 4])
def test_reference_regression_problem_agrees_with_hmm_memory(history_length):
    """Second oracle: hmm.memory's one-hot histories, per demonstration, give the same X, Y, x_test,
    and hmm.memory.least_squares the same minimum-norm solution."""
    lengths, test_length = [9, 12, 8, 10], 6
    tokens = hmm_prompt(P, lengths, test_length, seed=history_length)
    X, Y, x_test = reference.regression_problem(tokens, P, history_length)
    rows, targets, start = [], [], 0
    for length in lengths:
        demo = torch.as_tensor(tokens[start : start + length])
        histories = hmm.memory.one_hot_history(demo, history_length, P)
        rows.append(histories[history_length - 1 : length - 1])
        targets.append(torch.nn.functional.one_hot(demo[history_length:], P).double())
        start += length + 1
    assert np.array_equal(X, torch.cat(rows).numpy()) and np.array_equal(Y, torch.cat(targets).numpy())
    test = torch.as_tensor(tokens[-test_length:])
    assert np.array_equal(x_test, hmm.memory.one_hot_history(test, history_length, P)[-1].numpy())
    w_memory = hmm.memory.least_squares(torch.as_tensor(X), torch.as_tensor(Y)).numpy()
    w_reference = reference.min_norm_solution(X, Y)
    # Two SVD solutions of one problem, each within rounding.least_squares_rounding of the exact one.
    rounding = least_squares_rounding(X, Y, w_reference) + least_squares_rounding(X, Y, w_memory)
    assert np.abs(w_reference - w_memory).max() <= rounding
