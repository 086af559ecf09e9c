"""Markov-chain data and exact reference losses (:mod:`empirical.studies.markov.chains`).

Oracles: the binary closed forms, and brute-force enumeration of every sequence of a small chain
(joint entropies, marginals, exact variance of a mean log-loss). The stationary distribution of
the enumeration oracle comes from a matrix power, not from the linear solve under test.
"""
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from empirical.studies.markov.chains import (
    bigram_loss_variance,
    binary_kernel,
    check_kernel,
    entropy_rate,
    memory_coordinate,
    read_back_kernel,
    reference_losses,
    sample_sequences,
    sequence_log_losses,
    stationary_distribution,
    stationary_entropy,
)
from hmm.markov import dobrushin_coefficient
from markov_oracles import (
    bigram_log_probs,
    constant_read_back_rounding,
    entropy_perturbation,
    entropy_rate_rounding,
    memory_coordinate_rounding,
    planted_bigram_rounding,
    stationary_entropy_rounding,
    stationary_rounding,
)
from rounding import gamma, unit_roundoff

BINARY_CELLS = [(0.1, 0.1), (0.2, 0.7), (0.5, 0.8), (0.9, 0.9), (1.0, 0.3), (0.0, 0.4), (0.3, 0.7)]


def binary_entropy(x: float) -> float:
    return -sum(v * math.log(v) for v in (x, 1 - x) if v > 0)


POWER = 1000
"""The power of the kernel whose first row is the enumeration's stationary start."""


def power_stationary(kernel: np.ndarray) -> np.ndarray:
    """Oracle: a row of ``kernel^1000`` (kernels here have every entry >= 0.05, so it has converged)."""
    return np.linalg.matrix_power(kernel, POWER)[0]


def sequence_rounding(kernel: np.ndarray, length: int) -> float:
    """Relative bound on the error of a probability of :func:`enumerate_sequences`: its start,
    a product of ``POWER`` nonnegative m x m matrices (``gamma_{(POWER-1) m}``: the relative errors
    of nonnegative factors add) that is ``delta^POWER`` from ``pi`` in total variation (``delta``
    the Dobrushin coefficient; relative: over the smallest entry); the ``length - 1`` transitions'
    product and the start times it (``gamma_length``)."""
    start = power_stationary(kernel)
    delta = dobrushin_coefficient(torch.from_numpy(kernel)).item()
    return gamma((POWER - 1) * kernel.shape[0]) + delta**POWER / start.min() + gamma(length)


def entropy_sum_rounding(entropy: float, relative: float, terms: int) -> float:
    """Bound on the error of ``sum -p log p`` over ``terms`` probabilities that sum to 1, each
    within ``relative`` of the exact one: ``relative (H + 1)`` (the slope of ``-p log p`` is
    ``-(log p + 1)``), 3 roundings a term and a sum of nonnegative terms (``gamma_{terms+2}``)."""
    return relative * (entropy + 1) + gamma(terms + 2) * entropy


def enumerate_sequences(kernel: np.ndarray, length: int):
    """Every sequence of ``length`` tokens with its probability under a stationary start."""
    pi = power_stationary(kernel)
    m = kernel.shape[0]
    for sequence in itertools.product(range(m), repeat=length):
        probability = pi[sequence[0]] * np.prod([kernel[a, b] for a, b in zip(sequence, sequence[1:])])
        yield sequence, probability


def joint_entropy(kernel: np.ndarray, length: int) -> float:
    return -sum(prob * math.log(prob) for _, prob in enumerate_sequences(kernel, length) if prob > 0)


kernels = st.integers(2, 3).flatmap(
    lambda m: st.lists(
        st.lists(st.floats(0.05, 1.0), min_size=m, max_size=m), min_size=m, max_size=m
    ).map(lambda rows: np.array(rows) / np.array(rows).sum(axis=1, keepdims=True))
)


