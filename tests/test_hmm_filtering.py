"""Exact filtering against enumeration of hidden paths, hmmlearn, and its own batched/looped forms."""
import numpy as np
import pytest
import torch
from hmm_strategies import enumerate_joint, enumerate_sequence_probability, small_hmms, token_sequences
from hmmlearn_oracle import hmmlearn_model, on_the_hmmlearn_worker
from hypothesis import given
from hypothesis import strategies as st

import hmm
from rounding import forward_rounding, gamma


@given(st.data())
def test_filtering_matches_path_enumeration(data):
    model = data.draw(small_hmms(max_states=3, max_tokens=3))
    tokens = data.draw(token_sequences(model.num_tokens, max_length=5))
    result = hmm.filter_beliefs(model, torch.tensor(tokens))
    for t in range(len(tokens)):
        joint = enumerate_joint(model, tokens[: t + 1])
        torch.testing.assert_close(result.filtered[t], joint / joint.sum(), rtol=1e-12, atol=1e-14)
        for o in range(model.num_tokens):
            expected = enumerate_sequence_probability(model, tokens[: t + 1] + [o]) / float(joint.sum())
            assert result.next_token[t, o].item() == pytest.approx(expected, rel=1e-11, abs=1e-14)
    expected_ll = np.log(enumerate_sequence_probability(model, tokens))
    assert hmm.log_likelihood(model, torch.tensor(tokens)).item() == pytest.approx(expected_ll, rel=1e-12, abs=1e-12)


@given(st.data())
def test_predicted_belief_is_filtered_belief_pushed_through_transition(data):
    model = data.draw(small_hmms())
    tokens = torch.tensor(data.draw(token_sequences(model.num_tokens, min_length=2, max_length=8)))
    result = hmm.filter_beliefs(model, tokens)
    torch.testing.assert_close(result.predicted[0], model.initial)
    torch.testing.assert_close(result.predicted[1:], result.filtered[:-1] @ model.transition, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(result.next_token[:-1], result.predicted[1:] @ model.emission, rtol=1e-12, atol=1e-15)


@given(st.data())
def test_probabilities_sum_to_one(data):
    model = data.draw(small_hmms(batch=(3,)))
    tokens = torch.tensor([data.draw(token_sequences(model.num_tokens, 4, 4)) for _ in range(3)])
    result = hmm.filter_beliefs(model, tokens)
    for name in ("predicted", "filtered", "next_token"):
        torch.testing.assert_close(getattr(result, name).sum(-1), torch.ones(3, 4, dtype=torch.float64), rtol=0, atol=1e-13)


@given(st.data())
def test_batched_equals_looped_with_broadcasting(data):
    """Model batch (K,) against obs (N, 1, T) gives (N, K); each entry equals the single call."""
    K, N, T = 3, 2, 5
    model = data.draw(small_hmms(batch=(K,)))
    tokens = torch.tensor([[data.draw(token_sequences(model.num_tokens, T, T))] for _ in range(N)])
    batched = hmm.next_token_probs(model, tokens)
    likelihood = hmm.log_likelihood(model, tokens)
    assert batched.shape == (N, K, T, model.num_tokens) and likelihood.shape == (N, K)
    for n in range(N):
        for k in range(K):
            torch.testing.assert_close(batched[n, k], hmm.next_token_probs(model[k], tokens[n, 0]), rtol=1e-13, atol=0)
            torch.testing.assert_close(likelihood[n, k], hmm.log_likelihood(model[k], tokens[n, 0]), rtol=1e-13, atol=0)


def test_shared_initial_broadcasts_against_batched_transition():
    full = hmm.random_hmm(3, 2, batch=(4,), seed=0)
    shared = hmm.HMM(full.initial[0], full.transition, full.emission)
    tokens = torch.tensor([0, 1, 1, 0])
    expected = torch.stack([hmm.log_likelihood(hmm.HMM(full.initial[0], full.transition[k], full.emission[k]), tokens) for k in range(4)])
    torch.testing.assert_close(hmm.log_likelihood(shared, tokens), expected)


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
    model = hmm.random_hmm(6, 4, seed=5)
    tokens, _ = hmm.sample_sequences(model, [0], 200, seed=6)
    single = hmm.next_token_probs(model.to(dtype=torch.float32), tokens[0])
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), hmm.next_token_probs(model, tokens[0]), rtol=0, atol=1e-5)
