"""Context-tree weighting (empirical/yardsticks/variable_order.py) against a brute-force enumeration of
the mixture it computes: every tree of depth <= D, its prior 2^-cost, its sequential probability."""
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hmm
from empirical.yardsticks.ngram import InContextNGram, context_counts, mean_loss, scored_rows
from empirical.yardsticks.variable_order import (ContextTreeWeighting, fit_depth_concentrations, next_token_probability,
                                                 tree_statistics, variable_order_prediction, weighted_prediction)

EPS = np.finfo(np.float64).eps
BOS = "BOS"


def context(prompt: list[int], position: int, depth: int, delimiter: int) -> tuple:
    """The ``depth`` tokens before ``position`` inside its segment, most recent first, BOS-padded."""
    tokens, u = [], position - 1
    while len(tokens) < depth:
        if u < 0 or prompt[u] == delimiter:
            tokens.append(BOS)
        else:
            tokens.append(prompt[u])
            u -= 1
    return tuple(tokens)


def trees(alphabet: list, depth: int, prefix: tuple = ()) -> list[tuple[list[tuple], int]]:
    """Every tree of depth <= ``depth`` below ``prefix`` as (leaves, cost): a node above the
    maximal depth is a leaf (one bit) or splits into one subtree per symbol (one bit)."""
    if len(prefix) == depth:
        return [([prefix], 0)]
    splits = [([leaf for leaves, _ in choice for leaf in leaves], 1 + sum(cost for _, cost in choice))
              for choice in itertools.product(*(trees(alphabet, depth, prefix + (c,)) for c in alphabet))]
    return [([prefix], 1), *splits]


def interpolated(counts: dict, leaf: tuple, num_tokens: int, alphas: list[float]) -> np.ndarray:
    """The in-context n-gram of order ``len(leaf) + 1`` at ``leaf``: Dirichlet back-off from the
    uniform distribution through the counts of each of its suffixes (ngram.py's module docstring)."""
    prediction = np.full(num_tokens, 1.0 / num_tokens)
    for d in range(len(leaf) + 1):
        seen = counts.get(leaf[:d], np.zeros(num_tokens))
        prediction = (seen + alphas[d] * prediction) / (seen.sum() + alphas[d])
    return prediction


def brute_force_ctw(prompt: list[int], num_tokens: int, alphas: list[float]) -> np.ndarray:
    """``(N, p)``: for each row t, ``sum_T 2^-cost(T) P_T(x_<=t) p_T(o | x_<=t) / sum_T 2^-cost(T) P_T(x_<=t)``
    with every tree T enumerated, each leaf of depth d predicting by the in-context (d + 1)-gram."""
    depth, delimiter = len(alphas) - 1, num_tokens
    full = [context(prompt, u, depth, delimiter) for u in range(len(prompt) + 1)]
    for t in range(len(prompt)):
        if prompt[t] == delimiter:
            full[t + 1] = (BOS,) * depth
    numerator = np.zeros((len(prompt), num_tokens))
    evidence = np.zeros(len(prompt))
    for leaves, cost in trees([*range(num_tokens), BOS], depth):
        leaf_of = [next(leaf for leaf in leaves if path[:len(leaf)] == leaf) for path in full]
        counts: dict[tuple, np.ndarray] = {}  # every context of every event so far, each of its depths
        probability = 2.0 ** -cost
        for t, token in enumerate(prompt):
            if token != delimiter:
                probability *= interpolated(counts, leaf_of[t], num_tokens, alphas)[token]
                for d in range(depth + 1):
                    counts.setdefault(full[t][:d], np.zeros(num_tokens))[token] += 1
            numerator[t] += probability * interpolated(counts, leaf_of[t + 1], num_tokens, alphas)
            evidence[t] += probability
    return numerator / evidence[:, None]


def tree_count(symbols: int, depth: int) -> int:
    return 1 if depth == 0 else 1 + tree_count(symbols, depth - 1) ** symbols