@pytest.mark.parametrize("p, q", BINARY_CELLS)
def test_binary_reference_losses_match_closed_forms(p, q):
    """Tolerances: the stationary solve's (its condition number times the elimination's backward
    error, markov_oracles.stationary_rounding) plus the closed forms' few roundings. An entropy
    term ``-x log x`` rounds 3 times (the log within 1 ulp, the product) and a sum of m such
    nonnegative terms ``gamma_{m-1}`` more; a rounded argument (``1 - p``, ``q / (p + q)``) moves
    it as ``entropy_perturbation`` says."""
    kernel = binary_kernel(p, q)
    closed = np.array([q / (p + q), p / (p + q)])  # each within 2u
    u = unit_roundoff()
    np.testing.assert_allclose(stationary_distribution(kernel), closed, rtol=0, atol=stationary_rounding(kernel) + 2 * u)
    # Ours within entropy_rate_rounding of the exact rate of the stored kernel, whose rows (1 - p
    # rounded once) are within u of the exact ones; the closed form: the same rows' entropies
    # (5 roundings each, and 1 - p), two products, a sum and a division (gamma_9).
    expected_rate = (q * binary_entropy(p) + p * binary_entropy(q)) / (p + q)
    rows = 2 * entropy_perturbation(kernel, u)
    rate_tolerance = entropy_rate_rounding(kernel) + rows + gamma(9) * expected_rate
    assert reference_losses(kernel).bigram == pytest.approx(expected_rate, rel=0, abs=rate_tolerance)
    # The closed form evaluates -x log x at p / (p + q) and at 1 minus it, rounded: within 5u of pi.
    expected_unigram = binary_entropy(p / (p + q))
    unigram_tolerance = (stationary_entropy_rounding(kernel) + entropy_perturbation(closed, 5 * u)
                         + gamma(5) * expected_unigram)
    assert reference_losses(kernel).unigram == pytest.approx(expected_unigram, rel=0, abs=unigram_tolerance)


@given(kernels)
def test_entropies_match_enumeration(kernel):
    """``H_rate = H(x_1..x_4) - H(x_1..x_3)`` and ``H(pi) = H(x_4)`` by enumerating m^4 sequences;
    each side within its rounding bound (above, and markov_oracles)."""
    m = kernel.shape[0]
    rate_rounding, entropy_rounding = entropy_rate_rounding(kernel), stationary_entropy_rounding(kernel)
    joint = {length: joint_entropy(kernel, length) for length in (3, 4)}
    enumerated = sum(entropy_sum_rounding(joint[length], sequence_rounding(kernel, length), m**length)
                     for length in (3, 4)) + unit_roundoff() * (joint[4] - joint[3])
    assert entropy_rate(kernel) == pytest.approx(joint[4] - joint[3], rel=0, abs=rate_rounding + enumerated)
    marginal = np.zeros(m)
    for sequence, probability in enumerate_sequences(kernel, 4):
        marginal[sequence[-1]] += probability
    marginal_entropy = -(marginal * np.log(marginal)).sum()
    # A marginal adds m^3 sequences' probabilities (nonnegative: gamma_{m^3} more).
    marginal_rounding = entropy_sum_rounding(marginal_entropy, sequence_rounding(kernel, 4) + gamma(m**3), m)
    assert stationary_entropy(kernel) == pytest.approx(marginal_entropy, rel=0, abs=entropy_rounding + marginal_rounding)
    assert entropy_rate(kernel) <= stationary_entropy(kernel) + rate_rounding + entropy_rounding


@given(kernels, st.integers(1, 4))
def test_bigram_loss_variance_matches_enumeration(kernel, num_predicted):
    """The exact variance of the mean of ``-log P(x_t, x_{t+1})`` over all m^(n+1) sequences."""
    values, weights = [], []
    for sequence, probability in enumerate_sequences(kernel, num_predicted + 1):
        values.append(np.mean([-math.log(kernel[a, b]) for a, b in zip(sequence, sequence[1:])]))
        weights.append(probability)
    values, weights = np.array(values), np.array(weights)
    mean = weights @ values
    m, n, sequences = kernel.shape[0], num_predicted, len(values)
    # A value: n logs (each within 1 ulp) averaged, gamma_{n+3}; a weight: sequence_rounding; the
    # weighted sum of nonnegative terms, gamma_sequences.
    probability = sequence_rounding(kernel, n + 1)
    mean_rounding = (probability + gamma(n + 3) + gamma(sequences)) * mean
    assert mean == pytest.approx(entropy_rate(kernel), rel=0, abs=mean_rounding + entropy_rate_rounding(kernel))
    # The variance from enumeration: each deviation v - mean within delta (the value's, the mean's
    # and the subtraction's roundings), so its square within 2 |v - mean| delta + delta^2; then the
    # weights and the sum, relative.
    largest = -np.log(kernel).max()  # every loss f = -log P lies in [0, largest]
    deviation = np.abs(values - mean).max()
    delta = gamma(n + 3) * largest + mean_rounding + unit_roundoff() * deviation
    variance = weights @ (values - mean) ** 2
    enumerated = 2 * deviation * delta + delta**2 + (probability + gamma(sequences + 1)) * variance
    # Ours: n^2 V = n c_0 + 2 sum (n - d) c_d, each c_d a difference of two sums of nonnegative
    # products below largest^2: E f^2 (m^2 + 7 roundings), rate^2 (2 m^2 + 7), a^T P^(d-1) h
    # ((n + 1) m + 5), one more for the difference; each moved by pi_hat's error F by at most
    # 3 m F largest^2. The weights n and 2 (n - d) sum to n^2; accumulating them and dividing by
    # n^2 add gamma_{n+3} largest^2.
    F = stationary_rounding(kernel)
    roundings = max(2 * m * m + 7, (n + 1) * m + 5) + 1
    ours = (3 * m * F + 2 * gamma(roundings) + gamma(n + 3)) * largest**2
    assert bigram_loss_variance(kernel, num_predicted) == pytest.approx(variance, rel=0, abs=ours + enumerated)


