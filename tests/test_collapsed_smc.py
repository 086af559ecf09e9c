"""The collapsed-path SMC (hmm/collapsed_smc.py): against brute-force Monte Carlo over prior draws
of its augmented model (every segment started from ``u T^K``) and of the true model (started from
``pi_T``), against the parameter-space SMC (hmm/prior_predictive.py) on the presets' 16-state
prior; the Gibbs sweeps' invariance, the start-law error, the resampling's copies, the tables'
widening, determinism and refusals."""
import dataclasses
import functools
import itertools
import math

import numpy as np
import pytest
import torch
from prior_brute_force import BruteForce, likelihood_terms, ratio_estimates
from scipy.special import gammaln, logsumexp

import hmm
from hmm import collapsed_smc
from hmm.collapsed_smc import (CollapsedSMCSettings, _gibbs_sweep, _layout, _Paths, _replaced, _segments,
                               collapsed_prior_predictive, start_law_error)
from hmm.bidirectional import evidence_bounds
from hmm.generators import dirichlet_rows
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, format_positions, prior_predictive

FORMAT = hmm.PromptFormat(num_demos=2, demo_length=3, test_length=2)
PROMPT = [0, 1, 1, 2, 1, 1, 0, 2, 0, 1]  # p = 2: delimiter 2 after each demonstration
PRIOR = DirichletHMMPrior(num_states=3, num_tokens=2, transition_concentration=0.5, emission_concentration=0.5)
BURN_IN = 3
"""The augmented model's K on ``PRIOR``: short, so that ``u T^K`` is far from ``pi_T`` and the
burn-in's handling is what the test sees."""
MIXING_PRIOR = dataclasses.replace(PRIOR, transition_concentration=2.0)
MIXING_BURN_IN = 32
"""On ``MIXING_PRIOR`` (dense rows, chains that mix fast) ``u T^32`` is within 1e-7 of ``pi_T`` on
average (asserted), so the augmented model is the true one to far below the tests' resolution."""
BRUTE_FORCE_DRAWS = 1_000_000
CHUNK = 250_000
COPIES = 64
"""Independent SMC runs of the prompt, as the prompts of one batch (each its own particles)."""
PARTICLES = 2048
SIGMAS = 5.0
"""Agreement within 5 combined standard errors: 10 independent comparisons per test (p = 2), each
failing by chance with probability 6e-7 if both estimators are right."""
SHARP = 6e-4
"""Both standard errors lie below this (asserted). With twice the draws and particles (standard
errors 1.4 times smaller) the SMC with K = 3 was 7 to 13 standard errors from the brute force of
K = 2 in three of the rows, up to 6.8 from K = 4 and up to 14 from the stationary start: the
comparison sees the burn-in's length, not only its presence."""


