"""The prior-predictive SMC of :mod:`hmm.prior_predictive` in torch, on CUDA or the CPU with the
same code.

The algorithm, the prior, the settings and the result type are :mod:`hmm.prior_predictive`'s (its
module docstring): resample-move SMC over ``theta = (T, O)`` with FFBS Gibbs moves and the
Metropolis-Hastings step for the stationary start. This module re-implements the arithmetic in
torch, function for function (``_dirichlet``, ``_categorical``, ``_backward_sample``, ``_counts``,
``_gibbs_parameters``, ``_move``, ``_smc_batch`` mirror the numpy ones), for two reasons:

* at the paper's size (S = 128) the particles' filters are matrix work for a GPU;
* a second implementation is an oracle for the first: ``tests/test_prior_predictive_torch.py``
  checks that both give the same estimates within their Monte-Carlo errors.

The random draws are torch's (a generator on ``device`` seeded from ``(settings.seed, first
prompt of the batch)``), so the two implementations agree in distribution, not draw for draw, and
a CUDA run differs from a CPU run with the same seed. Every array lives on ``device`` in
``dtype``; the particles' filters keep one ``(J, M, S)`` array of beliefs during a move, ``M`` the
particles of the prompts being moved (``batch_prompts * particles`` at most).

float32: ``docs/hmm.md``, "The SMC in torch".
"""
from __future__ import annotations

import numpy as np
import torch

from hmm.markov import stationary_or_invalid
from hmm.prior_predictive import (
    DirichletHMMPrior,
    PriorPredictive,
    SMCSettings,
    check_prompts,
    format_positions,
)
from hmm.prompts import PromptFormat

DTYPES = (torch.float32, torch.float64)
"""The arithmetic's precisions."""
DEFAULT_SETTINGS = SMCSettings()
"""The settings :func:`prior_predictive` runs with unless told (:class:`SMCSettings`'s defaults)."""


def check_device(device) -> torch.device:
    """``device`` as a :class:`torch.device` that this machine has; a ``ValueError`` naming it otherwise."""
    try:
        checked = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r}; expected a torch device such as 'cpu' or 'cuda'") from None
    if checked.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r}; expected an available device (torch sees no CUDA device here)")
    if checked.type not in ("cpu", "cuda"):
        raise ValueError(f"device: {device!r}; expected 'cpu' or a CUDA device")
    return checked


def check_dtype(dtype) -> torch.dtype:
    """``dtype`` if it is one of :data:`DTYPES`; a ``ValueError`` naming it otherwise."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype!r}; expected torch.float32 or torch.float64")
    return dtype


def _dirichlet(concentration: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Rows ``~ Dirichlet(concentration)`` along the last axis, by normalised Gamma draws."""
    gammas = torch._standard_gamma(concentration, generator=generator)
    return gammas / gammas.sum(-1, keepdim=True)


