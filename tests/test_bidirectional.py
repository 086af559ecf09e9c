"""The bidirectional bounds of hmm/bidirectional.py against the exact evidence of two-state HMMs:
the reverse bound on ``log P(all tokens)``, the reverse bound on ``log P(test | demonstrations)``
(the chain stopped at the demonstrations' end) and the forward bound, each on average over prompts
simulated from the prior, with the planted faults that the comparison catches.

The oracle (:func:`exact_log_evidence`) enumerates the 2^J hidden paths of a prompt of J HMM tokens.
Given a path, the emission rows are independent Beta posteriors, integrated in closed form
(``prod_s B(beta + m_s0, beta + m_s1) / B(beta, beta)``); the transition ``T = [[1 - a, a], [b, 1 -
b]]`` with ``a, b ~ Beta(alpha, alpha)`` and the stationary start ``pi_T = (b, a) / (a + b)`` of
every segment leave ``E[(1-a)^n00 a^n01 b^n10 (1-b)^n11 pi_T(0)^c0 pi_T(1)^c1]``, a two-dimensional
integral computed by Gauss-Jacobi quadrature of the Beta(alpha, alpha) weight on each axis. Measured
on the prompt [0 0 1 0 | 1 1 0] at alpha = 0.3: -5.8563068259, -...0685251, -...0685541, -...0685581
at 100, 200, 400, 800 nodes, so 200 nodes are within 4e-9 nats of the limit, six orders of
magnitude below the Monte-Carlo errors compared with. An independent check of the oracle: the
prior-draw brute force of tests/prior_brute_force.py on the same prompt.
"""
import functools
import itertools
import math

import numpy as np
import pytest
import torch
from scipy.special import betaln, roots_jacobi
from test_prior_predictive import FORMAT, PRIOR, prompts_from_the_prior

from hmm.bidirectional import AnnealingSchedule, evidence_bounds, forward_log_weights, log_mean_exp, reverse_log_weights
from hmm.markov import stationary_or_invalid
from hmm.prior_predictive import format_positions
from prior_brute_force import likelihood_terms

QUADRATURE_NODES = 200
PROMPTS = 160
CHAINS = 8
STANDARD_ERRORS = 3.0
"""One-sided: a valid bound's mean gap lies below -3 s.e. with probability 0.0013."""