@functools.cache
def brute_force(prior: DirichletHMMPrior, burn_in: int | None) -> BruteForce:
    """:func:`prior_brute_force.ratio_estimates` of ``PROMPT`` over ``BRUTE_FORCE_DRAWS`` draws of
    ``prior``, every segment started from ``u T^burn_in`` (the augmented model) or, for None, from
    ``pi_T`` (the true model)."""
    rng = np.random.default_rng(0)

    def chunks():
        for _ in range(BRUTE_FORCE_DRAWS // CHUNK):
            transition, emission, stationary = prior.sample(CHUNK, rng)
            start = stationary if burn_in is None else np.linalg.matrix_power(transition, burn_in).mean(-2)
            yield likelihood_terms(PROMPT, start, transition, emission)

    return ratio_estimates(chunks(), prior.num_tokens)


def smc_copies(prior: DirichletHMMPrior, burn_in: int, sweeps: int):
    """``(mean (N, 2), stderr (N, 2), evidences (COPIES,), result)`` of ``COPIES`` runs of the SMC
    on ``PROMPT``, resampling after nearly every token (``ess_threshold`` 0.99), so that the
    resampling's copies of the count tables are tested too."""
    settings = CollapsedSMCSettings(particles=PARTICLES, burn_in_steps=burn_in, sweeps=sweeps, ess_threshold=0.99,
                                    batch_prompts=COPIES)
    result = collapsed_prior_predictive(torch.tensor([PROMPT] * COPIES), FORMAT, prior, settings)
    estimates = result.next_token.numpy()
    return (estimates.mean(0), estimates.std(0, ddof=1) / math.sqrt(COPIES), np.exp(result.log_evidence.numpy()),
            result)


def assert_agrees(prior: DirichletHMMPrior, burn_in: int, exact: BruteForce, sweeps: int = 0) -> None:
    smc, smc_stderr, evidences, result = smc_copies(prior, burn_in, sweeps)
    assert np.all(np.abs(smc - exact.predictive) <= SIGMAS * np.hypot(exact.stderr, smc_stderr)), (smc, exact)
    assert exact.stderr.max() < SHARP and smc_stderr.max() < SHARP  # the comparison is sharp
    evidence_stderr = evidences.std(ddof=1) / math.sqrt(COPIES)
    assert abs(evidences.mean() - exact.evidence) <= SIGMAS * math.hypot(exact.evidence_stderr, evidence_stderr)
    assert torch.all((result.next_token.sum(-1) - 1).abs() < 1e-12)
    assert torch.all(result.rejuvenations >= len(PROMPT) - 5) and math.isnan(result.acceptance)


@pytest.mark.long_running  # a million brute-force draws and 64 x 2048 particles: the comparison must be sharp
@pytest.mark.parametrize("sweeps", [0, 1])
def test_the_smc_matches_brute_force_monte_carlo_of_its_augmented_model(sweeps):
    """The collapsed machinery (count ratios, labels by first visit, the merged new state, the
    burn-in's counted transitions, the optimal proposal, resampling, and the Gibbs sweeps between
    segments) is exact for the augmented model: every row's predictive and the evidence agree with
    a ratio of prior expectations of forward-algorithm likelihoods with start law ``u T^3``."""
    assert_agrees(PRIOR, BURN_IN, brute_force(PRIOR, BURN_IN), sweeps)


@pytest.mark.long_running  # as above, on the mixing prior
def test_with_a_long_burn_in_the_smc_matches_brute_force_monte_carlo_of_the_stationary_start():
    assert start_law_error(MIXING_PRIOR, MIXING_BURN_IN, 20_000, 0).mean < 1e-6
    assert_agrees(MIXING_PRIOR, MIXING_BURN_IN, brute_force(MIXING_PRIOR, None))


BOUNDS_BURN_IN = 256
"""K for the bidirectional-bounds comparison, whose bounds are the true model's (stationary start):
on ``test_prior_predictive.PRIOR`` (S = 2, alpha = 0.3) a chain with both switching probabilities
below 0.01 (about 2% of draws) keeps ``|lambda_2|^K`` above 0.27 at K = 64, 0.006 at 256."""


@pytest.mark.long_running  # 96 prompts, 64 AIS chains each way, 1,024 particles with K = 256
def test_the_evidence_lies_between_the_bidirectional_bounds_on_average_over_simulated_prompts():
    """On prompts simulated from the prior, the collapsed SMC's log evidence lies above the forward
    AIS's lower bound and below the reverse AIS's upper bound (:mod:`hmm.bidirectional`) on average,
    as the parameter-space SMC's does (:func:`test_prior_predictive.assert_between_the_bounds`:
    one-sided, 3 standard errors of the paired differences). The bounds are loose here (0.16 nats
    apart per 7-token prompt; measured 0.035 above the lower and 0.123 below the upper, z 1.5 and
    2.5), so the check catches a wrong evidence, not the burn-in's length: K = 1 lies inside too (the
    brute-force comparisons above see K)."""
    from test_prior_predictive import FORMAT, PRIOR, assert_between_the_bounds, prompts_from_the_prior

    tokens, transition, emission = prompts_from_the_prior(96)
    bounds = evidence_bounds(tokens, FORMAT, PRIOR, transition, emission, chains=64, seed=0)
    settings = CollapsedSMCSettings(particles=1024, burn_in_steps=BOUNDS_BURN_IN, batch_prompts=96)
    assert_between_the_bounds(collapsed_prior_predictive(tokens, FORMAT, PRIOR, settings).log_evidence, bounds)


def test_the_start_law_error_of_two_states_is_the_closed_form():
    """For S = 2, ``u - pi_T`` is an eigenvector of T with eigenvalue ``lambda = T00 + T11 - 1``, so
    ``TV(u T^K, pi_T) = |lambda|^K |1/2 - pi_T(0)|`` with ``pi_T(0) = T10 / (T01 + T10)``; on the
    same draws (:func:`hmm.dirichlet_rows` of the same seed)."""
    prior = DirichletHMMPrior(2, 2, 0.7, 1.0)
    transition = dirichlet_rows((5000, 2, 2), 0.7, 3).numpy()
    eigenvalue = transition[:, 0, 0] + transition[:, 1, 1] - 1
    distance = np.abs(eigenvalue) ** 5 * np.abs(0.5 - transition[:, 1, 0] / (transition[:, 0, 1] + transition[:, 1, 0]))
    error = start_law_error(prior, 5, 5000, 3)
    assert error.draws == 5000 and error.burn_in_steps == 5
    assert error.mean == pytest.approx(distance.mean(), rel=1e-9)
    assert error.quantile_90 == pytest.approx(np.quantile(distance, 0.9), rel=1e-9)


def test_resampling_copies_only_the_rows_of_particles_without_offspring():
    rng = np.random.default_rng(0)
    particles, prompts = 16, np.array([1, 3])
    ancestors = np.sort(rng.integers(0, particles, (2, particles)), axis=1)
    rows, sources = _replaced(ancestors, prompts, particles)
    population = np.arange(4 * particles)
    population[rows] = population[sources]
    for index, prompt in enumerate(prompts):
        own = population[prompt * particles: (prompt + 1) * particles]
        assert sorted(own) == sorted(ancestors[index] + prompt * particles)
    assert len(rows) == sum(particles - len(set(row)) for row in ancestors)
    assert np.array_equal(population[:particles], np.arange(particles))  # prompts not resampled are untouched


GIBBS_PRIOR = DirichletHMMPrior(num_states=3, num_tokens=2, transition_concentration=0.5, emission_concentration=0.5)
GIBBS_FORMAT = hmm.PromptFormat(num_demos=1, demo_length=2, test_length=2)
GIBBS_TOKENS = np.array([0, 1, 1, 1])  # the HMM tokens of the prompt [0, 1, 2, 1, 1]
GIBBS_DRAWS = 100_000


def dirichlet_multinomial(counts: np.ndarray, concentration: float) -> np.ndarray:
    """``(...)``: log probability of a sequence with ``counts (..., n)`` under Dirichlet(concentration 1_n) rows."""
    n = counts.shape[-1]
    return (gammaln(n * concentration) - gammaln(n * concentration + counts.sum(-1))
            + (gammaln(concentration + counts) - gammaln(concentration)).sum(-1))


def labelled_log_joint(labels: np.ndarray, starts: np.ndarray, token_index: np.ndarray,
                       tokens: np.ndarray = GIBBS_TOKENS) -> np.ndarray:
    """``(n,)``: ``log p(z, x)`` of labelled paths ``labels (n, L)`` of ``GIBBS_PRIOR`` with the HMM
    ``tokens``, in closed form: ``(1/S)^segments prod_z DM(n(z, :); alpha) prod_z DM(m(z, :); beta)``."""
    S, p = GIBBS_PRIOR.num_states, GIBBS_PRIOR.num_tokens
    transitions = np.zeros((len(labels), S, S))
    emissions = np.zeros((len(labels), S, p))
    rows = np.arange(len(labels))
    for site in range(labels.shape[1]):
        if not starts[site]:
            transitions[rows, labels[:, site - 1], labels[:, site]] += 1
        if token_index[site] >= 0:
            emissions[rows, labels[:, site], tokens[token_index[site]]] += 1
    return (-starts.sum() * math.log(S) + dirichlet_multinomial(transitions, GIBBS_PRIOR.transition_concentration).sum(-1)
            + dirichlet_multinomial(emissions, GIBBS_PRIOR.emission_concentration).sum(-1))


def canonical_classes(labels: np.ndarray) -> np.ndarray:
    """``(n,)``: an integer per path, the same for two paths that differ by a renaming of the
    states (labels renamed in order of first visit, read as base-S digits)."""
    S, L = GIBBS_PRIOR.num_states, labels.shape[1]
    first = np.where(labels[..., None] == np.arange(S), np.arange(L)[:, None], L).min(1)  # (n, S)
    renamed = np.take_along_axis(np.argsort(np.argsort(first, axis=1), axis=1), labels, axis=1)
    return renamed @ S ** np.arange(L)


def loaded_paths(labels: np.ndarray, starts: np.ndarray, token_index: np.ndarray) -> _Paths:
    """The filter's count tables of the paths ``labels (n, L)``, built site by site."""
    paths = _Paths(len(labels), GIBBS_PRIOR.num_states, GIBBS_PRIOR.num_tokens, labels.shape[1], labels.shape[1])
    for site in range(labels.shape[1]):
        tokens = np.full(len(labels), GIBBS_TOKENS[token_index[site]]) if token_index[site] >= 0 else None
        paths.append(labels[:, site], tokens, from_last=not starts[site])
    return paths


def test_gibbs_sweeps_leave_the_posterior_of_the_paths_invariant():
    """Exact draws from the posterior of the augmented path (S = 3, K = 2, two segments of two
    tokens: 8 sites, all 3^8 labelled paths enumerated with their Dirichlet-multinomial
    probabilities, an oracle independent of the filter's count ratios), three sweeps, and the
    frequencies of the 1094 classes of paths up to renaming against their exact probabilities (each
    within 5 binomial standard errors). The sweeps move: most paths change class. The count tables
    after the sweeps are those of the paths they hold. Checked to fail for a sweep without the
    bracket terms of B, with weight 1 for the new option instead of S - k, or without B."""
    positions, starts = (values.numpy() for values in format_positions(GIBBS_FORMAT))
    layout = _layout(_segments(starts), 2)
    every = np.array(list(itertools.product(range(GIBBS_PRIOR.num_states), repeat=len(layout.starts))))
    log_joint = labelled_log_joint(every, layout.starts, layout.token_index)
    probabilities = np.exp(log_joint - logsumexp(log_joint))
    classes = canonical_classes(every)
    rng = np.random.default_rng(0)
    drawn = every[rng.choice(len(every), GIBBS_DRAWS, p=probabilities)]
    paths = loaded_paths(drawn, layout.starts, layout.token_index)
    observed = np.broadcast_to(GIBBS_TOKENS, (GIBBS_DRAWS, len(GIBBS_TOKENS)))
    for _ in range(3):
        _gibbs_sweep(paths, GIBBS_PRIOR, layout, observed, rng)
    after = paths.path.astype(np.int64)
    exact = np.bincount(classes, weights=probabilities)
    frequencies = np.bincount(canonical_classes(after), minlength=len(exact)) / GIBBS_DRAWS
    assert np.all(np.abs(frequencies - exact) <= 5 * np.sqrt(exact * (1 - exact) / GIBBS_DRAWS) + 1e-12)
    assert (canonical_classes(after) != canonical_classes(drawn)).mean() > 0.5
    rebuilt = loaded_paths(after, layout.starts, layout.token_index)
    for name in ("transitions", "transition_totals", "occupancy", "emissions", "emission_totals", "visited"):
        assert np.array_equal(getattr(paths, name), getattr(rebuilt, name)), name


SIXTEEN_STATES = DirichletHMMPrior.from_spec(hmm.MIXTURE_SPECS["tasks-8192"])
SIXTEEN_STATE_FORMAT = hmm.PROMPT_FORMATS["paper-mini"]
PROMPTS = 8
REPLICATES = 3
STANDARD_ERRORS = 4.0


def per_prompt_losses(probabilities: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(B,)``: each prompt's mean ``-log q(o_{t+1})`` over the rows whose target is an HMM token."""
    targets = tokens[:, 1:]
    scored = targets != SIXTEEN_STATES.num_tokens
    losses = -probabilities[:, :-1].gather(-1, targets.clamp_max(SIXTEEN_STATES.num_tokens - 1)[..., None]).squeeze(-1).log()
    return (losses * scored).sum(-1) / scored.sum(-1)


@pytest.mark.long_running
def test_the_collapsed_and_the_parameter_space_smc_give_the_same_loss_at_sixteen_states():
    """Both estimate the prior predictive of the presets' 16-state prior (the collapsed one of its
    augmented model, whose start law is within ``1e-3`` of ``pi_T`` on average at K = 64,
    asserted). Per prompt b (a fresh HMM, the paper-mini format), R = 3 replicates of each give
    ``d_b = mean_r L^collapsed_r(b) - mean_r L^parameter_r(b)`` of the mean loss over the prompt's
    scored rows, with ``Var(d_b) = (Var L^collapsed(b) + Var L^parameter(b)) / R`` from the
    replicates and ``Var(mean_b d_b) = sum_b Var(d_b) / B^2`` (the derivation of
    tests/test_prior_predictive_torch.py). Rule: ``|mean_b d_b| <= 4 s.e.``.

    Unlike two implementations of one algorithm, the two differ in their bias: a replicate's loss
    lies above the exact ceiling's by about ``Var(q_hat) / (2 q^2)`` per row (a log of a noisy
    estimate). The particle counts make both biases small beside the s.e.: measured, the Jensen
    term of averaging the 3 replicates was 0.0024 (collapsed, 1024 particles) and 0.0023 nats
    (parameter space, 128 particles, 2 sweeps), so each replicate's bias is about 0.0035, against
    an s.e. of about 0.003."""
    assert start_law_error(SIXTEEN_STATES, 64, 2000, 0).mean < 1e-3
    spec = dataclasses.replace(hmm.MIXTURE_SPECS["tasks-8192"], num_tasks=PROMPTS)
    tokens = hmm.sample_prompts(spec.build(seed=7), PROMPTS, SIXTEEN_STATE_FORMAT, seed=8).tokens
    collapsed = [collapsed_prior_predictive(tokens, SIXTEEN_STATE_FORMAT, SIXTEEN_STATES, CollapsedSMCSettings(
        particles=1024, burn_in_steps=64, seed=seed, batch_prompts=PROMPTS)) for seed in range(REPLICATES)]
    parameter = [prior_predictive(tokens, SIXTEEN_STATE_FORMAT, SIXTEEN_STATES, SMCSettings(particles=128, seed=seed))
                 for seed in range(REPLICATES)]
    by_collapsed, by_parameter = (torch.stack([per_prompt_losses(run.next_token, tokens) for run in runs])
                                  for runs in (collapsed, parameter))
    differences = by_collapsed.mean(0) - by_parameter.mean(0)
    stderr = ((by_collapsed.var(0) + by_parameter.var(0)).sum() / REPLICATES).sqrt() / PROMPTS
    assert abs(differences.mean()) <= STANDARD_ERRORS * stderr, (differences.mean(), stderr)
    assert stderr < 0.006  # sharp enough to see a bias of a few hundredths of a nat
    for run in collapsed:
        assert not run.next_token.isnan().any() and torch.all((run.next_token.sum(-1) - 1).abs() < 1e-12)


TOKENS = torch.tensor([PROMPT, [1, 1, 1, 2, 0, 0, 1, 2, 1, 0]])


def test_the_same_seed_gives_the_same_predictive_and_another_seed_another():
    settings = CollapsedSMCSettings(particles=64, burn_in_steps=4, seed=3, batch_prompts=1)
    first, again = (collapsed_prior_predictive(TOKENS, FORMAT, PRIOR, settings) for _ in range(2))
    assert torch.equal(first.next_token, again.next_token) and torch.equal(first.log_evidence, again.log_evidence)
    assert torch.equal(first.rejuvenations, again.rejuvenations) and first.moved_tokens == again.moved_tokens == 2 * 64 * 20
    other = collapsed_prior_predictive(TOKENS, FORMAT, PRIOR, dataclasses.replace(settings, seed=4))
    assert not torch.equal(first.next_token, other.next_token)


def test_the_width_of_the_count_tables_changes_no_draw(monkeypatch):
    """Tables widened from one column as states are visited (1, 2, 3) give the bits of tables made
    three wide at once, Gibbs sweeps included: widening adds only columns of zero weight."""
    settings = CollapsedSMCSettings(particles=64, burn_in_steps=4, sweeps=1)
    wide = collapsed_prior_predictive(TOKENS, FORMAT, PRIOR, settings)
    monkeypatch.setattr(collapsed_smc, "INITIAL_WIDTH", 1)
    narrow = collapsed_prior_predictive(TOKENS, FORMAT, PRIOR, settings)
    assert torch.equal(wide.next_token, narrow.next_token) and torch.equal(wide.log_evidence, narrow.log_evidence)


def test_every_row_is_a_distribution_at_the_paper_scale():
    """S = 128 (the count tables widen from 8 columns as states are visited): no NaN, every row sums to 1."""
    spec = hmm.MIXTURE_SPECS["paper"]
    prompt_format = hmm.PromptFormat(num_demos=2, demo_length=8, test_length=8)
    tokens = hmm.sample_prompts(dataclasses.replace(spec, num_tasks=2).build(seed=1), 2, prompt_format, seed=2).tokens
    result = collapsed_prior_predictive(tokens, prompt_format, DirichletHMMPrior.from_spec(spec),
                                        CollapsedSMCSettings(particles=32, burn_in_steps=16))
    assert result.next_token.shape == (2, prompt_format.length, spec.num_tokens)
    assert torch.all((result.next_token.sum(-1) - 1).abs() < 1e-12) and torch.isfinite(result.log_evidence).all()


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("particles", 0, "an integer >= 1"), ("burn_in_steps", 0, "an integer >= 1"), ("batch_prompts", -1, "an integer >= 1"),
    ("seed", -2, "an integer >= 0"), ("particles", 2.0, "an integer >= 1"), ("ess_threshold", 0, r"a number in \(0, 1\]"),
    ("ess_threshold", 1.5, r"a number in \(0, 1\]"),
])
def test_bad_settings_are_refused(field, value, expected):
    with pytest.raises(ValueError, match=rf"^{field}: {value!r}; expected {expected}$"):
        CollapsedSMCSettings(**{field: value})