def sample_prior(prior: DirichletHMMPrior, count: int, generator: torch.Generator, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:meth:`DirichletHMMPrior.sample` with torch's draws on ``generator``'s device: ``(transition
    (count, S, S), emission (count, S, p), stationary (count, S))``, a draw whose stationary law is
    not computable drawn again."""
    S, p = prior.num_states, prior.num_tokens
    device = generator.device
    transition = _dirichlet(torch.full((count, S, S), float(prior.transition_concentration), dtype=dtype,
                                       device=device), generator)
    emission = _dirichlet(torch.full((count, S, p), float(prior.emission_concentration), dtype=dtype,
                                     device=device), generator)
    stationary, valid = stationary_or_invalid(transition)
    if not bool(valid.all()):
        invalid = (~valid).nonzero().squeeze(-1)
        transition[invalid], emission[invalid], stationary[invalid] = sample_prior(prior, len(invalid), generator, dtype)
    return transition, emission, stationary


def _categorical(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """``(M,)``: one draw per row of ``weights (M, S)`` (rows need not be normalised), by inverting
    the cumulative sum at ``uniforms (M,)``."""
    cumulative = weights.cumsum(-1)
    below = cumulative < uniforms[:, None] * cumulative[:, -1:]
    return below.sum(-1).clamp_max(weights.shape[1] - 1)


def _forward_filter(particles: _Particles, tokens: torch.Tensor, starts: torch.Tensor,
                    keep_beliefs: bool = True) -> torch.Tensor:
    """The filtered beliefs ``b_j`` (:mod:`hmm.particle_filter`'s recursion) of every particle on its
    ``tokens (M, J)``: ``(J, M, S)``, or only the last ``(1, M, S)`` without ``keep_beliefs``."""
    M, J = tokens.shape
    rows = torch.arange(M, device=tokens.device)
    stationary, transition, emission = particles.stationary, particles.transition, particles.emission
    filtered = torch.empty((J if keep_beliefs else 1, M, stationary.shape[1]), dtype=stationary.dtype,
                           device=stationary.device)
    for j, start in enumerate(starts.tolist()):
        predicted = stationary if start or j == 0 else advance(filtered[j - 1 if keep_beliefs else 0], transition)
        belief = predicted * emission[rows, :, tokens[:, j]]
        filtered[j if keep_beliefs else 0] = belief / belief.sum(-1, keepdim=True)
    return filtered


def advance(beliefs: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """``(M, K)``: row m is ``beliefs[m] @ matrices[m]``, for ``beliefs (M, S)`` and ``matrices (M, S, K)``."""
    return torch.bmm(beliefs[:, None, :], matrices)[:, 0]


def _backward_sample(filtered: torch.Tensor, transition: torch.Tensor, starts: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
    """``(M, J)`` hidden states drawn from ``P(s_{1:J} | o_{1:J}, theta)`` (numpy's ``_backward_sample``)."""
    J, M, S = filtered.shape
    uniforms = torch.rand((J, M), generator=generator, dtype=filtered.dtype, device=filtered.device)
    states = torch.empty((M, J), dtype=torch.int64, device=filtered.device)
    states[:, -1] = _categorical(filtered[-1], uniforms[-1])
    rows = torch.arange(M, device=filtered.device)
    segment_starts = starts.tolist()
    for j in range(J - 2, -1, -1):
        weights = filtered[j] if segment_starts[j + 1] else filtered[j] * transition[rows, :, states[:, j + 1]]
        states[:, j] = _categorical(weights, uniforms[j])
    return states


def _counts(indices: torch.Tensor, size: int, dtype: torch.dtype) -> torch.Tensor:
    """``(M, size)``: row m counts the values of ``indices[m]`` (each in ``0..size-1``); exact in
    either dtype (integers far below 2^24)."""
    counts = torch.zeros((indices.shape[0], size), dtype=dtype, device=indices.device)
    return counts.scatter_add_(1, indices, torch.ones_like(indices, dtype=dtype))


def _gibbs_parameters(states: torch.Tensor, tokens: torch.Tensor, starts: torch.Tensor, prior: DirichletHMMPrior,
                      transition: torch.Tensor, stationary: torch.Tensor, generator: torch.Generator):
    """Steps 2 and 3 of :mod:`hmm.prior_predictive`'s move for M particles: new ``(transition,
    emission, stationary, accepted (M,) bool)`` given ``states (M, J)`` and ``tokens (M, J)``."""
    M, J = states.shape
    S, p = prior.num_states, prior.num_tokens
    dtype = transition.dtype
    inside = ~starts[1:]
    transitions = _counts((states[:, :-1] * S + states[:, 1:])[:, inside], S * S, dtype).reshape(M, S, S)
    emissions = _counts(states * p + tokens, S * p, dtype).reshape(M, S, p)
    emission = _dirichlet(emissions + prior.emission_concentration, generator)
    proposal = _dirichlet(transitions + prior.transition_concentration, generator)
    proposed_stationary, valid = stationary_or_invalid(proposal)
    first = states[:, starts]
    # log(0) is -inf and -inf - -inf is nan, which no uniform's log is below: as numpy's, rejected.
    log_ratio = (proposed_stationary.gather(1, first).log() - stationary.gather(1, first).log()).sum(-1)
    uniforms = torch.rand(M, generator=generator, dtype=dtype, device=states.device)
    accepted = valid & (uniforms.log() < log_ratio)
    transition = torch.where(accepted[:, None, None], proposal, transition)
    stationary = torch.where(accepted[:, None], proposed_stationary, stationary)
    return transition, emission, stationary, accepted


class _Particles:
    """Per-particle parameters and filtered belief of ``B x P`` particles (rows ``b * P + i``), as
    :class:`hmm.prior_predictive._Particles` but of tensors."""

    def __init__(self, transition: torch.Tensor, emission: torch.Tensor, stationary: torch.Tensor,
                 filtered: torch.Tensor | None = None):
        self.transition, self.emission, self.stationary, self.filtered = transition, emission, stationary, filtered

    def take(self, rows: torch.Tensor) -> _Particles:
        return _Particles(self.transition[rows], self.emission[rows], self.stationary[rows],
                          None if self.filtered is None else self.filtered[rows])

    def put(self, rows: torch.Tensor, other: _Particles) -> None:
        for name in ("transition", "emission", "stationary", "filtered"):
            getattr(self, name)[rows] = getattr(other, name)

    def observe(self, predicted: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Filter one token per particle, ``tokens (M,)``, from the ``predicted (M, S)`` belief:
        ``filtered`` becomes ``b_j``; returns ``c_j = P(o_j | o_<j, theta)`` ``(M,)``."""
        joint = predicted * self.emission[torch.arange(len(tokens), device=tokens.device), :, tokens]
        likelihood = joint.sum(-1)
        self.filtered = joint / likelihood[:, None]
        return likelihood


def _move(particles: _Particles, tokens: torch.Tensor, starts: torch.Tensor, prior: DirichletHMMPrior,
          moves: int, generator: torch.Generator) -> tuple[_Particles, torch.Tensor]:
    """``moves`` Gibbs sweeps targeting ``p(theta | tokens)`` for each particle, ``tokens (M, j)``
    its prompt's HMM tokens so far; returns the moved particles with their filtered belief at the
    last token, and the accepted-proposal flags ``(moves, M)``."""
    accepted = []
    for _ in range(moves):
        filtered = _forward_filter(particles, tokens, starts)
        states = _backward_sample(filtered, particles.transition, starts, generator)
        transition, emission, stationary, accepted_now = _gibbs_parameters(
            states, tokens, starts, prior, particles.transition, particles.stationary, generator)
        particles = _Particles(transition, emission, stationary)
        accepted.append(accepted_now)
    particles.filtered = _forward_filter(particles, tokens, starts, keep_beliefs=False)[0]
    return particles, torch.stack(accepted)


def _systematic_resample(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``(B, P)`` ancestor indices by systematic resampling of each row of normalised ``weights``."""
    B, P = weights.shape
    cumulative = weights.cumsum(-1)
    cumulative[:, -1] = 1.0
    offsets = (torch.rand((B, 1), generator=generator, dtype=weights.dtype, device=weights.device)
               + torch.arange(P, dtype=weights.dtype, device=weights.device)) / P
    return torch.searchsorted(cumulative, offsets).clamp_max(P - 1)


def _smc_batch(tokens: torch.Tensor, positions: torch.Tensor, starts: torch.Tensor, prior: DirichletHMMPrior,
               settings: SMCSettings, generator: torch.Generator, dtype: torch.dtype):
    """IBIS over one batch of prompts ``tokens (B, N)``: ``(next_token (B, N, p), log_evidence (B,),
    rejuvenations (B,), accepted, proposed, moved_tokens)`` (numpy's ``_smc_batch``)."""
    B, N = tokens.shape
    P, p = settings.particles, prior.num_tokens
    device = tokens.device
    observed = tokens[:, positions]  # (B, J) HMM tokens
    J = observed.shape[1]
    particles = _Particles(*sample_prior(prior, B * P, generator, dtype))
    per_particle = observed.repeat_interleave(P, dim=0)  # (B P, J)
    log_weights = torch.zeros((B, P), dtype=dtype, device=device)
    log_evidence = torch.zeros(B, dtype=dtype, device=device)
    rejuvenations = torch.zeros(B, dtype=torch.int64, device=device)
    accepted = proposed = moved_tokens = 0
    next_token = torch.full((B, N, p), float("nan"), dtype=dtype, device=device)
    ends = torch.cat([starts[1:], starts.new_ones(1)]).tolist()  # the last token of each segment
    starts_list, positions_list = starts.tolist(), positions.tolist()
    particle_offsets = torch.arange(P, device=device)

    def weighted_mean(values: torch.Tensor) -> torch.Tensor:  # values (B P, p) -> (B, p)
        return torch.einsum("bi,bip->bp", weights, values.reshape(B, P, p))

    predicted_next = particles.stationary  # the first token starts a segment
    for j in range(J):
        predicted = particles.stationary if starts_list[j] else predicted_next
        increment = particles.observe(predicted, per_particle[:, j])
        before = log_weights.logsumexp(-1)
        log_weights = log_weights + increment.log().reshape(B, P)
        log_evidence += log_weights.logsumexp(-1) - before
        weights = torch.softmax(log_weights, -1)
        low = 1.0 / weights.square().sum(-1) < settings.ess_threshold * P
        prompts = low.nonzero().squeeze(-1)
        if len(prompts):
            ancestors = _systematic_resample(weights[prompts], generator) + prompts[:, None] * P
            rows = (prompts[:, None] * P + particle_offsets).reshape(-1)
            moved, accepted_now = _move(particles.take(ancestors.reshape(-1)), per_particle[rows, : j + 1],
                                        starts[: j + 1], prior, settings.moves, generator)
            particles.put(rows, moved)
            log_weights[prompts] = 0.0
            weights[prompts] = 1.0 / P
            rejuvenations[prompts] += 1
            accepted += int(accepted_now.sum())
            proposed += accepted_now.numel()
            moved_tokens += len(rows) * (j + 1)
        assert particles.filtered is not None  # set by observe, then by the moves
        predicted_next = advance(particles.filtered, particles.transition)
        next_token[:, positions_list[j]] = weighted_mean(advance(predicted_next, particles.emission))
        if ends[j] and positions_list[j] + 1 < N:  # the delimiter's row: a new segment's first token
            next_token[:, positions_list[j] + 1] = weighted_mean(advance(particles.stationary, particles.emission))
    return next_token, log_evidence, rejuvenations, accepted, proposed, moved_tokens


def batch_seed(seed: int, first: int) -> int:
    """The torch generator's seed of the batch that starts at prompt ``first``: 64 bits of numpy's
    ``SeedSequence((seed, first))``, the entropy numpy's SMC seeds the same batch with."""
    return int(np.random.SeedSequence((seed, first)).generate_state(1, np.uint64)[0])


def prior_predictive(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior,
                     settings: SMCSettings = DEFAULT_SETTINGS, device="cpu", dtype: torch.dtype = torch.float64
                     ) -> PriorPredictive:
    """:func:`hmm.prior_predictive.prior_predictive` computed by torch on ``device`` in ``dtype``;
    the result's tensors are on ``device`` in ``dtype`` (rejuvenations int64).

    Prompts are processed in batches of ``settings.batch_prompts``, each with its own generator on
    ``device`` seeded by :func:`batch_seed`."""
    device, dtype = check_device(device), check_dtype(dtype)
    if not isinstance(prior, DirichletHMMPrior):
        raise ValueError(f"prior: {type(prior).__name__}; expected a DirichletHMMPrior")
    if not isinstance(settings, SMCSettings):
        raise ValueError(f"settings: {type(settings).__name__}; expected SMCSettings")
    tokens = check_prompts(tokens, prompt_format, prior.num_tokens)
    if tokens.shape[0] == 0:
        raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected at least one prompt")
    tokens = tokens.to(device)
    positions, starts = (values.to(device) for values in format_positions(prompt_format))
    results = []
    accepted = proposed = moved_tokens = 0
    for first in range(0, tokens.shape[0], settings.batch_prompts):
        generator = torch.Generator(device=device).manual_seed(batch_seed(settings.seed, first))
        *batch, accepted_now, proposed_now, moved_now = _smc_batch(tokens[first: first + settings.batch_prompts],
                                                                   positions, starts, prior, settings, generator, dtype)
        results.append(batch)
        accepted += accepted_now
        proposed += proposed_now
        moved_tokens += moved_now
    next_token, log_evidence, rejuvenations = (torch.cat(parts) for parts in zip(*results))
    return PriorPredictive(next_token, log_evidence, rejuvenations, accepted / proposed if proposed else float("nan"),
                           moved_tokens)
