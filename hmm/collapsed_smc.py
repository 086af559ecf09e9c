"""The prior-predictive ceiling by a collapsed particle filter over hidden paths.

The same target as :mod:`hmm.prior_predictive` (the posterior predictive of the next HMM token of a
prompt under the prior of :class:`hmm.MixtureSpec`), by another estimator: particles are hidden
paths, and the parameters ``theta = (T, O)`` are integrated out given the path (a collapsed
particle filter, as in Fearnhead 2004 and the particle filters of infinite HMMs). The prior::

    T[s, :] ~ Dirichlet(alpha 1_S),   O[s, :] ~ Dirichlet(beta 1_p)   (independent rows)

**Counts.** Given a hidden path with transition counts ``n(z, z')`` and emission counts
``m(z, x)``, the rows of T and O are independent Dirichlet posteriors, so the next state and the
next token are predicted by ratios of counts::

    P(z' | path) = (n(z, z') + alpha) / (n(z, .) + S alpha)          (z the path's last state)
    P(x | z', path, tokens) = (m(z', x) + beta) / (m(z', .) + p beta)

and the marginal of the counts is Dirichlet-multinomial (the product of these ratios along the path).

**Exchangeable labels.** States are exchangeable under the prior, so a particle labels its states
in order of first visit, ``0..k-1``, and carries count tables over those only (at most S). The
``S - k`` states never visited have no counts and are one merged option, labelled ``k`` when
taken: in the transition predictive its numerator is ``(S - k) alpha``, and its emission
predictive is ``beta / (p beta) = 1 / p``. With the multiplicity ``mu_k(j) = 1`` for ``j < k``,
``mu_k(k) = S - k`` and 0 beyond, the ``k + 1`` options ``j = 0..k`` are::

    q(j | path) = mu_k(j) (n(z, j) + alpha) / (n(z, .) + S alpha)

**The stationary start, by burn-in.** Every segment of a prompt is a run of the chain started from
its stationary law ``pi_T``, which is not conjugate to the Dirichlet rows. The filter targets an
augmented model instead: every segment (the first too) is preceded by ``K = burn_in_steps`` hidden
states ``z_{-K+1}, ..., z_0`` that emit nothing, the first uniform over the S states (in labels:
a visited state ``j < k`` with probability 1/S each, the new option with ``(S - k) / S``), each next
one a step of the chain that adds its transition count (the burn-in's transitions are real
transitions of the augmented model); the segment's first observed state ``z_1`` is one more step
from ``z_0``. So a segment's first state has the law ``u T^K`` (u uniform), which tends to
``pi_T`` as K grows; the augmented model's prompts converge in law to the true model's, by at most
the total variation ``TV(u T^K, pi_T) = 1/2 |u T^K - pi_T|_1`` per segment. :func:`start_law_error`
measures its mean and 90% quantile over prior draws (``docs/hmm.md`` has the table).

**Proposal and weights.** Burn-in states are drawn blind, from ``u`` and then from ``q`` (the
incremental weight is 1). The step into an observed state ``z_j`` with token ``x_j`` uses the
locally optimal proposal over the ``k + 1`` options::

    z_j ~ q(j | path) P(x_j | j, path, tokens),   incremental weight c_j = sum_j q(j | path) P(x_j | j, path, tokens)
                                                                      = P(x_j | path, x_{<j})

so ``log w += log c_j``. The evidence of the augmented model is estimated by ``Z_hat = prod_j
sum_i W_i c_ij`` over the observed tokens, ``W_i`` the normalised weights before token j (unbiased,
Del Moral 2004). When the effective sample size ``1 / sum_i W_i^2`` falls below ``ess_threshold *
particles``, systematic resampling (:func:`hmm.prior_predictive._systematic_resample`); a particle
with offspring keeps its row, so only the rows of particles without offspring are overwritten.

**Rejuvenation** (``sweeps`` > 0). At the end of every segment but the last, ``sweeps``
systematic-scan sweeps of single-site collapsed Gibbs sampling over every site so far (hidden and
observed), which leave the posterior of the path given the tokens invariant, so the weights stay.
Site t's label is drawn from its conditional given the rest of the path, with the counts of the
other sites (site t's transitions and emission removed, k the labels occupied without it)::

    P(z_t = j | rest) ~ mu_k(j) A(j) B(j) E(j)
    A(j) = (n(z_{t-1}, j) + alpha) / (n(z_{t-1}, .) + S alpha)    (1 / S at a segment's first site, whose start is uniform)
    B(j) = (n(j, z_{t+1}) + alpha + [z_{t-1} = j = z_{t+1}]) / (n(j, .) + S alpha + [z_{t-1} = j])    (1 at a segment's last site)
    E(j) = (m(j, x_t) + beta) / (m(j, .) + p beta)    (1 at a hidden site)

(B counts the entering transition ``z_{t-1} -> j`` before the leaving one, the brackets being 1
when their condition holds: the Dirichlet-multinomial's chain rule). A sweep can free a label in
the middle of ``0..k-1``; the new option is then the lowest free label (all free labels are alike
under the prior). Measured at S = 128, a sweep per segment costs 5 times the filter and does not
pay for itself (``docs/hmm.md``); the default is none.

**Predictions.** Row t of a prompt predicts the HMM token after position t: at an HMM token the
segment's continuation from the particle's current state, at a delimiter the next segment's first
token, which the filter predicts after drawing that segment's burn-in (from its state ``z_0``)::

    P(x_{next} = y | prompt so far) ~= sum_i W_i sum_{j <= k_i} q(j | path_i) (m_i(j, y) + beta) / (m_i(j, .) + p beta)

The conventions of :func:`hmm.prior_predictive.prior_predictive` hold (:class:`PriorPredictive`):
every row of ``next_token (B, N, p)`` is defined; ``rejuvenations`` counts each prompt's
resamplings; ``acceptance`` is NaN (no Metropolis-Hastings step); ``moved_tokens`` counts
particle-steps, hidden and observed, and particle-sites of the Gibbs sweeps (each a draw over at
most S + 1 options, the work a cost model counts). Validation and cost: ``docs/hmm.md``, "The collapsed-path SMC".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from hmm.generators import dirichlet_rows
from hmm.markov import stationary_or_invalid
from hmm.prior_predictive import (
    DirichletHMMPrior,
    PriorPredictive,
    _categorical,
    _normalised,
    _systematic_resample,
    batched,
    check_prompts,
    format_positions,
)
from hmm.prompts import PromptFormat

INITIAL_WIDTH = 8
"""Columns of a batch's count tables before the first widening (they double as states are
visited, up to S): the tables of B x P particles hold ``B P W^2`` transition counts."""


@dataclass(frozen=True)
class CollapsedSMCSettings:
    """``particles`` hidden paths per prompt; ``burn_in_steps`` hidden states before every segment
    (K of the module docstring); ``sweeps`` Gibbs sweeps at the end of every segment but the last
    (module docstring, "Rejuvenation"); resampling when the ESS falls below ``ess_threshold * particles``;
    ``seed`` of the generator; ``batch_prompts`` prompts filtered together (the results depend on it
    only through the random draws)."""

    particles: int = 256
    burn_in_steps: int = 64
    sweeps: int = 0
    ess_threshold: float = 0.5
    seed: int = 0
    batch_prompts: int = 16

    def __post_init__(self) -> None:
        for name, minimum in (("particles", 1), ("burn_in_steps", 1), ("sweeps", 0), ("batch_prompts", 1),
                              ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name}: {value!r}; expected an integer >= {minimum}")
        if not (isinstance(self.ess_threshold, (int, float)) and 0 < self.ess_threshold <= 1):
            raise ValueError(f"ess_threshold: {self.ess_threshold!r}; expected a number in (0, 1]")


class StartLawError(NamedTuple):
    """``TV(u T^K, pi_T)`` over prior draws of T: its mean and 90% quantile, at ``burn_in_steps`` K,
    over ``draws`` chains (those whose stationary law is computable)."""

    burn_in_steps: int
    mean: float
    quantile_90: float
    draws: int


def start_law_error(prior: DirichletHMMPrior, burn_in_steps: int, draws: int, seed: int) -> StartLawError:
    """How far the augmented model's start law ``u T^K`` lies from ``pi_T``: ``TV = 1/2 sum_s
    |(u T^K)(s) - pi_T(s)|`` on ``draws`` transitions ``T ~ prior`` (:func:`hmm.dirichlet_rows`,
    seeded by ``seed``); ``u T^K`` is the column mean of ``T^K``. A draw whose stationary law is not
    computable (:func:`hmm.markov.stationary_or_invalid`, probability zero) is left out."""
    if isinstance(burn_in_steps, bool) or not isinstance(burn_in_steps, int) or burn_in_steps < 1:
        raise ValueError(f"burn_in_steps: {burn_in_steps!r}; expected an integer >= 1")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws: {draws!r}; expected an integer >= 1")
    S = prior.num_states
    transition = dirichlet_rows((draws, S, S), float(prior.transition_concentration), seed)
    stationary, valid = stationary_or_invalid(transition)
    start = torch.linalg.matrix_power(transition, burn_in_steps).mean(-2)
    distance = 0.5 * (start - stationary).abs().sum(-1)[valid]
    return StartLawError(burn_in_steps, distance.mean().item(), distance.quantile(0.9).item(), int(valid.sum()))


class _Layout(NamedTuple):
    """The sites of a prompt's augmented path, shared by its particles: segment by segment, K hidden
    sites then the segment's HMM tokens. ``starts (L,)``: a segment's first hidden site (no incoming
    transition); ``token_index (L,)``: the HMM-token index j of an observed site, -1 at hidden ones."""

    starts: np.ndarray
    token_index: np.ndarray


def _layout(segments: list[np.ndarray], burn_in_steps: int) -> _Layout:
    """The sites of prompts whose segments hold the HMM tokens ``segments`` (:func:`_segments`)."""
    starts = [np.arange(burn_in_steps + len(indices)) == 0 for indices in segments]
    token_index = [np.concatenate([np.full(burn_in_steps, -1), indices]) for indices in segments]
    return _Layout(np.concatenate(starts), np.concatenate(token_index))


class _Paths:
    """M particles' hidden paths (rows ``b * P + i``) and their count tables over state labels:
    ``transitions (M, W, W)`` ``n(z, z')``, ``transition_totals (M, W)`` ``n(z, .)`` and
    ``occupancy (M, W)`` (sites at each label) in the smallest signed type that holds
    ``most_counts``; ``emissions (M, p, W)`` ``m(z, x)`` (token-major, so that a token's row and a
    prediction's matrix product read contiguous memory) and ``emission_totals (M, W)`` ``m(z, .)`` in
    float64; ``path (M, L)`` the labels of the first ``length`` sites, ``visited (M,)`` k.

    The filter labels states in order of first visit; a Gibbs move can free a label in the middle,
    so the new option is the lowest free label (all free labels are the same under the prior).
    Invariant: the width W holds a free label while k < S, ``W >= min(max k + 1, S)``."""

    def __init__(self, count: int, num_states: int, num_tokens: int, sites: int, most_counts: int):
        self.num_states = num_states
        width = min(INITIAL_WIDTH, num_states)
        dtype = np.min_scalar_type(-most_counts)
        self.transitions = np.zeros((count, width, width), dtype)
        self.transition_totals = np.zeros((count, width), dtype)
        self.occupancy = np.zeros((count, width), dtype)
        self.emissions = np.zeros((count, num_tokens, width))
        self.emission_totals = np.zeros((count, width))
        self.path = np.zeros((count, sites), dtype=np.min_scalar_type(num_states))
        self.length = 0
        self.visited = np.zeros(count, dtype=np.int64)
        self.rows = np.arange(count)

    @property
    def width(self) -> int:
        return self.transitions.shape[-1]

    @property
    def state(self) -> np.ndarray:
        """``(M,)``: the label of each particle's last site."""
        return self.path[:, self.length - 1].astype(np.int64)

    def multiplicity(self) -> np.ndarray:
        """``(M, W)``: ``mu_k(j)`` of the module docstring, 1 at occupied labels, ``S - k`` at the
        lowest free label (the new option), 0 at the others."""
        occupied = self.occupancy > 0
        new = np.argmin(occupied, axis=1)
        weights = occupied.astype(np.float64)
        weights[self.rows, new] += self.num_states - self.visited
        return weights

    def transition_rows(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(n(z, :) (M, W), n(z, .) (M,))`` at the particles' ``states`` z."""
        flat = self.rows * self.width + states
        return self.transitions.reshape(-1, self.width)[flat], self.transition_totals.reshape(-1)[flat]

    def transition_columns(self, states: np.ndarray) -> np.ndarray:
        """``(M, W)``: ``n(:, z')`` into the particles' ``states`` z'."""
        width = self.width
        return np.take_along_axis(self.transitions.reshape(-1, width * width),
                                  np.arange(width)[None, :] * width + states[:, None], axis=1)

    def emission_rows(self, tokens: np.ndarray) -> np.ndarray:
        """``(M, W)``: ``m(:, x)`` of each particle's token x."""
        return self.emissions.reshape(-1, self.width)[self.rows * self.emissions.shape[1] + tokens]

    def count_transitions(self, sources: np.ndarray, targets: np.ndarray, change: int) -> None:
        width = self.width
        self.transitions.reshape(-1)[(self.rows * width + sources) * width + targets] += change
        self.transition_totals.reshape(-1)[self.rows * width + sources] += change

    def count_emissions(self, states: np.ndarray, tokens: np.ndarray, change: int) -> None:
        self.emissions.reshape(-1)[(self.rows * self.emissions.shape[1] + tokens) * self.width + states] += change
        self.emission_totals.reshape(-1)[self.rows * self.width + states] += change

    def count_visits(self, states: np.ndarray, change: int) -> None:
        """Sites at ``states`` added (``change`` 1) or removed (-1); k follows, and the width."""
        flat = self.rows * self.width + states
        occupancy = self.occupancy.reshape(-1)
        self.visited -= occupancy[flat] > 0
        occupancy[flat] += change
        self.visited += occupancy[flat] > 0
        needed = min(int(self.visited.max()) + 1, self.num_states)
        if needed > self.width:
            self._widen(min(max(2 * self.width, needed), self.num_states))

    def append(self, states: np.ndarray, tokens: np.ndarray | None = None, from_last: bool = True) -> None:
        """Every particle's path enters ``states (M,)``: by a counted transition from its last
        site (``from_last``; not at a segment's first site), emitting ``tokens (M,)`` if given."""
        if from_last:
            self.count_transitions(self.state, states, 1)
        if tokens is not None:
            self.count_emissions(states, tokens, 1)
        self.count_visits(states, 1)
        self.path[:, self.length] = states
        self.length += 1

    def copy_rows(self, rows: np.ndarray, sources: np.ndarray) -> None:
        """Particles ``rows`` become copies of particles ``sources`` (resampling)."""
        for name in ("transitions", "transition_totals", "occupancy", "emissions", "emission_totals", "path",
                     "visited"):
            values = getattr(self, name)
            values[rows] = values[sources]

    def _widen(self, width: int) -> None:
        """Zero columns (and rows) up to ``width``: labels not yet used have no counts."""
        extra = width - self.width
        self.transitions = np.pad(self.transitions, ((0, 0), (0, extra), (0, extra)))
        self.transition_totals, self.occupancy, self.emission_totals = (
            np.pad(values, ((0, 0), (0, extra))) for values in (self.transition_totals, self.occupancy,
                                                                  self.emission_totals))
        self.emissions = np.pad(self.emissions, ((0, 0), (0, 0), (0, extra)))


def _transition_predictive(paths: _Paths, prior: DirichletHMMPrior, states: np.ndarray) -> np.ndarray:
    """``(M, W)``: ``q(j | path) = mu_k(j) (n(z, j) + alpha) / (n(z, .) + S alpha)`` from the
    particles' ``states`` z."""
    alpha = prior.transition_concentration
    counts, totals = paths.transition_rows(states)
    return paths.multiplicity() * (counts + alpha) / (totals[:, None] + prior.num_states * alpha)


def _emission_predictive(paths: _Paths, prior: DirichletHMMPrior, tokens: np.ndarray) -> np.ndarray:
    """``(M, W)``: ``(m(j, x) + beta) / (m(j, .) + p beta)`` of each particle's token ``x``."""
    beta = prior.emission_concentration
    return (paths.emission_rows(tokens) + beta) / (paths.emission_totals + prior.num_tokens * beta)


def _next_token(paths: _Paths, prior: DirichletHMMPrior) -> np.ndarray:
    """``(M, p)``: each particle's ``sum_j q(j | path) (m(j, y) + beta) / (m(j, .) + p beta)``,
    as ``sum_j r_j m(j, y) + beta sum_j r_j`` with ``r_j = q(j | path) / (m(j, .) + p beta)``."""
    beta = prior.emission_concentration
    scaled = _transition_predictive(paths, prior, paths.state) / (paths.emission_totals + prior.num_tokens * beta)
    return (paths.emissions @ scaled[..., None])[..., 0] + beta * scaled.sum(-1, keepdims=True)


def _burn_in(paths: _Paths, prior: DirichletHMMPrior, steps: int, rng: np.random.Generator) -> None:
    """A segment's ``steps`` hidden sites, drawn blind: the first from ``u`` (``mu_k / S``), each
    next from ``q``, its transition counted."""
    M = len(paths.rows)
    paths.append(_categorical(paths.multiplicity(), rng.random(M)), from_last=False)
    for _ in range(steps - 1):
        paths.append(_categorical(_transition_predictive(paths, prior, paths.state), rng.random(M)))


def _observe(paths: _Paths, prior: DirichletHMMPrior, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The step into an observed site with ``tokens (M,)`` by the locally optimal proposal;
    returns the incremental weights ``c = P(x | path, past tokens)`` ``(M,)``."""
    joint = _transition_predictive(paths, prior, paths.state) * _emission_predictive(paths, prior, tokens)
    paths.append(_categorical(joint, rng.random(len(tokens))), tokens)
    return joint.sum(-1)


def _count_site(paths: _Paths, labels: np.ndarray, before: np.ndarray | None, after: np.ndarray | None,
                tokens: np.ndarray | None, change: int) -> None:
    """Adds (``change`` 1) or removes (-1) the counts of a site at ``labels (M,)``: the transitions
    from ``before`` and to ``after`` (None: no such transition), the emission of ``tokens`` (None: a
    hidden site) and the visit."""
    if before is not None:
        paths.count_transitions(before, labels, change)
    if after is not None:
        paths.count_transitions(labels, after, change)
    if tokens is not None:
        paths.count_emissions(labels, tokens, change)
    paths.count_visits(labels, change)


def _site_conditional(paths: _Paths, prior: DirichletHMMPrior, before: np.ndarray | None, after: np.ndarray | None,
                      tokens: np.ndarray | None) -> np.ndarray:
    """``(M, W)``: ``mu_k(j) A(j) B(j) E(j)`` of the module docstring ("Rejuvenation") from the
    counts without the site, its neighbours' labels ``before``/``after`` and its ``tokens``."""
    alpha, S = prior.transition_concentration, prior.num_states
    weights = paths.multiplicity()
    if before is not None:
        counts, totals = paths.transition_rows(before)
        weights *= (counts + alpha) / (totals[:, None] + S * alpha)
    if after is not None:
        columns = np.arange(paths.width)[None, :]
        loop = columns == before[:, None] if before is not None else np.zeros(weights.shape, dtype=bool)
        weights *= ((paths.transition_columns(after) + alpha + (loop & (columns == after[:, None])))
                    / (paths.transition_totals + S * alpha + loop))
    if tokens is not None:
        weights *= _emission_predictive(paths, prior, tokens)
    return weights


def _gibbs_site(paths: _Paths, prior: DirichletHMMPrior, site: int, tokens: np.ndarray | None, incoming: bool,
                outgoing: bool, rng: np.random.Generator) -> None:
    """Draws the label of ``site`` from its conditional given the rest of the path and the tokens;
    ``tokens (M,)`` its tokens (None: a hidden site), ``incoming``/``outgoing``: whether a
    transition enters it / leaves it."""
    before = paths.path[:, site - 1].astype(np.int64) if incoming else None
    after = paths.path[:, site + 1].astype(np.int64) if outgoing else None
    _count_site(paths, paths.path[:, site].astype(np.int64), before, after, tokens, -1)
    labels = _categorical(_site_conditional(paths, prior, before, after, tokens), rng.random(len(paths.rows)))
    _count_site(paths, labels, before, after, tokens, 1)
    paths.path[:, site] = labels


def _gibbs_sweep(paths: _Paths, prior: DirichletHMMPrior, layout: _Layout, observed: np.ndarray,
                 rng: np.random.Generator) -> None:
    """One systematic-scan sweep of :func:`_gibbs_site` over the ``paths.length`` sites so far;
    ``observed (M, J)`` each particle's HMM tokens."""
    for site in range(paths.length):
        j = layout.token_index[site]
        outgoing = site + 1 < paths.length and not layout.starts[site + 1]
        _gibbs_site(paths, prior, site, observed[:, j] if j >= 0 else None, not layout.starts[site], outgoing, rng)


def _replaced(ancestors: np.ndarray, prompts: np.ndarray, particles: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, sources)``: the copies that give ``prompts (b,)`` the offspring of systematic
    resampling, ``ancestors (b, P)`` (indices within each prompt). A particle with offspring keeps
    its own row for one of them; only the rows of particles without offspring are overwritten, by
    the other offspring (the population of copying every row, and a fraction of its copying: each
    copy moves a particle's count tables). Each prompt has as many rows without offspring as extra
    offspring, and both lists run prompt by prompt, so they pair up within prompts."""
    offspring = np.bincount((ancestors + np.arange(len(prompts))[:, None] * particles).ravel(),
                            minlength=len(prompts) * particles)
    rows = (prompts[:, None] * particles + np.arange(particles)).ravel()
    return rows[offspring == 0], np.repeat(rows, np.maximum(offspring - 1, 0))


def _segments(starts: np.ndarray) -> list[np.ndarray]:
    """The HMM-token indices ``j`` of each segment, in order."""
    return np.split(np.arange(len(starts)), np.flatnonzero(starts)[1:])


def _collapsed_batch(tokens: np.ndarray, positions: np.ndarray, starts: np.ndarray, prior: DirichletHMMPrior,
                     settings: CollapsedSMCSettings, rng: np.random.Generator):
    """The collapsed filter over one batch of prompts ``tokens (B, N)``: ``(next_token (B, N, p),
    log_evidence (B,), rejuvenations (B,), particle_steps)``."""
    B, N = tokens.shape
    P, p, K = settings.particles, prior.num_tokens, settings.burn_in_steps
    observed = np.repeat(tokens[:, positions], P, axis=0)  # (B P, J)
    segments = _segments(starts)
    layout = _layout(segments, K)
    paths = _Paths(B * P, prior.num_states, p, len(layout.starts), len(layout.starts))
    log_weights = np.zeros((B, P))
    weights = _normalised(log_weights)
    log_evidence = np.zeros(B)
    rejuvenations = np.zeros(B, dtype=np.int64)
    next_token = np.full((B, N, p), np.nan)
    particle_steps = 0

    def weighted_mean(values: np.ndarray) -> np.ndarray:  # values (B P, p) -> (B, p)
        return np.einsum("bi,bip->bp", weights, values.reshape(B, P, p))

    for g, indices in enumerate(segments):
        if g:
            for _ in range(settings.sweeps):
                _gibbs_sweep(paths, prior, layout, observed, rng)
                particle_steps += B * P * paths.length
        _burn_in(paths, prior, K, rng)
        if g:  # the delimiter's row: the new segment's first token, from its burn-in's last state
            next_token[:, positions[indices[0]] - 1] = weighted_mean(_next_token(paths, prior))
        for j in indices:
            increment = _observe(paths, prior, observed[:, j], rng).reshape(B, P)
            log_evidence += np.log(np.einsum("bi,bi->b", weights, increment))
            log_weights = log_weights + np.log(increment)
            weights = _normalised(log_weights)
            next_token[:, positions[j]] = weighted_mean(_next_token(paths, prior))
            low = 1.0 / np.square(weights).sum(-1) < settings.ess_threshold * P
            if low.any():
                prompts = np.flatnonzero(low)
                paths.copy_rows(*_replaced(_systematic_resample(weights[prompts], rng), prompts, P))
                log_weights[prompts] = 0.0
                weights[prompts] = 1.0 / P
                rejuvenations[prompts] += 1
    return next_token, log_evidence, rejuvenations, particle_steps + B * P * paths.length


def collapsed_prior_predictive(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior,
                               settings: CollapsedSMCSettings = CollapsedSMCSettings()) -> PriorPredictive:
    """The posterior predictive under ``prior``'s augmented model (burn-in start, module docstring)
    at every row of every prompt, with the conventions of :func:`hmm.prior_predictive.prior_predictive`.

    ``tokens (B, N)``: prompts of ``prompt_format`` with delimiter ``prior.num_tokens``. Prompts are
    processed in batches of ``settings.batch_prompts``, each with its own generator seeded by
    ``(settings.seed, first prompt of the batch)`` (:func:`hmm.prior_predictive.batched`).
    """
    if not isinstance(prior, DirichletHMMPrior):
        raise ValueError(f"prior: {type(prior).__name__}; expected a DirichletHMMPrior")
    if not isinstance(settings, CollapsedSMCSettings):
        raise ValueError(f"settings: {type(settings).__name__}; expected CollapsedSMCSettings")
    tokens = check_prompts(tokens, prompt_format, prior.num_tokens).numpy()
    positions, starts = (values.numpy() for values in format_positions(prompt_format))
    next_token, log_evidence, rejuvenations, (particle_steps,) = batched(tokens, positions, starts, prior, settings,
                                                                         _collapsed_batch)
    return PriorPredictive(next_token, log_evidence, rejuvenations, float("nan"), particle_steps)
