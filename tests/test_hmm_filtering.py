"""Exact filtering against enumeration of hidden paths, hmmlearn, and its own batched/looped forms."""
import numpy as np
import pytest
import torch
from hmm_strategies import enumerate_joint, enumerate_sequence_probability, small_hmms, token_sequences
from hmmlearn_oracle import hmmlearn_model, on_the_hmmlearn_worker
from hypothesis import given
from hypothesis import strategies as st

import hmm
from rounding import (
    enumeration_rounding,
    filtering_rounding,
    forward_rounding,
    gamma,
    predictive_rounding,
    row_sum_deviation,
    unit_roundoff,
)


@given(st.data())
def test_filtering_matches_path_enumeration(data):
    """Entrywise relative tolerances, no absolute floor: both sides are sums of nonnegative
    products, each within its rounding bound of the exact value (:mod:`rounding`)."""
    model = data.draw(small_hmms(max_states=3, max_tokens=3))
    tokens = data.draw(token_sequences(model.num_tokens, max_length=5))
    S = model.num_states
    result = hmm.filter_beliefs(model, torch.tensor(tokens))
    for t in range(len(tokens)):
        joint = enumerate_joint(model, tokens[: t + 1])
        enumerated = enumeration_rounding(S, t + 1)
        # The enumeration's belief: a ratio of two sums, each within `enumerated`, rounded once.
        belief_tolerance = filtering_rounding(S, t + 1) + 2 * enumerated + unit_roundoff()
        torch.testing.assert_close(result.filtered[t], joint / joint.sum(), rtol=belief_tolerance, atol=0)
        # Ours: rounding.predictive_rounding; the enumeration's: a ratio of two sums, rounded once.
        next_tolerance = predictive_rounding(S, t + 1) + enumeration_rounding(S, t + 2) + enumerated + unit_roundoff()
        for o in range(model.num_tokens):
            expected = enumerate_sequence_probability(model, tokens[: t + 1] + [o]) / float(joint.sum())
            assert result.next_token[t, o].item() == pytest.approx(expected, rel=next_tolerance, abs=0)
    probability = enumerate_sequence_probability(model, tokens)
    # A relative error e of the probability is an absolute error e of its log; the log is within 1 ulp.
    log_tolerance = forward_rounding(S, len(tokens), np.log(probability)) + enumeration_rounding(S, len(tokens)) \
        + 2 * unit_roundoff() * abs(np.log(probability))
    assert hmm.log_likelihood(model, torch.tensor(tokens)).item() == pytest.approx(np.log(probability), rel=0,
                                                                                 abs=log_tolerance)


@given(st.data())
def test_predicted_belief_is_filtered_belief_pushed_through_transition(data):
    model = data.draw(small_hmms())
    tokens = torch.tensor(data.draw(token_sequences(model.num_tokens, min_length=2, max_length=8)))
    result = hmm.filter_beliefs(model, tokens)
    assert torch.equal(result.predicted[0], model.initial)
    # Two roundings of one exact product (nonnegative, S terms): within gamma_S of it each.
    torch.testing.assert_close(result.predicted[1:], result.filtered[:-1] @ model.transition,
                               rtol=2 * gamma(model.num_states), atol=0)
    # b (T O), T O formed once, against (b T) O: two sums of S nonnegative terms on each side.
    torch.testing.assert_close(result.next_token[:-1], result.predicted[1:] @ model.emission,
                               rtol=4 * gamma(model.num_states), atol=0)


@given(st.data())
def test_probabilities_sum_to_one(data):
    model = data.draw(small_hmms(batch=(3,)))
    tokens = torch.tensor([data.draw(token_sequences(model.num_tokens, 4, 4)) for _ in range(3)])
    result = hmm.filter_beliefs(model, tokens)
    S, p = model.num_states, model.num_tokens
    # A filtered belief sums to 1 + eta, |eta| <= gamma_S (rounding.filtering_rounding); pushed
    # through T (and O) its sum moves by the stored rows' own distance from 1 and by the products'
    # rounding (gamma_S each); the test's sum rounds once more (gamma_S, gamma_p).
    belief_sum = gamma(S)
    tolerances = {
        "filtered": belief_sum + gamma(S),
        "predicted": max(row_sum_deviation(model.initial), belief_sum + row_sum_deviation(model.transition))
        + 2 * gamma(S),
        "next_token": belief_sum + row_sum_deviation(model.transition) + row_sum_deviation(model.emission)
        + 2 * gamma(S) + gamma(p),
    }
    for name, tolerance in tolerances.items():
        torch.testing.assert_close(getattr(result, name).sum(-1), torch.ones(3, 4, dtype=torch.float64), rtol=0,
                                   atol=tolerance, msg=name)


