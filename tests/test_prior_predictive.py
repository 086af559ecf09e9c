"""The prior-predictive ceiling (hmm/prior_predictive.py): the SMC against brute-force Monte Carlo
over 10^7 prior draws on a tiny HMM family, its determinism, and its refusals of bad input. The
brute-force, bidirectional-bounds and determinism tests run on both implementations, numpy's and
torch's (hmm/prior_predictive_torch.py, on the CPU in float64)."""
import functools
import math

import numpy as np
import pytest
import torch

import hmm
from hmm.bidirectional import EvidenceBounds, evidence_bounds
from hmm import prior_predictive_torch
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, format_positions, prior_predictive
from prior_brute_force import ratio_estimates

IMPLEMENTATIONS = {"numpy": prior_predictive,
                   "torch": functools.partial(prior_predictive_torch.prior_predictive, device="cpu", dtype=torch.float64)}
"""The SMCs under test, by name: the same signature and result type."""

FORMAT = hmm.PromptFormat(num_demos=1, demo_length=4, test_length=3)
PROMPT = [0, 0, 1, 0, 2, 1, 1, 0]  # p = 2: delimiter 2 after the demonstration
PRIOR = DirichletHMMPrior(num_states=2, num_tokens=2, transition_concentration=0.3, emission_concentration=0.5)
BRUTE_FORCE_DRAWS = 10_000_000
SIGMAS = 5.0
"""Agreement within 5 combined standard errors: 24 comparisons, each failing by chance with
probability 6e-7 if both estimators are right."""


def two_state_terms(prompt: list[int], draws: int, rng: np.random.Generator) -> np.ndarray:
    """``(1 + 3 N, draws)`` on ``draws`` prior draws of ``PRIOR``: row 0 is ``P(prompt | theta)``,
    rows ``1 + 3t, 2 + 3t, 3 + 3t`` are ``P(prompt[:t+1] | theta)`` and ``P(prompt[:t+1], o | theta)``
    for ``o = 0, 1`` (o continues the last segment, or starts a new one after a delimiter).

    In closed form for S = 2, a second implementation of the model, independent of the SMC's
    filter: ``T = [[1 - a, a], [b, 1 - b]]`` with ``a, b ~ Beta(alpha, alpha)`` (2-entry Dirichlet
    rows), ``O[s, 0] ~ Beta(beta, beta)``, stationary law ``(b, a) / (a + b)``, every segment a
    fresh run."""
    alpha, beta = PRIOR.transition_concentration, PRIOR.emission_concentration
    a, b = rng.beta(alpha, alpha, draws), rng.beta(alpha, alpha, draws)
    emit_zero = rng.beta(beta, beta, (2, draws))
    emission = (emit_zero, 1 - emit_zero)  # emission[token][state]
    start = (b / (a + b), a / (a + b))
    terms = np.empty((1 + 3 * len(prompt), draws))
    likelihood = np.ones(draws)
    predicted = start  # P(next state = 0), P(next state = 1)
    for t, token in enumerate(prompt):
        if token == PRIOR.num_tokens:
            predicted = start
        else:
            zero, one = predicted[0] * emission[token][0], predicted[1] * emission[token][1]
            likelihood = likelihood * (zero + one)
            zero, one = zero / (zero + one), one / (zero + one)
            predicted = (zero * (1 - a) + one * b, zero * a + one * (1 - b))
        terms[1 + 3 * t] = likelihood
        for o in (0, 1):
            terms[2 + 3 * t + o] = likelihood * (predicted[0] * emission[o][0] + predicted[1] * emission[o][1])
    terms[0] = likelihood
    return terms


