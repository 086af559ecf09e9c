"""Bidirectional Monte Carlo bounds on a prompt's evidence under the prior (Grosse et al. 2015):
the second estimator that cross-checks the SMC ceiling of :mod:`hmm.prior_predictive`.

Annealed importance sampling (Neal 2001) along the data, one token at a time: the distributions
``pi_j(theta) ∝ p(theta) P(o_{1:j} | theta)``, ``j = 0..J``, with the SMC's Gibbs sweep as the
transition ``K_j`` (invariant for ``pi_j``, and reversible: sampling the states given ``theta``
then ``theta`` given the states by a kernel reversible for that conditional is a reversible data
augmentation).

* **Forward**: ``theta_0 ~ p``; for ``j = 1..J``: ``w *= P(o_j | o_{<j}, theta_{j-1})``, then
  ``theta_j ~ K_j(theta_{j-1}, .)``. ``E[w] = Z``, so ``log mean_c w_c`` over C chains is a
  *stochastic lower bound* on ``log Z`` (Jensen).
* **Reverse**: the same transitions backwards. ``x`` starts as an exact draw from ``pi_J``: for a
  prompt simulated from the prior, the HMM that generated it. For ``j = J..1``:
  ``v *= 1 / P(o_j | o_{<j}, x)``, then ``x ~ K_{j-1}(x, .)``. ``E[v] = 1 / Z``, so
  ``-log mean_c v_c`` is a *stochastic upper bound* on ``log Z``.

The per-token loss of the ceiling over a prompt is ``-log Z / J``, so the two bounds bracket it; the
SMC's ``log Z_hat`` should lie between them (it is itself a stochastic lower bound).

**Per-token weights.** :func:`forward_log_weights` and :func:`reverse_log_weights` return each
chain's log incremental weight per token, so that one chain bounds every ratio of evidences it
passes: the forward weights of the first ``J'`` tokens estimate ``Z_{J'}``, the reverse weights of
the tokens after ``J'`` estimate ``Z_{J'} / Z_J`` (unbiased: the reverse chain's start is exact for
``pi_J`` whatever follows), so ``-log mean_c`` of their product is a stochastic upper bound on
``log P(o_{J'+1:J} | o_{1:J'})``, the test sequence's evidence given the demonstrations
(``docs/hmm.md``, "The ceiling from below", derives it).

**Annealing schedule** (:class:`AnnealingSchedule`). ``substeps`` k steps a token temper its
likelihood: the intermediate targets on ``(theta, s_{1:j})`` are ``p(theta) p(s_{1:j}, o_{<j} |
theta) O(s_j, o_j)^b`` at ``b = 0, 1/k, .., 1``, whose theta-marginal at ``b = 0`` is ``pi_{j-1}`` and
at ``b = 1`` is ``pi_j``; a step's weight is ``f_b'(theta) / f_b(theta)`` with ``f_b(theta) = sum_s
P(s_j | o_{<j}, theta) O(s, o_j)^b`` (the hidden state summed out), and ``sweeps`` Gibbs sweeps of
:func:`hmm.prior_predictive._move` at the tempered target follow each step.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from scipy.special import logsumexp

from hmm.markov import stationary_or_invalid
from hmm.particle_filter import advance, emission_likelihoods, forward_filter
from hmm.prior_predictive import DirichletHMMPrior, _move, _Particles, check_prompts, format_positions
from hmm.prompts import PromptFormat


class EvidenceBounds(NamedTuple):
    lower: torch.Tensor
    """``(B,)``: forward AIS, ``log mean_c w_c`` (a stochastic lower bound on ``log Z``)."""
    upper: torch.Tensor
    """``(B,)``: reverse AIS from the generating HMM, ``-log mean_c v_c`` (a stochastic upper bound)."""


def check_bounds_input(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior, transition: torch.Tensor,
                       emission: torch.Tensor, chains: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (B, N) int64, stationary (B, S) float64)``: :func:`evidence_bounds`'s input checked
    (``chains`` an integer >= 1, ``tokens`` prompts of ``prompt_format`` as :func:`check_prompts`
    says, ``transition (B, S, S)`` and ``emission (B, S, p)`` one HMM per prompt) and the
    stationary law ``pi_T`` of each generating chain, the reverse chains' exact start (refused
    where it is not unique)."""
    if isinstance(chains, bool) or not isinstance(chains, int) or chains < 1:
        raise ValueError(f"chains: {chains!r}; expected an integer >= 1")
    tokens = check_prompts(tokens, prompt_format, prior.num_tokens)
    B = tokens.shape[0]
    S, p = prior.num_states, prior.num_tokens
    if transition.shape != (B, S, S) or emission.shape != (B, S, p):
        raise ValueError(f"transition, emission: shapes {tuple(transition.shape)}, {tuple(emission.shape)}; expected "
                         f"({B}, {S}, {S}) and ({B}, {S}, {p}), the HMM of each prompt")
    stationary, valid = stationary_or_invalid(transition.double())
    if not bool(valid.all()):
        raise ValueError("transition: a generating chain has no unique stationary law; expected irreducible chains")
    return tokens, stationary