def test_samples_have_stationary_marginals_and_kernel_transitions():
    """Frequencies of 400k tokens (0.5 / 0.8 chain) within 5 standard errors. Tokens of one
    sequence are correlated, so the marginal's error carries the asymptotic variance factor of an
    indicator of a two-state chain, ``(1 + lambda) / (1 - lambda)`` with ``lambda = 1 - p - q``."""
    p, q = 0.5, 0.8
    kernel = binary_kernel(p, q)
    tokens = sample_sequences(kernel, 2000, 200, 1)
    pi_1 = p / (p + q)
    lam = 1 - p - q
    marginal_error = math.sqrt(pi_1 * (1 - pi_1) * (1 + lam) / (1 - lam) / tokens.numel())
    assert abs(tokens.double().mean().item() - pi_1) < 5 * marginal_error
    first_tokens_error = math.sqrt(pi_1 * (1 - pi_1) / tokens.shape[0])
    assert abs(tokens[:, 0].double().mean().item() - pi_1) < 5 * first_tokens_error
    current, following = tokens[:, :-1].reshape(-1), tokens[:, 1:].reshape(-1)
    for state, switch in ((0, p), (1, q)):
        successors = following[current == state]
        switched = (successors != state).double()
        # Given the visited states, the successors are independent Bernoulli(switch) draws.
        assert abs(switched.mean().item() - switch) < 5 * math.sqrt(switch * (1 - switch) / len(switched))


def test_sampling_is_reproducible_and_uses_every_state_of_an_m_ary_chain():
    kernel = np.array([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.8, 0.1, 0.1]])
    first = sample_sequences(kernel, 50, 30, 7)
    second = sample_sequences(kernel, 50, 30, 7)
    assert torch.equal(first, second)
    assert set(first.unique().tolist()) == {0, 1, 2}
    assert first.dtype == torch.int64 and first.shape == (50, 30)


def test_deterministic_chain_samples_its_only_path():
    tokens = sample_sequences(binary_kernel(1.0, 1.0), 4, 10, 0)
    assert torch.equal(tokens[:, 1:], 1 - tokens[:, :-1])


@pytest.mark.parametrize("p, q", [(0.2, 0.3), (0.5, 0.8), (0.9, 0.6)])
def test_bigram_predictor_reaches_the_entropy_rate(p, q):
    """Mean log-loss of the kernel's own predictions on B = 1000 sequences of 256 tokens.

    Sampling error (derived in :func:`bigram_loss_variance`): the per-sequence means are i.i.d.
    with exact variance ``V_255``, so their average has standard deviation ``sqrt(V_255 / B)``
    (about 1.3e-3 nats for the 0.5 / 0.8 chain); we require agreement within 4 of them
    (two-sided false-alarm probability 6e-5 under the CLT)."""
    kernel = binary_kernel(p, q)
    num_sequences, length = 1000, 256
    tokens = sample_sequences(kernel, num_sequences, length, 3)
    losses = sequence_log_losses(bigram_log_probs(kernel, tokens), tokens)
    standard_error = math.sqrt(bigram_loss_variance(kernel, length - 1) / num_sequences)
    assert abs(losses.mean().item() - entropy_rate(kernel)) < 4 * standard_error
    # The same bound is far too tight for the unigram predictor: its excess is many errors away.
    unigram = torch.from_numpy(np.log(stationary_distribution(kernel))).expand(num_sequences, length, 2)
    assert sequence_log_losses(unigram, tokens).mean().item() - entropy_rate(kernel) > 4 * standard_error