@pytest.mark.parametrize(("symbols", "depth"), [(2, 0), (2, 3), (3, 2), (4, 2)])
def test_the_enumeration_holds_every_tree_and_its_prior_sums_to_one(symbols, depth):
    enumerated = trees(list(range(symbols)), depth)
    assert len(enumerated) == tree_count(symbols, depth)
    assert math.fsum(2.0 ** -cost for _, cost in enumerated) == 1.0  # Kraft's equality of the tree code


def prompts(max_depth: dict[int, int]):
    return st.sampled_from(sorted(max_depth)).flatmap(lambda p: st.tuples(
        st.just(p), st.lists(st.lists(st.integers(0, p - 1), min_size=1, max_size=4), min_size=1, max_size=3),
        st.integers(0, max_depth[p]).flatmap(lambda d: st.lists(st.floats(0.05, 20.0), min_size=d + 1,
                                                                  max_size=d + 1))))


@settings(max_examples=30, deadline=None)
@given(prompts({2: 3, 3: 2}))
def test_predictions_equal_the_enumerated_mixture(case):
    p, segments, alphas = case
    prompt = [token for segment in segments for token in (*segment, p)][:-1][:8]
    depth, length = len(alphas) - 1, sum(token != p for token in prompt)
    got = variable_order_prediction(torch.tensor([prompt]), p, alphas).numpy()[0]
    expected = brute_force_ctw(prompt, p, alphas)
    # Each factor p_e is D + 1 interpolation steps of 3 roundings (3 (D + 1) u, the n-grams' test).
    # The enumeration: each tree's probability is a product of <= L such factors and the
    # predictive one more; the sums over K trees add <= K roundings each; the quotient one: relative
    # error <= (2 ((3 (D + 1) + 1) (L + 1) + K) + 1) u. The recursion: every log P_e and log P_w is
    # touched by at most 4 roundings per event and depth, each an absolute error of u M, M the
    # largest |log P|, plus the factors' own 3 (D + 1) u each (every factor is at least
    # prod_d alpha_d / (L + alpha_d) / p, so M <= L (log p + sum_d log((L + alpha_d) / alpha_d)));
    # exp turns the absolute error of log(w_d) into a relative one of w_d, and the D mixing steps
    # and the leaf's own estimate add 3 roundings each per depth: <= ((4 M + 3 (D + 1) L) (D + 1)
    # + 6 (D + 1)) u.
    trees_enumerated = tree_count(p + 1, depth)
    largest_log = length * (math.log(p) + sum(math.log((length + a) / a) for a in alphas))
    enumeration = 2 * ((3 * (depth + 1) + 1) * (length + 1) + trees_enumerated) + 1
    recursion = (4 * largest_log + 3 * (depth + 1) * length) * (depth + 1) + 6 * (depth + 1)
    bound = (enumeration + recursion) * EPS
    np.testing.assert_allclose(got, expected, rtol=bound, atol=0)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=bound + p * EPS)


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 5).flatmap(lambda p: st.tuples(
    st.just(p), st.lists(st.lists(st.integers(0, p - 1), min_size=1, max_size=6), min_size=1, max_size=4),
    st.floats(0.05, 20.0))))
def test_depth_zero_is_the_in_context_unigram(case):
    p, segments, alpha = case
    prompt = torch.tensor([[token for segment in segments for token in (*segment, p)][:-1]])
    # The same counts, sums and quotient in the same order: equal to the last bit.
    torch.testing.assert_close(ContextTreeWeighting(0, p, (alpha,))(prompt), InContextNGram(1, p, (alpha,))(prompt),
                               rtol=0, atol=0)


def test_first_row_has_the_closed_form_of_two_equally_likely_trees():
    # After one token o_0 at depth 1 every tree's evidence is 1/p, so w_0 = 1/2: the unigram after
    # one count mixed evenly with the bigram of the untouched context (o_0), which backs off to it.
    p, alphas = 3, (0.7, 2.5)
    got = ContextTreeWeighting(1, p, alphas)(torch.tensor([[1, 0, 2]]))[0, 0]
    unigram = (torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64) + alphas[0] / p) / (1 + alphas[0])
    torch.testing.assert_close(got, unigram, rtol=8 * EPS, atol=0)


