"""The bidirectional Monte Carlo bounds of :mod:`hmm.bidirectional` in torch, on CUDA or the CPU with
the same code.

The bounds, their transitions and their result type are :mod:`hmm.bidirectional`'s (its module
docstring): forward AIS along the data from the prior, a stochastic lower bound on ``log Z``, and
reverse AIS from the generating HMM, a stochastic upper bound, each transition one Gibbs sweep of
the SMC's move. This module builds them on :mod:`hmm.prior_predictive_torch`'s move and filter as
:mod:`hmm.bidirectional` builds them on :mod:`hmm.prior_predictive`'s (its ``evidence_bounds`` at
one sweep and one annealing step a token; the per-token weights and tempered steps are numpy's
only), so that at the paper's size (S = 128) the
chains' filters are matrix work for a GPU: the ``B x C`` chains of B prompts move together, rows
``b * C + c``, as the SMC's particles do.

The random draws are torch's (a generator on ``device`` seeded with ``seed``), so the two
implementations agree in distribution, not draw for draw (``tests/test_bidirectional_torch.py``).
Every array lives on ``device`` in ``dtype``; a step's move holds one ``(j, B C, S)`` array of
beliefs, ``j`` the tokens so far.
"""
from __future__ import annotations

import math

import torch

from hmm.bidirectional import EvidenceBounds, check_bounds_input
from hmm.prior_predictive import DirichletHMMPrior, format_positions
from hmm.prior_predictive_torch import (
    _forward_filter,
    _move,
    _Particles,
    advance,
    check_device,
    check_dtype,
    sample_prior,
)
from hmm.prompts import PromptFormat


def _log_likelihood_of_last(particles: _Particles, tokens: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``(M,)``: ``log P(o_j | o_{<j}, theta)`` of the last token of ``tokens (M, j)`` (a forward
    pass over the tokens before it, none where ``o_j`` starts a segment); ``starts`` on the CPU,
    the segment starts of at least ``j`` tokens."""
    j = tokens.shape[1]
    if starts[j - 1]:
        predicted = particles.stationary
    else:
        before = _forward_filter(particles, tokens[:, :-1], starts[: j - 1], keep_beliefs=False)[0]
        predicted = advance(before, particles.transition)
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    return (predicted * particles.emission[rows, :, tokens[:, -1]]).sum(-1).log()


def evidence_bounds(tokens, prompt_format: PromptFormat, prior: DirichletHMMPrior, transition: torch.Tensor,
                    emission: torch.Tensor, chains: int, seed: int = 0, device="cpu",
                    dtype: torch.dtype = torch.float64) -> EvidenceBounds:
    """:func:`hmm.bidirectional.evidence_bounds` computed by torch on ``device`` in ``dtype``, its
    draws from a generator on ``device`` seeded with ``seed``; the bounds are ``(B,)`` tensors on
    ``device`` in ``dtype``.

    ``tokens (B, N)``: prompts of ``prompt_format``; ``transition (B, S, S)`` and ``emission (B, S,
    p)``: the HMMs that generated them, the reverse chains' exact start (their stationary laws are
    solved in float64, then rounded to ``dtype``)."""
    device, dtype = check_device(device), check_dtype(dtype)
    tokens, stationary = check_bounds_input(tokens, prompt_format, prior, transition, emission, chains)
    B = tokens.shape[0]
    positions, starts = format_positions(prompt_format)
    observed = tokens[:, positions].repeat_interleave(chains, dim=0).to(device)  # (B C, J)
    J = observed.shape[1]
    starts_on_device = starts.to(device)  # indexes the moves' states
    generator = torch.Generator(device=device).manual_seed(seed)

    forward = _Particles(*sample_prior(prior, B * chains, generator, dtype))
    log_w = torch.zeros(B * chains, dtype=dtype, device=device)
    for j in range(J):
        if starts[j]:
            predicted = forward.stationary
        else:
            assert forward.filtered is not None  # the moved chains' belief at token j - 1 (:func:`_move`)
            predicted = advance(forward.filtered, forward.transition)
        log_w += forward.observe(predicted, observed[:, j]).log()
        if j + 1 < J:  # a move after the last token would change no weight
            forward, _ = _move(forward, observed[:, : j + 1], starts_on_device[: j + 1], prior, 1, generator)

    reverse = _Particles(*(values.to(device, dtype).repeat_interleave(chains, dim=0)
                           for values in (transition, emission, stationary)))
    log_v = torch.zeros(B * chains, dtype=dtype, device=device)
    for j in range(J, 0, -1):
        log_v -= _log_likelihood_of_last(reverse, observed[:, :j], starts)
        if j > 1:
            reverse, _ = _move(reverse, observed[:, : j - 1], starts_on_device[: j - 1], prior, 1, generator)

    def log_mean(values: torch.Tensor) -> torch.Tensor:
        return values.reshape(B, chains).logsumexp(-1) - math.log(chains)

    return EvidenceBounds(log_mean(log_w), -log_mean(log_v))