@functools.cache
def _quadrature(alpha: float, nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, weights)`` on the ``nodes x nodes`` Gauss-Jacobi grid of two Beta(alpha, alpha) variables."""
    x, w = roots_jacobi(nodes, alpha - 1, alpha - 1)
    a, weights = (1 + x) / 2, w / w.sum()
    A, B = np.meshgrid(a, a, indexing="ij")
    return A, B, np.outer(weights, weights)


@functools.cache
def _transition_integral(counts: tuple[float, ...], alpha: float, nodes: int) -> float:
    """``E[(1-a)^n00 a^n01 b^n10 (1-b)^n11 pi_T(0)^c0 pi_T(1)^c1]`` of ``counts = (n00, n01, n10,
    n11, c0, c1)`` by the quadrature."""
    A, B, W = _quadrature(alpha, nodes)
    n00, n01, n10, n11, c0, c1 = counts
    return float((W * (1 - A)**n00 * A**n01 * B**n10 * (1 - B)**n11 * (B / (A + B))**c0 * (A / (A + B))**c1).sum())


def exact_log_evidence(observed: np.ndarray, starts: np.ndarray, alpha: float, beta: float,
                       nodes: int = QUADRATURE_NODES) -> float:
    """``log P(observed)`` under the two-state, two-token prior (module docstring): ``observed (J,)``
    HMM tokens, ``starts (J,)`` the segment starts."""
    total = 0.0
    for path in itertools.product((0, 1), repeat=len(observed)):
        emissions, transitions, firsts = np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(2)
        for j, state in enumerate(path):
            emissions[state, observed[j]] += 1
            if starts[j]:
                firsts[state] += 1
            else:
                transitions[path[j - 1], state] += 1
        log_emissions = sum(betaln(beta + emissions[s, 0], beta + emissions[s, 1]) - betaln(beta, beta) for s in (0, 1))
        total += math.exp(log_emissions) * _transition_integral((*transitions.ravel(), *firsts), alpha, nodes)
    return math.log(total)


def observed_and_starts(tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    positions, starts = format_positions(FORMAT)
    return tokens[:, positions].numpy(), starts.numpy()


def test_the_enumeration_matches_the_prior_draw_brute_force():
    """The oracle against ``mean_d P(prompt | theta_d)`` over 400,000 prior draws (the forward
    algorithm of tests/prior_brute_force.py, every segment from the draw's stationary law), within
    5 standard errors of the mean."""
    prompt = [0, 0, 1, 0, 2, 1, 1, 0]
    observed, starts = observed_and_starts(torch.tensor([prompt]))
    exact = math.exp(exact_log_evidence(observed[0], starts, PRIOR.transition_concentration,
                                        PRIOR.emission_concentration))
    transition, emission, stationary = PRIOR.sample(400_000, np.random.default_rng(11))
    likelihoods = likelihood_terms(prompt, stationary, transition, emission)[0]
    assert abs(likelihoods.mean() - exact) < 5 * likelihoods.std() / math.sqrt(len(likelihoods)), (likelihoods.mean(), exact)


@pytest.fixture(scope="module")
def simulated():
    """``(tokens, transition, emission, stationary, exact log P(all) (B,), exact log P(demonstrations) (B,))``
    of ``PROMPTS`` prompts, each from its own HMM drawn from the prior."""
    tokens, transition, emission = prompts_from_the_prior(PROMPTS)
    observed, starts = observed_and_starts(tokens)
    demonstrations = int(np.flatnonzero(starts)[-1])
    alpha, beta = PRIOR.transition_concentration, PRIOR.emission_concentration
    whole = np.array([exact_log_evidence(row, starts, alpha, beta) for row in observed])
    demos = np.array([exact_log_evidence(row[:demonstrations], starts[:demonstrations], alpha, beta) for row in observed])
    stationary = stationary_or_invalid(transition)[0]
    return tokens, transition.numpy(), emission.numpy(), stationary.numpy(), whole, demos


def mean_and_stderr(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values)))


SCHEDULES = (AnnealingSchedule(sweeps=1, substeps=1), AnnealingSchedule(sweeps=2, substeps=3))


def test_the_reverse_and_forward_bounds_bracket_the_exact_evidence(simulated):
    """On the prompts from the prior, 8 chains each way, at one sweep and one annealing step a token
    and at two of each: ``E[upper - log Z] >= 0`` for the reverse bound of the whole prompt and for
    the reverse chain's bound on the test sequence given the demonstrations (its weights after the
    demonstrations), ``E[log Z - lower] >= 0`` for the forward bound of the whole prompt and of the
    demonstrations, and for the test sequence's other bound, the whole prompt's reverse bound minus
    the demonstrations' forward bound: each mean gap above -3 standard errors over the prompts.
    (The width ``upper - lower`` of the whole prompt, measured, not asserted: 0.48 and 0.28 nats a
    prompt of 7 tokens at the two schedules, paired difference -0.20 +- 0.09.)"""
    tokens, transition, emission, stationary, whole, demos = simulated
    observed, starts = observed_and_starts(tokens)
    demonstrations = int(np.flatnonzero(starts)[-1])
    for schedule in SCHEDULES:
        rng = np.random.default_rng(3)
        log_v = reverse_log_weights(observed, starts, PRIOR, transition, emission, stationary, CHAINS, schedule, rng)
        log_w = forward_log_weights(observed, starts, PRIOR, CHAINS, schedule, rng)
        upper_whole = -log_mean_exp(log_v.sum(-1))
        upper_test = -log_mean_exp(log_v[..., demonstrations:].sum(-1))
        lower_whole = log_mean_exp(log_w.sum(-1))
        lower_demos = log_mean_exp(log_w[..., :demonstrations].sum(-1))
        gaps = {"reverse, whole": upper_whole - whole, "reverse, test | demos": upper_test - (whole - demos),
                "forward, whole": whole - lower_whole, "forward, demos": demos - lower_demos,
                "reverse whole - forward demos": upper_whole - lower_demos - (whole - demos)}
        for name, gap in gaps.items():
            mean, stderr = mean_and_stderr(gap)
            assert mean > -STANDARD_ERRORS * stderr, (schedule, name, mean, stderr)


def test_the_truncated_reverse_chain_runs_only_the_test_sequence(simulated):
    """``stop``: the reverse chain removes the test sequence's tokens only; the demonstrations'
    weights stay 0, and its test-sequence bound is valid as the whole chain's."""
    tokens, transition, emission, stationary, whole, demos = simulated
    observed, starts = observed_and_starts(tokens)
    demonstrations = int(np.flatnonzero(starts)[-1])
    log_v = reverse_log_weights(observed, starts, PRIOR, transition, emission, stationary, CHAINS,
                                AnnealingSchedule(), np.random.default_rng(4), stop=demonstrations)
    assert np.all(log_v[..., :demonstrations] == 0) and np.all(log_v[..., demonstrations:] != 0)
    mean, stderr = mean_and_stderr(-log_mean_exp(log_v.sum(-1)) - (whole - demos))
    assert mean > -STANDARD_ERRORS * stderr, (mean, stderr)


