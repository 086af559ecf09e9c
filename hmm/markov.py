"""Markov-chain helpers: stationary distribution and mixing rates of (batches of) transitions."""
from __future__ import annotations

import torch

from hmm.model import check_stochastic


def stationary_or_invalid(transition: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pi (..., S), valid (...))``: the distribution ``pi`` with ``pi T = pi``, ``sum(pi) = 1``,
    and where it is unique.

    Solves the linear system ``(T^T - I) pi = 0`` with its last equation replaced by
    ``1^T pi = 1`` (one batched LU solve). For an irreducible chain the solution is unique; for a
    reducible one the system is singular (or numerically so): ``valid`` is False there and ``pi``
    is uniform. No validation of ``transition``: for callers that draw many chains and handle the
    rare invalid one themselves (:mod:`hmm.prior_predictive`).
    """
    S = transition.shape[-1]
    system = transition.transpose(-1, -2) - torch.eye(S, dtype=transition.dtype, device=transition.device)
    system = system.clone()
    system[..., -1, :] = 1.0
    rhs = torch.zeros(*transition.shape[:-1], dtype=transition.dtype, device=transition.device)
    rhs[..., -1] = 1.0
    solution, info = torch.linalg.solve_ex(system, rhs)
    valid = (info == 0) & torch.isfinite(solution).all(-1)
    solution = torch.where(valid[..., None], solution.clamp_min(0.0), torch.full_like(solution, 1.0 / S))
    return solution / solution.sum(-1, keepdim=True), valid


def stationary_distribution(transition: torch.Tensor) -> torch.Tensor:
    """``(..., S)``: the distribution ``pi`` with ``pi T = pi``, ``sum(pi) = 1``
    (:func:`stationary_or_invalid`); a ``ValueError`` for a reducible chain."""
    check_stochastic(transition, "transition")
    stationary, valid = stationary_or_invalid(transition)
    if not bool(valid.all()):
        raise ValueError("transition: the chain has no unique stationary distribution (reducible); expected an irreducible chain")
    return stationary


def spectral_gap(transition: torch.Tensor) -> torch.Tensor:
    """``(...)``: ``1 - |lambda_2|``, one minus the second-largest eigenvalue modulus of ``T``.

    Distances to stationarity decay like ``|lambda_2|^t`` asymptotically.
    """
    check_stochastic(transition, "transition")
    moduli = torch.linalg.eigvals(transition).abs().sort(dim=-1, descending=True).values
    return 1.0 - moduli[..., 1] if transition.shape[-1] > 1 else torch.ones(transition.shape[:-2], dtype=transition.dtype)


def dobrushin_coefficient(transition: torch.Tensor) -> torch.Tensor:
    """``(...)``: ``delta(T) = max_{s,s'} TV(T[s], T[s']) = 1 - min_{s,s'} sum_j min(T[s,j], T[s',j])``.

    The contraction factor of total variation in one step: ``||(b - b')T||_1 <= delta ||b - b'||_1``.
    """
    check_stochastic(transition, "transition")
    overlap = torch.minimum(transition[..., :, None, :], transition[..., None, :, :]).sum(-1)
    return 1.0 - overlap.amin(dim=(-1, -2))
