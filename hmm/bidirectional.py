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


def _log_likelihood_of_last(particles: _Particles, tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``(M,)``: ``log P(o_j | o_{<j}, theta)`` of the last token of ``tokens (M, j)`` (a forward
    pass over the tokens before it)."""
    likelihoods = emission_likelihoods(particles.emission, tokens)
    _, log_normalizers = forward_filter(particles.transition, particles.stationary, likelihoods,
                                        starts[: tokens.shape[1]], keep_beliefs=False)
    return log_normalizers[-1]


def evidence_bounds(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior, transition: torch.Tensor,
                    emission: torch.Tensor, chains: int, seed: int = 0) -> EvidenceBounds:
    """The module docstring's two bounds for every prompt of ``tokens (B, N)``, with ``chains``
    chains each way; ``transition (B, S, S)`` and ``emission (B, S, p)`` are the HMMs that generated
    the prompts (the reverse chains' exact start)."""
    tokens, stationary = check_bounds_input(tokens, prompt_format, prior, transition, emission, chains)
    B = tokens.shape[0]
    positions, starts = (values.numpy() for values in format_positions(prompt_format))
    observed = tokens.numpy()[:, positions].repeat(chains, axis=0)  # (B C, J)
    J = observed.shape[1]
    rng = np.random.default_rng(seed)

    forward = _Particles(*prior.sample(B * chains, rng))
    log_w = np.zeros(B * chains)
    for j in range(J):
        # The moved particles carry their filtered belief at token j - 1 (:func:`_move`).
        predicted = forward.stationary if starts[j] else advance(forward.filtered, forward.transition)
        log_w += np.log(forward.observe(predicted, observed[:, j]))
        forward, _ = _move(forward, observed[:, : j + 1], starts[: j + 1], prior, 1, rng)

    reverse = _Particles(*(values.double().numpy().repeat(chains, axis=0) for values in (transition, emission, stationary)))
    log_v = np.zeros(B * chains)
    for j in range(J, 0, -1):
        log_v -= _log_likelihood_of_last(reverse, observed[:, :j], starts)
        if j > 1:
            reverse, _ = _move(reverse, observed[:, : j - 1], starts[: j - 1], prior, 1, rng)

    def log_mean(values: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(logsumexp(values.reshape(B, chains), axis=-1) - np.log(chains))

    return EvidenceBounds(log_mean(log_w), -log_mean(log_v))
