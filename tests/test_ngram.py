"""In-context n-gram predictors (empirical/yardsticks/ngram.py) against a brute-force count written as loops."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hmm
from empirical.yardsticks.ngram import InContextNGram, context_counts, fit_concentrations, interpolate, mean_loss

EPS = np.finfo(np.float64).eps


def brute_force_ngram(prompt: list[int], num_tokens: int, concentrations: list[float]) -> np.ndarray:
    """``(N, p)`` by loops: for each row t, walk back inside the segment of t + 1 for its context,
    count every earlier event with the same context, and interpolate from the uniform
    distribution up (ngram.py's module docstring)."""
    delimiter, order = num_tokens, len(concentrations)

    def context(position: int, length: int) -> tuple:
        """The ``length`` tokens before ``position`` inside its segment, None-padded (BOS)."""
        tokens = []
        u = position - 1
        while len(tokens) < length:
            if u < 0 or prompt[u] == delimiter:
                tokens.append(None)
            else:
                tokens.append(prompt[u])
                u -= 1
        return tuple(tokens)

    out = np.zeros((len(prompt), num_tokens))
    for t in range(len(prompt)):
        target_context = {j: context(t + 1, j) for j in range(order)}
        if prompt[t] == delimiter:
            target_context = {j: (None,) * j for j in range(order)}
        prediction = np.full(num_tokens, 1.0 / num_tokens)
        for j, alpha in enumerate(concentrations):
            counts = np.zeros(num_tokens)
            for u in range(t + 1):
                if prompt[u] != delimiter and context(u, j) == target_context[j]:
                    counts[prompt[u]] += 1
            prediction = (counts + alpha * prediction) / (counts.sum() + alpha)
        out[t] = prediction
    return out


def test_hand_made_prompt_counts():
    # p = 3, delimiter 3: segments (0 1 0 1), (0 1 2), (0 1)
    prompt = torch.tensor([[0, 1, 0, 1, 3, 0, 1, 2, 3, 0, 1]])
    counts = context_counts(prompt, 3, 3)
    assert counts[0, 0, -1].tolist() == [4, 4, 1]  # every token of the prompt
    assert counts[1, 0, -1].tolist() == [1, 0, 1]  # after a 1: 0 (segment 1) and 2 (segment 2)
    assert counts[1, 0, 4].tolist() == [1, 0, 0]  # at the delimiter: first tokens of segments so far
    assert counts[2, 0, 8].tolist() == [2, 0, 0]  # context (BOS, BOS): the segments' first tokens
    assert counts[2, 0, 9].tolist() == [0, 2, 0]  # context (BOS, 0): the segments' second tokens
    assert counts[1, 0, 3].tolist() == [1, 0, 0]  # never counts across the delimiter at 4


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 4).flatmap(lambda p: st.tuples(
    st.just(p), st.lists(st.lists(st.integers(0, p - 1), min_size=1, max_size=5), min_size=1, max_size=4),
    st.lists(st.floats(0.05, 20.0), min_size=1, max_size=4))))
def test_predictions_equal_the_brute_force_count(case):
    p, segments, concentrations = case
    prompt = [token for segment in segments for token in (*segment, p)][:-1]
    got = InContextNGram(len(concentrations), p, tuple(concentrations))(torch.tensor([prompt])).numpy()[0]
    expected = brute_force_ngram(prompt, p, concentrations)
    # Counts are exact integers on both sides; each of the n interpolation steps rounds a sum, a
    # product and a quotient (3 ulps of a number <= 1), so 3 n ulps bound the difference.
    np.testing.assert_allclose(got, expected, rtol=3 * len(concentrations) * EPS, atol=3 * len(concentrations) * EPS)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=(3 * len(concentrations) + p) * EPS)


def test_fitted_concentrations_are_a_minimum_of_the_fitting_loss():
    # A fresh sparse Markov chain per prompt, so that both orders carry signal and both optima are
    # inside CONCENTRATION_BOUNDS.
    chains = hmm.random_hmm(4, 4, batch=(64,), transition_concentration=0.3, seed=0)
    chains = hmm.HMM(chains.initial, chains.transition, torch.eye(4, dtype=torch.float64).expand(64, 4, 4))
    tokens, _ = hmm.sample_sequences(chains, torch.arange(64), 20, seed=1)
    tokens[:, 9] = 4
    alphas = np.array(fit_concentrations(tokens, 4, 2))
    assert np.all((alphas > 2e-3) & (alphas < 5e2)), alphas
    counts = context_counts(tokens, 4, 2)
    best = mean_loss(interpolate(counts, alphas), tokens, 4)
    for direction in np.eye(2):
        for factor in (0.9, 1.1):
            assert best <= mean_loss(interpolate(counts, alphas * factor ** direction), tokens, 4)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: InContextNGram(0, 4, ()), r"order: 0; expected an integer >= 1"),
    (lambda: InContextNGram(2, 4, (1.0,)), r"concentrations: \(1.0,\); expected 2 numbers, one per order"),
    (lambda: interpolate(torch.zeros(1, 1, 2, 4), [-1.0]), r"concentrations: \[-1.0\]; expected 1 finite numbers > 0"),
    (lambda: context_counts(torch.tensor([0, 1]), 4, 1), r"tokens: shape \(2,\); expected \(B, N\) prompts"),
    (lambda: context_counts(torch.tensor([[0, 5]]), 4, 1), r"tokens: token 5 at \(0, 1\) is out of range; expected 0..4"),
])
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