def _log_tempered_likelihoods(particles: _Particles, tokens: np.ndarray, starts: np.ndarray,
                              powers: tuple[float, ...]) -> list[np.ndarray]:
    """``[(M,)] per power b``: ``log f_b(theta) = log sum_s P(s_j | o_{<j}, theta) O(s, o_j)^b`` of
    the last token ``o_j`` of ``tokens (M, j)`` (a forward pass over the tokens before it; the
    start law where ``o_j`` starts a segment). ``f_1 = P(o_j | o_{<j}, theta)``, ``f_0 = 1``."""
    j = tokens.shape[1]
    if starts[j - 1]:
        predicted = particles.stationary
    else:
        before, _ = forward_filter(particles.transition, particles.stationary,
                                   emission_likelihoods(particles.emission, tokens[:, :-1]), starts[: j - 1],
                                   keep_beliefs=False)
        predicted = advance(before[0], particles.transition)
    emitted = particles.emission[np.arange(tokens.shape[0]), :, tokens[:, -1]]
    return [np.log((predicted * emitted**power).sum(-1)) for power in powers]


class AnnealingSchedule(NamedTuple):
    """``substeps`` annealing steps per token (the token's likelihood tempered by the powers
    ``k / substeps``, module docstring) and ``sweeps`` Gibbs sweeps after each step."""

    sweeps: int = 1
    substeps: int = 1

    def check(self) -> AnnealingSchedule:
        for name, value in zip(self._fields, self):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r}; expected an integer >= 1")
        return self


DEFAULT_SCHEDULE = AnnealingSchedule()
"""One annealing step per token, one Gibbs sweep after it."""


def forward_log_weights(observed: np.ndarray, starts: np.ndarray, prior: DirichletHMMPrior, chains_per_row: int,
                        schedule: AnnealingSchedule, rng: np.random.Generator, stop: int | None = None) -> np.ndarray:
    """Forward AIS from the prior: ``(M, C, stop)`` log incremental weights ``log w_{j}`` of C chains
    on each row of ``observed (M, J)`` (HMM tokens), token by token up to ``stop`` (default J); the
    sum over the first ``J'`` tokens is one chain's ``log w`` for ``Z_{J'} = P(o_{1:J'})``."""
    M, J = observed.shape
    stop = J if stop is None else stop
    C = chains_per_row
    tokens = observed.repeat(C, axis=0)
    powers = np.linspace(0.0, 1.0, schedule.substeps + 1)
    chains = _Particles(*prior.sample(M * C, rng))
    log_w = np.zeros((M * C, stop))
    for j in range(1, stop + 1):
        for k in range(1, schedule.substeps + 1):
            higher, lower = _log_tempered_likelihoods(chains, tokens[:, :j], starts, (powers[k], powers[k - 1]))
            log_w[:, j - 1] += higher - lower
            if k < schedule.substeps:
                chains, _ = _move(chains, tokens[:, :j], starts[:j], prior, schedule.sweeps, rng, powers[k], False)
            else:  # after the last token too: no weight reads it, but the random stream stays as it was
                chains, _ = _move(chains, tokens[:, :j], starts[:j], prior, schedule.sweeps, rng, filter_after=False)
    return log_w.reshape(M, C, stop)