@given(st.data())
def test_batched_equals_looped_with_broadcasting(data):
    """Model batch (K,) against obs (N, 1, T) gives (N, K); each entry equals the single call."""
    K, N, T = 3, 2, 5
    model = data.draw(small_hmms(batch=(K,)))
    tokens = torch.tensor([[data.draw(token_sequences(model.num_tokens, T, T))] for _ in range(N)])
    batched = hmm.next_token_probs(model, tokens)
    likelihood = hmm.log_likelihood(model, tokens)
    assert batched.shape == (N, K, T, model.num_tokens) and likelihood.shape == (N, K)
    # The same recursion in other block shapes, which may sum in another order: each within its
    # bound of the exact value (rounding.predictive_rounding).
    S = model.num_states
    predictive = 2 * predictive_rounding(S, T)
    for n in range(N):
        for k in range(K):
            torch.testing.assert_close(batched[n, k], hmm.next_token_probs(model[k], tokens[n, 0]), rtol=predictive,
                                       atol=0)
            single = hmm.log_likelihood(model[k], tokens[n, 0]).item()
            assert likelihood[n, k].item() == pytest.approx(single, rel=0, abs=2 * forward_rounding(S, T, single))


def test_shared_initial_broadcasts_against_batched_transition():
    full = hmm.random_hmm(3, 2, batch=(4,), seed=0)
    shared = hmm.HMM(full.initial[0], full.transition, full.emission)
    tokens = torch.tensor([0, 1, 1, 0])
    expected = torch.stack([hmm.log_likelihood(hmm.HMM(full.initial[0], full.transition[k], full.emission[k]), tokens) for k in range(4)])
    # The same recursion in another block shape, which may sum in another order: each within its bound
    # of the exact value (rounding.forward_rounding, increasing in |log p|).
    allowed = 2 * forward_rounding(3, len(tokens), expected.abs().max().item())
    torch.testing.assert_close(hmm.log_likelihood(shared, tokens), expected, rtol=0, atol=allowed)


@on_the_hmmlearn_worker
@pytest.mark.parametrize("implementation", ["scaling", "log"])
def test_log_likelihood_and_prefix_predictive_match_hmmlearn(implementation):
    model = hmm.random_hmm(10, 6, transition_concentration=0.5, emission_concentration=0.5, seed=3)
    tokens, _ = hmm.sample_sequences(model, [0], 60, seed=4)
    reference = hmmlearn_model(model)
    reference.implementation = implementation
    column = tokens[0].numpy()[:, None]
    log_likelihood = hmm.log_likelihood(model, tokens[0]).item()
    rounding = forward_rounding(model.num_states, len(column), log_likelihood)
    assert log_likelihood == pytest.approx(reference.score(column), rel=0, abs=2 * rounding)
    prefix_scores = np.array([reference.score(column[: t + 1]) for t in range(len(column))])
    ours = hmm.next_token_probs(model, tokens[0])
    observed_next = ours[np.arange(len(column) - 1), tokens[0, 1:]].log().numpy()
    # Two prefix scores, each within the bound of the whole sequence's (shorter, smaller |log p|),
    # and our predictive, whose normalised belief errs by at most twice its path's relative error.
    np.testing.assert_allclose(observed_next, np.diff(prefix_scores), rtol=0, atol=4 * rounding)
    _, posteriors = reference.score_samples(column)
    assert posteriors.shape == (60, 10)


@pytest.mark.long_running
@on_the_hmmlearn_worker
def test_stable_at_ten_thousand_steps_against_hmmlearn():
    model = hmm.random_hmm(8, 5, seed=11)
    tokens, _ = hmm.sample_sequences(model, [0], 10_000, seed=12)
    ours = hmm.filter_beliefs(model, tokens[0])
    assert torch.isfinite(ours.log_normalizers).all() and torch.isfinite(ours.filtered).all()
    # Each belief is divided by its sum: S entries, each rounded once, summed again.
    normalised = 2 * gamma(model.num_states)
    torch.testing.assert_close(ours.filtered.sum(-1), torch.ones(10_000, dtype=torch.float64), rtol=0, atol=normalised)
    reference = hmmlearn_model(model)
    reference.implementation = "log"
    expected = reference.score(tokens[0].numpy()[:, None])
    assert expected < -5_000  # a raw product of probabilities would underflow to 0
    rounding = forward_rounding(model.num_states, tokens.shape[1], expected)
    assert ours.log_normalizers.sum().item() == pytest.approx(expected, rel=0, abs=2 * rounding)


def test_float32_model_keeps_its_dtype_and_agrees_with_float64():
    """The float32 filter against the float64 one on the same (float32-rounded) parameters: each is
    within :func:`rounding.predictive_rounding` of the exact predictive in its own format, relative
    to entries at most 1. (The bound grows with the sequence; the filter forgets old errors, so
    the measured difference, 6e-8 here, stays near the float32 roundoff.)"""
    model = hmm.random_hmm(6, 4, seed=5)
    tokens, _ = hmm.sample_sequences(model, [0], 200, seed=6)
    single_model = model.to(dtype=torch.float32)
    single = hmm.next_token_probs(single_model, tokens[0])
    assert single.dtype == torch.float32
    double = hmm.next_token_probs(single_model.to(dtype=torch.float64), tokens[0])
    length = tokens.shape[-1]
    allowed = predictive_rounding(6, length, torch.float32) + predictive_rounding(6, length)
    torch.testing.assert_close(single.double(), double, rtol=allowed, atol=0)