def test_a_reverse_chain_not_started_from_the_posterior_is_caught(simulated):
    """The planted fault: reverse chains started from the HMM of the next prompt instead of each
    prompt's own (a draw from the prior, not from the posterior given the prompt) give a mean gap
    to the exact evidence below -3 standard errors, so the comparison above catches an invalid
    start."""
    tokens, transition, emission, stationary, whole, demos = simulated
    observed, starts = observed_and_starts(tokens)
    transition, emission, stationary = (np.roll(values, 1, axis=0) for values in (transition, emission, stationary))
    log_v = reverse_log_weights(observed, starts, PRIOR, transition, emission, stationary, CHAINS,
                                AnnealingSchedule(), np.random.default_rng(5))
    mean, stderr = mean_and_stderr(-log_mean_exp(log_v.sum(-1)) - whole)
    assert mean < -STANDARD_ERRORS * stderr, (mean, stderr)


def test_evidence_bounds_is_the_two_chains_summed_over_the_prompt(simulated):
    """:func:`evidence_bounds` is the forward and reverse weights of one generator, summed."""
    tokens, transition, emission, *_ = simulated
    bounds = evidence_bounds(tokens[:4], FORMAT, PRIOR, torch.from_numpy(transition[:4]),
                             torch.from_numpy(emission[:4]), chains=2, seed=6)
    observed, starts = observed_and_starts(tokens[:4])
    rng = np.random.default_rng(6)
    log_w = forward_log_weights(observed, starts, PRIOR, 2, AnnealingSchedule(), rng)
    stationary = stationary_or_invalid(torch.from_numpy(transition[:4]))[0].numpy()
    log_v = reverse_log_weights(observed, starts, PRIOR, transition[:4], emission[:4], stationary, 2,
                                AnnealingSchedule(), rng)
    assert np.array_equal(bounds.lower.numpy(), log_mean_exp(log_w.sum(-1)))
    assert np.array_equal(bounds.upper.numpy(), -log_mean_exp(log_v.sum(-1)))


@pytest.mark.parametrize(("schedule", "message"), [(AnnealingSchedule(0, 1), "sweeps: 0"),
                                                  (AnnealingSchedule(1, 0), "substeps: 0"),
                                                  (AnnealingSchedule(True, 1), "sweeps: True")])
def test_a_bad_schedule_is_refused(schedule, message):
    tokens, transition, emission = prompts_from_the_prior(1)
    with pytest.raises(ValueError, match=rf"{message}; expected an integer >= 1"):
        evidence_bounds(tokens, FORMAT, PRIOR, transition, emission, chains=1, schedule=schedule)