def test_the_counts_are_the_in_context_n_grams_counts():
    mixture = hmm.random_hmm(3, 4, batch=(6,), seed=5)
    tokens, _ = hmm.sample_sequences(mixture, torch.arange(6), 15, seed=6)
    tokens[:, [4, 9]] = 4
    counts = tree_statistics(tokens, 4, 3).counts
    np.testing.assert_array_equal(counts, context_counts(tokens, 4, 4).numpy())


def test_the_fits_objective_is_the_predictions_probability_of_each_next_token():
    mixture = hmm.random_hmm(3, 4, batch=(6,), seed=7)
    tokens, _ = hmm.sample_sequences(mixture, torch.arange(6), 15, seed=8)
    tokens[:, [4, 9]] = 4
    statistics, alphas = tree_statistics(tokens, 4, 3), (0.5, 2.0, 7.0, 30.0)
    mask, targets = scored_rows(tokens, 4)
    full = weighted_prediction(statistics, alphas)
    picked = np.take_along_axis(full, targets.numpy()[..., None], -1)[..., 0]
    # The same interpolations and weights on one token rather than all: equal to the last bit.
    np.testing.assert_array_equal(next_token_probability(statistics, alphas)[mask.numpy()], picked[mask.numpy()])


def test_chunks_give_the_prediction_of_one_batch():
    mixture = hmm.random_hmm(3, 4, batch=(5,), seed=3)
    tokens, _ = hmm.sample_sequences(mixture, torch.arange(5), 12, seed=4)
    tokens[:, 5] = 4
    whole = weighted_prediction(tree_statistics(tokens, 4, 3), (1.0, 2.0, 3.0, 4.0))
    split = variable_order_prediction(tokens, 4, (1.0, 2.0, 3.0, 4.0)).numpy()
    single = np.concatenate([weighted_prediction(tree_statistics(tokens[b:b + 1], 4, 3), (1.0, 2.0, 3.0, 4.0))
                             for b in range(5)])
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_allclose(single, whole, rtol=0, atol=0)


def test_fitted_concentrations_are_a_minimum_of_the_fitting_loss():
    # A fresh sparse Markov chain per prompt (the n-grams' test): depths 0 and 1 carry signal.
    chains = hmm.random_hmm(4, 4, batch=(64,), transition_concentration=0.3, seed=0)
    chains = hmm.HMM(chains.initial, chains.transition, torch.eye(4, dtype=torch.float64).expand(64, 4, 4))
    tokens, _ = hmm.sample_sequences(chains, torch.arange(64), 20, seed=1)
    tokens[:, 9] = 4
    alphas = np.array(fit_depth_concentrations(tokens, 4, 1))
    best = mean_loss(variable_order_prediction(tokens, 4, alphas), tokens, 4)
    for direction in np.eye(2):
        for factor in (0.9, 1.1):
            assert best <= mean_loss(variable_order_prediction(tokens, 4, alphas * factor ** direction), tokens, 4)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: ContextTreeWeighting(7, 4, (1.0,) * 8), r"depth: 7; expected an integer in 0..6"),
    (lambda: ContextTreeWeighting(2, 4, (1.0,)), r"concentrations: \(1.0,\); expected 3 numbers, one per order 1..3"),
    (lambda: variable_order_prediction(torch.tensor([[0, 1]]), 4, [1.0, -1.0]),
     r"concentrations: \[1.0, -1.0\]; expected 2 finite numbers > 0, one per order 1..2"),
    (lambda: variable_order_prediction(torch.tensor([[0, 5]]), 4, [1.0]),
     r"tokens: token 5 at \(0, 1\) is out of range; expected 0..4"),
])
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