def test_read_back_kernel_of_the_bigram_and_unigram_predictors():
    kernel = np.array([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.8, 0.1, 0.1]])
    tokens = sample_sequences(kernel, 20, 50, 2)
    rounding = constant_read_back_rounding(tokens)
    bigram = read_back_kernel(tokens, bigram_log_probs(kernel, tokens).exp())
    # exp(log k) is k within planted_bigram_rounding, before the read-back's rounding.
    bigram_error = float((kernel * planted_bigram_rounding(kernel)).max()) + rounding
    np.testing.assert_allclose(bigram.mean, kernel, rtol=0, atol=bigram_error)
    np.testing.assert_allclose(bigram.spread, 0.0, rtol=0, atol=rounding)
    assert memory_coordinate(bigram.mean, kernel) == pytest.approx(
        1.0, rel=0, abs=memory_coordinate_rounding(kernel, bigram_error, 1.0))
    pi = stationary_distribution(kernel)
    unigram = read_back_kernel(tokens, torch.from_numpy(pi).expand(20, 50, 3))
    np.testing.assert_allclose(unigram.mean, np.tile(pi, (3, 1)), rtol=0, atol=rounding)
    np.testing.assert_allclose(unigram.spread, 0.0, rtol=0, atol=rounding)
    assert memory_coordinate(unigram.mean, kernel) == pytest.approx(0.0, rel=0, abs=memory_coordinate_rounding(kernel, rounding, 0.0))


def test_read_back_kernel_averages_predictions_per_current_token():
    tokens = torch.tensor([[0, 1, 0, 0]])
    probs = torch.tensor([[[0.2, 0.8], [0.6, 0.4], [0.4, 0.6], [0.0, 1.0]]], dtype=torch.float64)
    # Positions with x_t = 0: t = 0 and t = 2 (the last position predicts nothing): q(1) = 0.8, 0.6.
    read_back = read_back_kernel(tokens, probs)
    # float64, a few operations on numbers <= 1: the mean within 2u, the deviations of 0.1 within
    # 3u, the root mean square of two of them within 3u + its own 3 roundings of 0.1.
    np.testing.assert_allclose(read_back.mean, [[0.3, 0.7], [0.6, 0.4]], rtol=0, atol=2 * unit_roundoff())
    np.testing.assert_allclose(read_back.spread, [[0.1, 0.1], [0.0, 0.0]], rtol=0, atol=4 * unit_roundoff())


def test_memory_coordinate_halfway_between_the_solutions():
    kernel = binary_kernel(0.2, 0.6)
    pi = stationary_distribution(kernel)
    halfway = 0.5 * kernel + 0.5 * np.tile(pi, (2, 1))
    # The halves are exact; their sum, at most 1, rounds by at most u.
    assert memory_coordinate(halfway, kernel) == pytest.approx(
        0.5, rel=0, abs=memory_coordinate_rounding(kernel, unit_roundoff(), 0.5))


@pytest.mark.parametrize(
    "p, q, message",
    [
        (-0.1, 0.5, r"p: -0.1 is outside \[0, 1\]"),
        (0.5, 1.5, r"q: 1.5 is outside \[0, 1\]"),
        (float("nan"), 0.5, r"p: nan; expected a finite"),
        (0.0, 0.0, r"p, q: both are 0"),
        ("0.5", 0.5, r"p: '0.5'; expected a finite"),
    ],
)
def test_binary_kernel_rejects_bad_switching_probabilities(p, q, message):
    with pytest.raises(ValueError, match=message):
        binary_kernel(p, q)


@pytest.mark.parametrize(
    "kernel, message",
    [
        ([[0.5, 0.5]], r"kernel: shape \(1, 2\); expected a square"),
        ([[1.0]], r"kernel: shape \(1, 1\); expected a square \(m, m\) kernel with m >= 2"),
        ([[0.5, 0.6], [0.5, 0.5]], r"kernel: row \(0,\) sums to 1.1"),
        ([[1.2, -0.2], [0.5, 0.5]], r"kernel: entry \(0, 1\) is -0.2 < 0"),
    ],
)
def test_check_kernel_names_the_problem(kernel, message):
    with pytest.raises(ValueError, match=message):
        check_kernel(kernel)


def test_reducible_chain_has_no_unique_stationary_distribution():
    with pytest.raises(ValueError, match=r"kernel: .*unique stationary distribution"):
        stationary_distribution(np.eye(3))


def test_memory_coordinate_is_undefined_for_an_iid_chain():
    with pytest.raises(ValueError, match=r"kernel: every row equals pi"):
        memory_coordinate(np.eye(2), binary_kernel(0.3, 0.7))


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((0, 10), r"num_sequences: 0; expected an integer >= 1"),
        ((5, 2.5), r"length: 2.5; expected an integer >= 1"),
    ],
)
def test_sample_sequences_rejects_bad_sizes(arguments, message):
    with pytest.raises(ValueError, match=message):
        sample_sequences(binary_kernel(0.2, 0.3), *arguments, 0)


def test_sequence_log_losses_rejects_mismatched_shapes():
    tokens = torch.zeros(2, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"log_probs: shape \(2, 4, 2\) with tokens \(2, 5\)"):
        sequence_log_losses(torch.zeros(2, 4, 2), tokens)
