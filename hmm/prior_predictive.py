"""The Bayes-optimal in-context predictor under the generator's prior over HMMs, by SMC.

A prompt of fresh HMMs is drawn as: one HMM ``theta = (T, O)`` from the prior of
:class:`hmm.MixtureSpec` (``rank=None``), then every segment an independent run of it, started
from the stationary law ``pi_T`` of its chain. The prior is::

    T[s, :] ~ Dirichlet(alpha 1_S),   O[s, :] ~ Dirichlet(beta 1_p)   (independent rows)

No predictor of the prompt alone does better in expectation than the posterior predictive::

    P(o_{j+1} | o_{1:j}) = E[ P(o_{j+1} | o_{1:j}, theta) | o_{1:j} ]

(``j`` counts HMM tokens; delimiters restart the chain and carry no likelihood). It has no closed
form. We compute it with resample-move SMC over ``theta`` (IBIS, Chopin 2002):

* ``P`` particles ``theta_i`` from the prior, each with its exact filter (:mod:`hmm.filtering`'s
  recursion): the incremental weight of token ``o_j`` is ``c_ij = P(o_j | o_{<j}, theta_i)``,
  ``log w_i += log c_ij``;
* the prediction of row j is ``sum_i W_i P(o_{j+1} | o_{1:j}, theta_i)`` with the normalised
  weights ``W_i``;
* when the effective sample size ``ESS = 1 / sum_i W_i^2`` falls below ``ess_threshold * P``,
  systematic resampling, then ``moves`` sweeps of a kernel that leaves ``p(theta | o_{1:j})``
  invariant (below); weights become equal;
* the evidence ``Z = P(o_{1:J})`` is estimated by ``Z_hat = prod_j sum_i W_i c_ij``, an unbiased
  estimator (Del Moral 2004), so ``E[-log Z_hat] >= -log Z``: the SMC's loss is, in expectation,
  an upper bound on the ceiling's loss, tight as ``P`` grows.

The move is Gibbs sampling on ``(theta, s_{1:j})``:

1. hidden states ``s_{1:j} | theta, o`` by forward filtering, backward sampling (FFBS; a segment's
   first state is drawn from its filtered belief alone, as segments are independent runs);
2. ``O[s, :] | s, o ~ Dirichlet(beta + m_s)`` with ``m_s[o]`` the emissions of o from state s
   (conjugate, exact);
3. ``T | s``: its conditional is ``prod_s Dirichlet(T[s, :]; alpha + n_s) x prod_segments
   pi_T(s_first)`` with ``n_s[s']`` the transitions s -> s' inside segments. The stationary start
   makes it non-conjugate, so ``T'`` is proposed from the Dirichlet part and accepted with the
   Metropolis-Hastings probability ``min(1, prod_seg pi_T'(s_first) / pi_T(s_first))`` (an
   independence sampler whose proposal is the conjugate part). A proposal whose stationary law
   cannot be computed (a numerically reducible chain, probability zero under the prior) is
   rejected, which keeps the kernel valid.

The arithmetic is numpy's (:mod:`hmm.particle_filter` filters the particles; numpy's generator
draws the Gammas, about twice as fast as torch's), and the results come back as torch tensors.
Validation and cost: ``docs/empirical.md``, "The prior-predictive ceiling".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from scipy.special import logsumexp

from hmm.markov import stationary_or_invalid
from hmm.model import check_tokens
from hmm.particle_filter import advance, emission_likelihoods, forward_filter
from hmm.presets import MixtureSpec
from hmm.prompts import PromptFormat


@dataclass(frozen=True)
class DirichletHMMPrior:
    """Independent ``Dirichlet(transition_concentration)`` rows of T and
    ``Dirichlet(emission_concentration)`` rows of O; every segment starts from ``pi_T``."""

    num_states: int
    num_tokens: int
    transition_concentration: float
    emission_concentration: float

    def __post_init__(self) -> None:
        for name in ("num_states", "num_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r}; expected an integer >= 1")
        for name in ("transition_concentration", "emission_concentration"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise ValueError(f"{name}: {value!r}; expected a finite number > 0")

    @classmethod
    def from_spec(cls, spec: MixtureSpec) -> DirichletHMMPrior:
        """The prior a :class:`hmm.MixtureSpec` draws its HMMs from (full-rank transitions only)."""
        if spec.rank is not None:
            raise ValueError(f"spec: rank {spec.rank}; expected rank None (the SMC's prior has independent "
                             f"Dirichlet rows, a low-rank transition is another prior)")
        return cls(spec.num_states, spec.num_tokens, spec.transition_concentration, spec.emission_concentration)

    def sample(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` draws ``(transition (count, S, S), emission (count, S, p), stationary (count, S))``;
        the rare draw whose stationary law is not computable is drawn again."""
        S, p = self.num_states, self.num_tokens
        transition = _dirichlet(np.full((count, S, S), float(self.transition_concentration)), rng)
        emission = _dirichlet(np.full((count, S, p), float(self.emission_concentration)), rng)
        stationary, valid = _stationary(transition)
        if not valid.all():
            again = self.sample(int((~valid).sum()), rng)
            transition[~valid], emission[~valid], stationary[~valid] = again
        return transition, emission, stationary