def reverse_log_weights(observed: np.ndarray, starts: np.ndarray, prior: DirichletHMMPrior, transition: np.ndarray,
                        emission: np.ndarray, stationary: np.ndarray, chains_per_row: int, schedule: AnnealingSchedule,
                        rng: np.random.Generator, stop: int = 0) -> np.ndarray:
    """Reverse AIS from the generating HMMs ``(transition (M, S, S), emission (M, S, p), stationary
    (M, S))`` of the rows of ``observed (M, J)``: ``(M, C, J)`` log incremental weights ``log v_j``
    of C chains each, token ``J`` removed first, down to token ``stop + 1`` (the weights of the
    tokens up to ``stop`` are left 0). The sum over the tokens after ``J'`` is one chain's ``log v``
    for ``Z_{J'} / Z_J`` (module docstring)."""
    M, J = observed.shape
    C = chains_per_row
    tokens = observed.repeat(C, axis=0)
    powers = np.linspace(0.0, 1.0, schedule.substeps + 1)
    chains = _Particles(*(values.repeat(C, axis=0) for values in (transition, emission, stationary)))
    log_v = np.zeros((M * C, J))
    for j in range(J, stop, -1):
        for k in range(schedule.substeps, 0, -1):
            lower, higher = _log_tempered_likelihoods(chains, tokens[:, :j], starts, (powers[k - 1], powers[k]))
            log_v[:, j - 1] += lower - higher
            if k > 1:
                chains, _ = _move(chains, tokens[:, :j], starts[:j], prior, schedule.sweeps, rng, powers[k - 1], False)
            elif j - 1 > stop:
                chains, _ = _move(chains, tokens[:, : j - 1], starts[: j - 1], prior, schedule.sweeps, rng,
                                  filter_after=False)
    return log_v.reshape(M, C, J)


def log_mean_exp(log_values: np.ndarray) -> np.ndarray:
    """``log mean_c exp(x_c)`` over the last axis, computed stably."""
    return logsumexp(log_values, axis=-1) - np.log(log_values.shape[-1])


def evidence_bounds(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior, transition: torch.Tensor,
                    emission: torch.Tensor, chains: int, seed: int = 0,
                    schedule: AnnealingSchedule = DEFAULT_SCHEDULE) -> EvidenceBounds:
    """The module docstring's two bounds for every prompt of ``tokens (B, N)``, with ``chains``
    chains each way and the annealing ``schedule``; ``transition (B, S, S)`` and ``emission (B, S,
    p)`` are the HMMs that generated the prompts (the reverse chains' exact start)."""
    tokens, stationary = check_bounds_input(tokens, prompt_format, prior, transition, emission, chains)
    schedule = schedule.check()
    positions, starts = (values.numpy() for values in format_positions(prompt_format))
    observed = tokens.numpy()[:, positions]
    rng = np.random.default_rng(seed)
    log_w = forward_log_weights(observed, starts, prior, chains, schedule, rng)
    log_v = reverse_log_weights(observed, starts, prior, transition.double().numpy(), emission.double().numpy(),
                                stationary.numpy(), chains, schedule, rng)
    return EvidenceBounds(torch.from_numpy(log_mean_exp(log_w.sum(-1))), torch.from_numpy(-log_mean_exp(log_v.sum(-1))))
