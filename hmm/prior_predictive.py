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

Validation and cost: ``docs/empirical.md``, "The prior-predictive ceiling".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from hmm.markov import stationary_or_invalid
from hmm.model import check_tokens
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

    def sample(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``count`` draws ``(transition (count, S, S), emission (count, S, p), stationary (count, S))``;
        the rare draw whose stationary law is not computable is drawn again."""
        S, p = self.num_states, self.num_tokens
        transition = _dirichlet(torch.full((count, S, S), float(self.transition_concentration), dtype=torch.float64), generator)
        emission = _dirichlet(torch.full((count, S, p), float(self.emission_concentration), dtype=torch.float64), generator)
        stationary, valid = stationary_or_invalid(transition)
        if not bool(valid.all()):
            again = self.sample(int((~valid).sum()), generator)
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


def _dirichlet(concentration: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Rows ``~ Dirichlet(concentration)`` along the last axis, by normalised Gamma draws."""
    gammas = torch._standard_gamma(concentration, generator=generator)
    return gammas / gammas.sum(-1, keepdim=True)


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


def _advance(belief: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``(M, K)``: ``belief[m] @ matrix[m]`` for ``belief (M, S)`` and ``matrix (M, S, K)``. A
    broadcast product and a sum: 3x faster than ``torch.bmm`` of ``(M, 1, S)`` rows at S = 16 on
    one core (memory-bound either way; ``bmm`` pays per-matrix overhead)."""
    return (belief[:, :, None] * matrix).sum(1)


def _filter(transition, emission, stationary, likelihood: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``(J, M, S)`` filtered beliefs ``P(s_j | o_{1:j}, theta)`` of M particles, with
    ``likelihood (J, M, S) = O[:, o_j]``; a segment start takes the stationary law as its predicted
    belief (the recursion of :mod:`hmm.filtering`)."""
    J = likelihood.shape[0]
    filtered = torch.empty_like(likelihood)
    predicted = stationary
    for j in range(J):
        if j > 0:
            predicted = stationary if starts[j] else _advance(filtered[j - 1], transition)
        joint = predicted * likelihood[j]
        filtered[j] = joint / joint.sum(-1, keepdim=True)
    return filtered


def _categorical(probabilities: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row of ``probabilities (M, S)`` (rows need not be normalised)."""
    cumulative = probabilities.cumsum(-1)
    uniforms = torch.rand(probabilities.shape[0], 1, dtype=probabilities.dtype, generator=generator)
    return torch.searchsorted(cumulative, uniforms * cumulative[:, -1:]).clamp_max(probabilities.shape[1] - 1).squeeze(-1)


def _backward_sample(filtered: torch.Tensor, transition: torch.Tensor, starts: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
    """``(M, J)`` hidden states drawn from ``P(s_{1:J} | o_{1:J}, theta)``:
    ``s_J ~ filtered_J``, ``s_j ~ filtered_j(s) T(s, s_{j+1})`` inside a segment, ``s_j ~ filtered_j``
    at a segment's end."""
    J, M, S = filtered.shape
    states = torch.empty(M, J, dtype=torch.long)
    states[:, -1] = _categorical(filtered[-1], generator)
    rows = torch.arange(M)
    for j in range(J - 2, -1, -1):
        weights = filtered[j] if starts[j + 1] else filtered[j] * transition[rows, :, states[:, j + 1]]
        states[:, j] = _categorical(weights, generator)
    return states


def _gibbs_parameters(states, tokens, starts, prior: DirichletHMMPrior, transition, stationary,
                      generator: torch.Generator):
    """Steps 2 and 3 of the module docstring for M particles: new ``(transition, emission,
    stationary, accepted (M,) bool)`` given ``states (M, J)`` and ``tokens (M, J)``."""
    M, J = states.shape
    S, p = prior.num_states, prior.num_tokens
    inside = ~starts[1:]
    pair = (states[:, :-1] * S + states[:, 1:])[:, inside]
    transitions = torch.zeros(M, S * S, dtype=torch.float64).scatter_add_(1, pair, torch.ones_like(pair, dtype=torch.float64))
    emitted = states * p + tokens
    emissions = torch.zeros(M, S * p, dtype=torch.float64).scatter_add_(1, emitted, torch.ones_like(emitted, dtype=torch.float64))
    emission = _dirichlet(emissions.view(M, S, p) + prior.emission_concentration, generator)
    proposal = _dirichlet(transitions.view(M, S, S) + prior.transition_concentration, generator)
    proposed_stationary, valid = stationary_or_invalid(proposal)
    first = states[:, starts]
    log_ratio = (proposed_stationary.gather(1, first).log() - stationary.gather(1, first).log()).sum(-1)
    uniforms = torch.rand(M, dtype=torch.float64, generator=generator)
    accepted = valid & (uniforms.log() < log_ratio)
    transition = torch.where(accepted[:, None, None], proposal, transition)
    stationary = torch.where(accepted[:, None], proposed_stationary, stationary)
    return transition, emission, stationary, accepted


def _systematic_resample(log_weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``(B, P)`` ancestor indices by systematic resampling of each row's normalised weights."""
    B, P = log_weights.shape
    weights = (log_weights - log_weights.logsumexp(-1, keepdim=True)).exp()
    cumulative = weights.cumsum(-1)
    cumulative[:, -1] = 1.0
    offsets = (torch.rand(B, 1, dtype=torch.float64, generator=generator) + torch.arange(P, dtype=torch.float64)) / P
    return torch.searchsorted(cumulative, offsets).clamp_max(P - 1)


class _Particles:
    """Per-particle parameters and filtered belief of ``B x P`` particles (rows ``b * P + i``)."""

    def __init__(self, transition, emission, stationary, filtered=None):
        self.transition, self.emission, self.stationary, self.filtered = transition, emission, stationary, filtered

    def take(self, rows: torch.Tensor) -> _Particles:
        return _Particles(self.transition[rows], self.emission[rows], self.stationary[rows],
                          None if self.filtered is None else self.filtered[rows])

    def put(self, rows: torch.Tensor, other: _Particles) -> None:
        for name in ("transition", "emission", "stationary", "filtered"):
            getattr(self, name)[rows] = getattr(other, name)


def _move(particles: _Particles, tokens: torch.Tensor, starts: torch.Tensor, prior: DirichletHMMPrior,
          moves: int, generator: torch.Generator) -> tuple[_Particles, torch.Tensor]:
    """``moves`` Gibbs sweeps (module docstring) targeting ``p(theta | tokens)`` for each particle,
    ``tokens (M, j)`` its prompt's HMM tokens so far; returns the moved particles with their
    filtered belief at the last token, and the accepted-proposal flags ``(moves, M)``."""
    transition, emission, stationary = particles.transition, particles.emission, particles.stationary
    accepted = []
    for _ in range(moves):
        likelihood = emission.transpose(1, 2).gather(1, tokens[:, :, None].expand(-1, -1, prior.num_states))
        filtered = _filter(transition, emission, stationary, likelihood.transpose(0, 1), starts)
        states = _backward_sample(filtered, transition, starts, generator)
        transition, emission, stationary, accepted_now = _gibbs_parameters(
            states, tokens, starts, prior, transition, stationary, generator)
        accepted.append(accepted_now)
    likelihood = emission.transpose(1, 2).gather(1, tokens[:, :, None].expand(-1, -1, prior.num_states))
    filtered = _filter(transition, emission, stationary, likelihood.transpose(0, 1), starts)
    return _Particles(transition, emission, stationary, filtered[-1]), torch.stack(accepted)


def _smc_batch(tokens: torch.Tensor, positions: torch.Tensor, starts: torch.Tensor, prior: DirichletHMMPrior,
               settings: SMCSettings, generator: torch.Generator):
    """IBIS over one batch of prompts ``tokens (B, N)``: ``(next_token (B, N, p), log_evidence (B,),
    rejuvenations (B,), accepted, proposed)``."""
    B, N = tokens.shape
    P, S, p = settings.particles, prior.num_states, prior.num_tokens
    observed = tokens[:, positions]  # (B, J) HMM tokens
    J = observed.shape[1]
    particles = _Particles(*prior.sample(B * P, generator))
    per_particle = observed.repeat_interleave(P, dim=0)  # (B P, J)
    log_weights = torch.zeros(B, P, dtype=torch.float64)
    log_evidence = torch.zeros(B, dtype=torch.float64)
    rejuvenations = torch.zeros(B, dtype=torch.long)
    accepted = proposed = 0
    next_token = torch.full((B, N, p), float("nan"), dtype=torch.float64)
    ends = torch.cat([starts[1:], torch.tensor([True])])  # the last token of each segment

    def weighted_mean(values: torch.Tensor) -> torch.Tensor:  # values (B P, p) -> (B, p)
        weights = (log_weights - log_weights.logsumexp(-1, keepdim=True)).exp()
        return torch.einsum("bi,bip->bp", weights, values.view(B, P, p))

    for j in range(J):
        if starts[j]:
            predicted = particles.stationary
        else:
            predicted = _advance(particles.filtered, particles.transition)
        joint = predicted * particles.emission.gather(2, per_particle[:, j, None, None].expand(-1, S, 1)).squeeze(-1)
        increment = joint.sum(-1)
        particles.filtered = joint / increment[:, None]
        before = log_weights.logsumexp(-1)
        log_weights = log_weights + increment.log().view(B, P)
        log_evidence += log_weights.logsumexp(-1) - before
        normalised = (log_weights - log_weights.logsumexp(-1, keepdim=True)).exp()
        low = (1.0 / normalised.square().sum(-1)) < settings.ess_threshold * P
        if bool(low.any()):
            prompts = low.nonzero().squeeze(-1)
            ancestors = _systematic_resample(log_weights[prompts], generator) + prompts[:, None] * P
            rows = (prompts[:, None] * P + torch.arange(P)).reshape(-1)
            moved, accepted_now = _move(particles.take(ancestors.reshape(-1)), per_particle[rows, : j + 1],
                                        starts[: j + 1], prior, settings.moves, generator)
            particles.put(rows, moved)
            log_weights[prompts] = 0.0
            rejuvenations[prompts] += 1
            accepted += int(accepted_now.sum())
            proposed += accepted_now.numel()
        continuation = _advance(_advance(particles.filtered, particles.transition), particles.emission)
        next_token[:, positions[j]] = weighted_mean(continuation)
        if ends[j] and positions[j] + 1 < N:  # the delimiter's row: a new segment's first token
            next_token[:, positions[j] + 1] = weighted_mean(_advance(particles.stationary, particles.emission))
    return next_token, log_evidence, rejuvenations, accepted, proposed


def prior_predictive(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior,
                     settings: SMCSettings = SMCSettings()) -> PriorPredictive:
    """The posterior predictive under ``prior`` at every row of every prompt (module docstring).

    ``tokens (B, N)``: prompts of ``prompt_format`` with delimiter ``prior.num_tokens``. Prompts are
    processed in batches of ``settings.batch_prompts``, each with its own generator seeded by
    ``(settings.seed, first prompt of the batch)``.
    """
    if not isinstance(prior, DirichletHMMPrior):
        raise ValueError(f"prior: {type(prior).__name__}; expected a DirichletHMMPrior")
    if not isinstance(settings, SMCSettings):
        raise ValueError(f"settings: {type(settings).__name__}; expected SMCSettings")
    tokens = check_prompts(tokens, prompt_format, prior.num_tokens)
    positions, starts = format_positions(prompt_format)
    results = []
    accepted = proposed = 0
    for first in range(0, tokens.shape[0], settings.batch_prompts):
        generator = torch.Generator().manual_seed(settings.seed * 1_000_003 + first)
        *batch, accepted_now, proposed_now = _smc_batch(tokens[first: first + settings.batch_prompts], positions,
                                                        starts, prior, settings, generator)
        results.append(batch)
        accepted += accepted_now
        proposed += proposed_now
    next_token, log_evidence, rejuvenations = (torch.cat(parts) for parts in zip(*results))
    return PriorPredictive(next_token, log_evidence, rejuvenations, accepted / proposed if proposed else float("nan"))