@dataclass(frozen=True)
class SMCSettings:
    """``particles`` per prompt; ``moves`` Gibbs sweeps per rejuvenation; resampling when the ESS
    falls below ``ess_threshold * particles``; ``seed`` of the generator; ``batch_prompts`` prompts
    filtered together (the results depend on it only through the random draws)."""

    particles: int = 256
    moves: int = 2
    ess_threshold: float = 0.5
    seed: int = 0
    batch_prompts: int = 32

    def __post_init__(self) -> None:
        for name, minimum in (("particles", 1), ("moves", 1), ("batch_prompts", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name}: {value!r}; expected an integer >= {minimum}")
        if not 0 < self.ess_threshold <= 1:
            raise ValueError(f"ess_threshold: {self.ess_threshold!r}; expected a number in (0, 1]")


class PriorPredictive(NamedTuple):
    next_token: torch.Tensor
    """``(B, N, p)``: row t is the posterior predictive of the HMM token after prompt position t
    (at a delimiter: a new segment's first token; before a delimiter: the segment's continuation,
    as :func:`hmm.bayes_predictive`)."""
    log_evidence: torch.Tensor
    """``(B,)``: ``log Z_hat``, the estimate of ``log P(all HMM tokens of the prompt)``."""
    rejuvenations: torch.Tensor
    """``(B,)``: how many times the prompt's particles were resampled and moved."""
    acceptance: float
    """Fraction of the transition proposals accepted by the Metropolis-Hastings step."""
    moved_tokens: int
    """Sum over rejuvenations of (particles moved) x (tokens so far): each Gibbs sweep filters and
    backward-samples this many particle-tokens, the final filter of each move as many again (the
    work a cost model counts)."""


def _dirichlet(concentration: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rows ``~ Dirichlet(concentration)`` along the last axis, by normalised Gamma draws."""
    gammas = rng.standard_gamma(concentration)
    return gammas / gammas.sum(-1, keepdims=True)


def _stationary(transition: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`hmm.markov.stationary_or_invalid` of numpy transitions, as numpy arrays."""
    stationary, valid = stationary_or_invalid(torch.from_numpy(transition))
    return stationary.numpy(), valid.numpy()


def format_positions(prompt_format: PromptFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions (J,), starts (J,) bool)``: the prompt positions of the HMM tokens, in order, and
    which of them start a segment."""
    positions = (~prompt_format.is_delimiter).nonzero().squeeze(-1)
    starts = prompt_format.position_in_segment[positions] == 0
    return positions, starts


def check_prompts(tokens, prompt_format: PromptFormat, num_tokens: int) -> torch.Tensor:
    """``tokens`` as ``(B, N)`` int64 after checking that every prompt follows ``prompt_format``:
    length ``N = prompt_format.length``, the delimiter ``num_tokens`` exactly at its delimiter
    positions, HMM tokens ``0..num_tokens-1`` everywhere else."""
    tokens = check_tokens(tokens, num_tokens, "tokens", allow_delimiter=True)
    expected = prompt_format.length
    if tokens.ndim != 2 or tokens.shape[1] != expected:
        raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected (B, {expected}) prompts of the format {prompt_format}")
    misplaced = (tokens == num_tokens) != prompt_format.is_delimiter
    if bool(misplaced.any()):
        b, t = (int(i) for i in misplaced.nonzero()[0])
        raise ValueError(f"tokens: prompt {b} has {'a delimiter' if tokens[b, t] == num_tokens else 'an HMM token'} at "
                         f"position {t}; expected a prompt of the format {prompt_format} (delimiter {num_tokens} "
                         f"exactly after each demonstration)")
    return tokens


def _categorical(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """``(M,)``: one draw per row of ``weights (M, S)`` (rows need not be normalised), by inverting
    the cumulative sum at ``uniforms (M,)``."""
    cumulative = weights.cumsum(-1)
    below = cumulative < uniforms[:, None] * cumulative[:, -1:]
    return np.minimum(below.sum(-1), weights.shape[1] - 1)


def _backward_sample(filtered: np.ndarray, transition: np.ndarray, starts: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """``(M, J)`` hidden states drawn from ``P(s_{1:J} | o_{1:J}, theta)``:
    ``s_J ~ filtered_J``, ``s_j ~ filtered_j(s) T(s, s_{j+1})`` inside a segment, ``s_j ~ filtered_j``
    at a segment's end."""
    J, M, S = filtered.shape
    uniforms = rng.random((J, M))
    states = np.empty((M, J), dtype=np.int64)
    states[:, -1] = _categorical(filtered[-1], uniforms[-1])
    rows = np.arange(M)
    for j in range(J - 2, -1, -1):
        weights = filtered[j] if starts[j + 1] else filtered[j] * transition[rows, :, states[:, j + 1]]
        states[:, j] = _categorical(weights, uniforms[j])
    return states


def _counts(indices: np.ndarray, size: int) -> np.ndarray:
    """``(M, size)``: row m counts the values of ``indices[m]`` (each in ``0..size-1``)."""
    M = indices.shape[0]
    flat = (indices + size * np.arange(M)[:, None]).ravel()
    return np.bincount(flat, minlength=M * size).reshape(M, size).astype(np.float64)


def _gibbs_parameters(states, tokens, starts, prior: DirichletHMMPrior, transition, stationary,
                      rng: np.random.Generator, last_power: float = 1.0):
    """Steps 2 and 3 of the module docstring for M particles: new ``(transition, emission,
    stationary, accepted (M,) bool)`` given ``states (M, J)`` and ``tokens (M, J)``; the last
    token's emission counts ``last_power`` (its likelihood tempered, :func:`_move`)."""
    M, J = states.shape
    S, p = prior.num_states, prior.num_tokens
    inside = ~starts[1:]
    transitions = _counts((states[:, :-1] * S + states[:, 1:])[:, inside], S * S).reshape(M, S, S)
    emissions = _counts(states * p + tokens, S * p).reshape(M, S, p)
    if last_power != 1.0:
        emissions.reshape(M, S * p)[np.arange(M), states[:, -1] * p + tokens[:, -1]] -= 1.0 - last_power
    emission = _dirichlet(emissions + prior.emission_concentration, rng)
    proposal = _dirichlet(transitions + prior.transition_concentration, rng)
    proposed_stationary, valid = _stationary(proposal)
    first = states[:, starts]
    with np.errstate(divide="ignore"):
        log_ratio = (np.log(np.take_along_axis(proposed_stationary, first, 1))
                     - np.log(np.take_along_axis(stationary, first, 1))).sum(-1)
        accepted = valid & (np.log(rng.random(M)) < log_ratio)
    transition = np.where(accepted[:, None, None], proposal, transition)
    stationary = np.where(accepted[:, None], proposed_stationary, stationary)
    return transition, emission, stationary, accepted


def _normalised(log_weights: np.ndarray) -> np.ndarray:
    """``(B, P)``: each row's weights ``W_i = w_i / sum_k w_k`` from their logs."""
    return np.exp(log_weights - logsumexp(log_weights, axis=-1, keepdims=True))


def _systematic_resample(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``(B, P)`` ancestor indices by systematic resampling of each row of normalised ``weights``."""
    B, P = weights.shape
    cumulative = weights.cumsum(-1)
    cumulative[:, -1] = 1.0
    offsets = (rng.random((B, 1)) + np.arange(P)) / P
    ancestors = np.stack([np.searchsorted(row, points) for row, points in zip(cumulative, offsets)])
    return np.minimum(ancestors, P - 1)


class _Particles:
    """Per-particle parameters and filtered belief of ``B x P`` particles (rows ``b * P + i``)."""

    def __init__(self, transition, emission, stationary, filtered=None):
        self.transition, self.emission, self.stationary, self.filtered = transition, emission, stationary, filtered

    def take(self, rows: np.ndarray) -> _Particles:
        return _Particles(self.transition[rows], self.emission[rows], self.stationary[rows],
                          None if self.filtered is None else self.filtered[rows])

    def put(self, rows: np.ndarray, other: _Particles) -> None:
        for name in ("transition", "emission", "stationary", "filtered"):
            getattr(self, name)[rows] = getattr(other, name)

    def observe(self, predicted: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Filter one token per particle, ``tokens (M,)``, from the ``predicted (M, S)`` belief:
        ``filtered`` becomes ``b_j``; returns ``c_j = P(o_j | o_<j, theta)`` ``(M,)``."""
        joint = predicted * self.emission[np.arange(len(tokens)), :, tokens]
        likelihood = joint.sum(-1)
        self.filtered = joint / likelihood[:, None]
        return likelihood


def _move(particles: _Particles, tokens: np.ndarray, starts: np.ndarray, prior: DirichletHMMPrior,
          moves: int, rng: np.random.Generator, last_power: float = 1.0,
          filter_after: bool = True) -> tuple[_Particles, np.ndarray]:
    """``moves`` Gibbs sweeps (module docstring) targeting ``p(theta | tokens)`` for each particle,
    ``tokens (M, j)`` its prompt's HMM tokens so far; returns the moved particles with their
    filtered belief at the last token (None without ``filter_after``), and the accepted-proposal
    flags ``(moves, M)``.

    ``last_power`` < 1 tempers the last token (the annealing steps within a token of
    :mod:`hmm.bidirectional`): the sweeps target ``p(theta, s_{1:j}) P(o_{<j} | s) O(s_j, o_j)^last_power``
    on ``(theta, s)``, whose FFBS takes the last likelihood to that power and whose Dirichlet step
    counts the last emission ``last_power`` times."""
    transition, emission, stationary = particles.transition, particles.emission, particles.stationary
    accepted = []

    def likelihoods_of(emission: np.ndarray) -> np.ndarray:
        likelihoods = emission_likelihoods(emission, tokens)
        if last_power != 1.0:
            likelihoods[-1] **= last_power
        return likelihoods

    for _ in range(moves):
        filtered, _ = forward_filter(transition, stationary, likelihoods_of(emission), starts)
        states = _backward_sample(filtered, transition, starts, rng)
        transition, emission, stationary, accepted_now = _gibbs_parameters(
            states, tokens, starts, prior, transition, stationary, rng, last_power)
        accepted.append(accepted_now)
    if not filter_after:
        return _Particles(transition, emission, stationary), np.stack(accepted)
    last, _ = forward_filter(transition, stationary, likelihoods_of(emission), starts, keep_beliefs=False)
    return _Particles(transition, emission, stationary, last[0]), np.stack(accepted)


def _smc_batch(tokens: np.ndarray, positions: np.ndarray, starts: np.ndarray, prior: DirichletHMMPrior,
               settings: SMCSettings, rng: np.random.Generator):
    """IBIS over one batch of prompts ``tokens (B, N)``: ``(next_token (B, N, p), log_evidence (B,),
    rejuvenations (B,), accepted, proposed, moved_tokens)``."""
    B, N = tokens.shape
    P, p = settings.particles, prior.num_tokens
    observed = tokens[:, positions]  # (B, J) HMM tokens
    J = observed.shape[1]
    particles = _Particles(*prior.sample(B * P, rng))
    per_particle = np.repeat(observed, P, axis=0)  # (B P, J)
    log_weights = np.zeros((B, P))
    log_evidence = np.zeros(B)
    rejuvenations = np.zeros(B, dtype=np.int64)
    accepted = proposed = moved_tokens = 0
    next_token = np.full((B, N, p), np.nan)
    ends = np.append(starts[1:], True)  # the last token of each segment

    def weighted_mean(values: np.ndarray) -> np.ndarray:  # values (B P, p) -> (B, p)
        return np.einsum("bi,bip->bp", weights, values.reshape(B, P, p))

    predicted_next = particles.stationary  # the first token starts a segment
    for j in range(J):
        predicted = particles.stationary if starts[j] else predicted_next
        increment = particles.observe(predicted, per_particle[:, j])
        before = logsumexp(log_weights, axis=-1)
        log_weights = log_weights + np.log(increment).reshape(B, P)
        log_evidence += logsumexp(log_weights, axis=-1) - before
        # Normalised once per token: the ESS, the resampling and the predictions read the same
        # weights (a row's normalisation reads that row only, so refreshing the resampled rows
        # alone gives what normalising every row again would).
        weights = _normalised(log_weights)
        low = 1.0 / np.square(weights).sum(-1) < settings.ess_threshold * P
        if low.any():
            prompts = np.flatnonzero(low)
            ancestors = _systematic_resample(weights[prompts], rng) + prompts[:, None] * P
            rows = (prompts[:, None] * P + np.arange(P)).ravel()
            moved, accepted_now = _move(particles.take(ancestors.ravel()), per_particle[rows, : j + 1],
                                        starts[: j + 1], prior, settings.moves, rng)
            particles.put(rows, moved)
            log_weights[prompts] = 0.0
            weights[prompts] = _normalised(log_weights[prompts])
            rejuvenations[prompts] += 1
            accepted += int(accepted_now.sum())
            proposed += accepted_now.size
            moved_tokens += len(rows) * (j + 1)
        predicted_next = advance(particles.filtered, particles.transition)
        next_token[:, positions[j]] = weighted_mean(advance(predicted_next, particles.emission))
        if ends[j] and positions[j] + 1 < N:  # the delimiter's row: a new segment's first token
            next_token[:, positions[j] + 1] = weighted_mean(advance(particles.stationary, particles.emission))
    return next_token, log_evidence, rejuvenations, accepted, proposed, moved_tokens


def batched(tokens: np.ndarray, positions: np.ndarray, starts: np.ndarray, prior: DirichletHMMPrior, settings,
            run_batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """The batching loop of both prior-predictive SMCs: ``run_batch(tokens of the batch, positions,
    starts, prior, settings, rng)`` on batches of ``settings.batch_prompts`` prompts of ``tokens (B,
    N)``, each with its own generator seeded by ``(settings.seed, first prompt of the batch)``.
    ``run_batch`` returns ``(next_token, log_evidence, rejuvenations, *counters)``; returns those
    three concatenated over the batches as tensors, and each counter summed."""
    results, counters = [], None
    for first in range(0, tokens.shape[0], settings.batch_prompts):
        rng = np.random.default_rng((settings.seed, first))
        batch = run_batch(tokens[first: first + settings.batch_prompts], positions, starts, prior, settings, rng)
        results.append(batch[:3])
        counters = batch[3:] if counters is None else [total + now for total, now in zip(counters, batch[3:])]
    next_token, log_evidence, rejuvenations = (torch.from_numpy(np.concatenate(parts)) for parts in zip(*results))
    return next_token, log_evidence, rejuvenations, list(counters or ())


def prior_predictive(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior,
                     settings: SMCSettings = SMCSettings()) -> PriorPredictive:
    """The posterior predictive under ``prior`` at every row of every prompt (module docstring).

    ``tokens (B, N)``: prompts of ``prompt_format`` with delimiter ``prior.num_tokens``. Prompts are
    processed in batches of ``settings.batch_prompts``, each with its own generator seeded by
    ``(settings.seed, first prompt of the batch)`` (:func:`batched`).
    """
    if not isinstance(prior, DirichletHMMPrior):
        raise ValueError(f"prior: {type(prior).__name__}; expected a DirichletHMMPrior")
    if not isinstance(settings, SMCSettings):
        raise ValueError(f"settings: {type(settings).__name__}; expected SMCSettings")
    tokens = check_prompts(tokens, prompt_format, prior.num_tokens).numpy()
    positions, starts = (values.numpy() for values in format_positions(prompt_format))
    next_token, log_evidence, rejuvenations, (accepted, proposed, moved_tokens) = batched(
        tokens, positions, starts, prior, settings, _smc_batch)
    return PriorPredictive(next_token, log_evidence, rejuvenations, accepted / proposed if proposed else float("nan"),
                           moved_tokens)