@functools.cache
def brute_force_predictive(prompt: tuple[int, ...], chunk: int = 1_000_000) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``(mean (N, 2), stderr (N, 2), Z, Z stderr)``: row t's ``P(o | prompt[:t+1]) =
    E[P(prefix, o)] / E[P(prefix)]`` over ``BRUTE_FORCE_DRAWS`` prior draws (the ratio estimator of
    tests/prior_brute_force.py, with its delta-method standard error), and the evidence ``Z`` of
    the whole prompt."""
    rng = np.random.default_rng(0)
    chunks = (two_state_terms(list(prompt), chunk, rng) for _ in range(BRUTE_FORCE_DRAWS // chunk))
    return tuple(ratio_estimates(chunks, PRIOR.num_tokens))


@pytest.mark.long_running
@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_smc_matches_brute_force_monte_carlo_over_ten_million_prior_draws(implementation):
    prior_predictive = IMPLEMENTATIONS[implementation]
    exact, exact_stderr, evidence, evidence_stderr = brute_force_predictive(tuple(PROMPT))
    # ess_threshold 0.99: resampling and moving after nearly every token, so that the moves (FFBS,
    # the emission's Gibbs step, the transition's Metropolis-Hastings step) are what is tested.
    settings = [SMCSettings(particles=4096, moves=2, ess_threshold=0.99, seed=seed) for seed in range(4)]
    replicates = [prior_predictive(torch.tensor([PROMPT]), FORMAT, PRIOR, setting) for setting in settings]
    estimates = torch.stack([r.next_token[0] for r in replicates]).numpy()  # (R, N, 2)
    smc, smc_stderr = estimates.mean(0), estimates.std(0, ddof=1) / math.sqrt(len(replicates))
    assert np.all(np.abs(smc - exact) <= SIGMAS * np.hypot(exact_stderr, smc_stderr)), (smc, exact)
    assert np.all(exact_stderr < 2e-3)  # the comparison is sharp: 10^7 draws pin each probability to 0.2%
    assert np.all(np.abs(smc.sum(-1) - 1) < 1e-12)
    evidences = np.exp(torch.stack([r.log_evidence[0] for r in replicates]).numpy())
    assert abs(evidences.mean() - evidence) <= SIGMAS * math.hypot(evidence_stderr, evidences.std(ddof=1) / 2)
    assert all(r.rejuvenations[0] >= len(PROMPT) - 3 for r in replicates) and 0.1 < replicates[0].acceptance < 1


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_the_same_seed_gives_the_same_predictive_and_another_seed_another(implementation):
    prior_predictive = IMPLEMENTATIONS[implementation]
    tokens = torch.tensor([PROMPT, [1, 1, 1, 0, 2, 0, 0, 1]])
    settings = SMCSettings(particles=64, moves=1, seed=3, batch_prompts=1)
    first, again = prior_predictive(tokens, FORMAT, PRIOR, settings), prior_predictive(tokens, FORMAT, PRIOR, settings)
    assert torch.equal(first.next_token, again.next_token) and torch.equal(first.log_evidence, again.log_evidence)
    other = prior_predictive(tokens, FORMAT, PRIOR, SMCSettings(particles=64, moves=1, seed=4, batch_prompts=1))
    assert not torch.equal(first.next_token, other.next_token)


def test_positions_and_segment_starts_of_a_format():
    positions, starts = format_positions(FORMAT)
    assert positions.tolist() == [0, 1, 2, 3, 5, 6, 7]
    assert starts.tolist() == [True, False, False, False, True, False, False]


@pytest.mark.parametrize(("tokens", "message"), [
    ([[0, 0, 1, 0, 0, 1, 1, 0]], r"tokens: prompt 0 has an HMM token at position 4; expected a prompt of the format"),
    ([[0, 2, 1, 0, 2, 1, 1, 0]], r"tokens: prompt 0 has a delimiter at position 1; expected a prompt of the format"),
    ([[0, 0, 1, 0, 2, 1, 1]], r"tokens: shape \(1, 7\); expected \(B, 8\) prompts of the format"),
    ([[0, 0, 3, 0, 2, 1, 1, 0]], r"tokens: token 3 at \(0, 2\) is out of range; expected 0..2"),
])
def test_a_prompt_of_another_format_or_alphabet_is_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        prior_predictive(torch.tensor(tokens), FORMAT, PRIOR, SMCSettings(particles=8))


@pytest.mark.parametrize(("field", "value"), [("particles", 0), ("moves", 0), ("batch_prompts", -1), ("seed", -2)])
def test_zero_particles_or_moves_are_refused(field, value):
    with pytest.raises(ValueError, match=rf"{field}: {value}; expected an integer >= "):
        SMCSettings(**{field: value})


def test_a_prior_that_is_not_the_smcs_is_refused():
    with pytest.raises(ValueError, match=r"spec: rank 2; expected rank None"):
        DirichletHMMPrior.from_spec(hmm.MixtureSpec(num_tasks=4, num_states=4, num_tokens=2, rank=2))
    with pytest.raises(ValueError, match=r"transition_concentration: 0; expected a finite number > 0"):
        DirichletHMMPrior(2, 2, 0, 1.0)
    with pytest.raises(ValueError, match=r"num_states: 0; expected an integer >= 1"):
        DirichletHMMPrior(0, 2, 1.0, 1.0)


def prompts_from_the_prior(count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens (count, 8), transition (count, 2, 2), emission (count, 2, 2))``: ``count`` prompts
    of ``FORMAT``, each from its own HMM drawn from ``PRIOR``, and those HMMs."""
    transition, emission, stationary = (torch.from_numpy(x) for x in PRIOR.sample(count, np.random.default_rng(5)))
    prompts = hmm.sample_prompts(hmm.Mixture.uniform(hmm.HMM(stationary, transition, emission)), count, FORMAT, seed=3)
    own = prompts.task_ids
    return prompts.tokens, transition[own], emission[own]


def assert_between_the_bounds(log_evidence: torch.Tensor, bounds: EvidenceBounds) -> None:
    """Both bounds hold in expectation over prompts drawn from the prior: one-sided, 3 standard
    errors of the paired differences of ``log_evidence (B,)`` and the bounds."""
    for difference in (log_evidence - bounds.lower, bounds.upper - log_evidence):
        assert difference.mean() > -3 * difference.std() / math.sqrt(difference.numel())
    assert (bounds.upper - bounds.lower).mean() > 0


@pytest.mark.long_running
@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_the_smc_evidence_lies_between_the_bidirectional_bounds_on_average_over_simulated_prompts(implementation):
    prior_predictive = IMPLEMENTATIONS[implementation]
    tokens, transition, emission = prompts_from_the_prior(96)
    bounds = evidence_bounds(tokens, FORMAT, PRIOR, transition, emission, chains=64, seed=0)
    assert_between_the_bounds(prior_predictive(tokens, FORMAT, PRIOR, SMCSettings(particles=1024)).log_evidence, bounds)


@pytest.mark.parametrize(("chains", "shape", "message"), [
    (0, (1, 2, 2), r"chains: 0; expected an integer >= 1"),
    (4, (1, 3, 3), r"transition, emission: shapes \(1, 3, 3\), \(1, 2, 2\); expected \(1, 2, 2\) and \(1, 2, 2\)"),
])
def test_bad_bounds_input_is_refused(chains, shape, message):
    with pytest.raises(ValueError, match=message):
        evidence_bounds(torch.tensor([PROMPT]), FORMAT, PRIOR, torch.full(shape, 1.0 / shape[-1], dtype=torch.float64),
                        torch.full((1, 2, 2), 0.5, dtype=torch.float64), chains)