@pytest.mark.parametrize(("tokens", "message"), [
    ([[0, 1, 1, 0, 1, 1, 0, 2, 0, 1]], r"tokens: prompt 0 has an HMM token at position 3; expected a prompt of the format"),
    ([[0, 1, 1, 2, 1, 1, 0, 2, 0]], r"tokens: shape \(1, 9\); expected \(B, 10\) prompts of the format"),
    ([[0, 3, 1, 2, 1, 1, 0, 2, 0, 1]], r"tokens: token 3 at \(0, 1\) is out of range; expected 0..2"),
])
def test_a_prompt_of_another_format_or_alphabet_is_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        collapsed_prior_predictive(torch.tensor(tokens), FORMAT, PRIOR, CollapsedSMCSettings(particles=8))


def test_another_prior_or_settings_type_or_a_zero_burn_in_is_refused():
    with pytest.raises(ValueError, match=r"^settings: SMCSettings; expected CollapsedSMCSettings$"):
        collapsed_prior_predictive(TOKENS, FORMAT, PRIOR, SMCSettings(particles=8))
    with pytest.raises(ValueError, match=r"^prior: MixtureSpec; expected a DirichletHMMPrior$"):
        collapsed_prior_predictive(TOKENS, FORMAT, hmm.MIXTURE_SPECS["tiny"])
    with pytest.raises(ValueError, match=r"^burn_in_steps: 0; expected an integer >= 1$"):
        start_law_error(PRIOR, 0, 10, 0)
    with pytest.raises(ValueError, match=r"^draws: 0; expected an integer >= 1$"):
        start_law_error(PRIOR, 4, 0, 0)
