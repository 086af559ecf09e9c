"""Seeded random HMMs: Dirichlet rows, low-rank transitions, emissions with an observability knob.

All generators take a ``numpy.random.Generator`` (or an int seed) and return float64 tensors, so a
seed fixes the result on every machine.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from hmm.markov import stationary_distribution
from hmm.model import HMM


def as_generator(seed) -> np.random.Generator:
    """``seed`` may be an int, ``None`` or an existing ``numpy.random.Generator``."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def dirichlet_rows(shape: tuple[int, ...], concentration: float, seed=None) -> torch.Tensor:
    """Tensor of ``shape`` whose last-axis rows are i.i.d. ``Dirichlet(concentration * 1)``.

    Small concentrations (e.g. 0.05) give sparse rows. Sampling uses
    ``log G_a = log G_{a+1} + log(U) / a`` (G_a ~ Gamma(a), U ~ Uniform(0,1)), then a softmax of the
    log-gammas, so rows never underflow to all-zero even when every ``G_a`` is below 1e-308.
    """
    if not (isinstance(concentration, (int, float)) and np.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration: {concentration!r}; expected a finite number > 0")
    if len(shape) == 0 or shape[-1] < 1:
        raise ValueError(f"shape: {shape!r}; expected (..., n) with n >= 1")
    rng = as_generator(seed)
    log_gamma = np.log(rng.gamma(concentration + 1.0, size=shape)) + np.log(rng.random(size=shape)) / concentration
    log_gamma -= log_gamma.max(axis=-1, keepdims=True)
    rows = np.exp(log_gamma)
    return torch.from_numpy(rows / rows.sum(axis=-1, keepdims=True))


class LowRankTransition(NamedTuple):
    """``transition = left @ right`` with ``left (..., S, d)`` and ``right (..., d, S)`` both
    row-stochastic, so ``T(s'|s) = <psi(s), phi(s')>`` with ``psi(s) = left[s]`` and
    ``phi(s') = right[:, s']`` (Assumption 1, nonnegative rank <= d)."""

    transition: torch.Tensor
    left: torch.Tensor
    right: torch.Tensor


def low_rank_transition(batch: tuple[int, ...], num_states: int, rank: int, concentration: float = 1.0, seed=None) -> LowRankTransition:
    """Random transition of nonnegative rank ``<= rank``: Dirichlet rows for both factors."""
    if not 1 <= rank <= num_states:
        raise ValueError(f"rank: {rank}; expected 1 <= rank <= num_states = {num_states}")
    rng = as_generator(seed)
    left = dirichlet_rows((*batch, num_states, rank), concentration, rng)
    right = dirichlet_rows((*batch, rank, num_states), concentration, rng)
    return LowRankTransition(left @ right, left, right)


def observable_emission(batch: tuple[int, ...], num_states: int, num_tokens: int, observability: float, noise_concentration: float | None = None, seed=None) -> torch.Tensor:
    """Emission ``O = g * D + (1 - g) * N`` that moves the observability coefficient with ``g``.

    ``D`` is deterministic: state s emits token ``s mod p``. ``N`` is uniform rows when
    ``noise_concentration`` is None, else Dirichlet(noise_concentration) rows.

    Closed form (uniform noise, ``S <= p``): for ``sum(x) = 0`` the uniform part vanishes,
    ``O^T x = g D^T x`` and ``D^T`` is a permutation-like injection, so ``||O^T x||_1 = g ||x||_1``
    and gamma = g exactly. With ``S > p`` two states share a token and gamma = 0 for every g.
    """
    if not 0.0 <= observability <= 1.0:
        raise ValueError(f"observability: {observability!r}; expected a number in [0, 1]")
    deterministic = torch.zeros(num_states, num_tokens, dtype=torch.float64)
    deterministic[torch.arange(num_states), torch.arange(num_states) % num_tokens] = 1.0
    if noise_concentration is None:
        noise = torch.full((*batch, num_states, num_tokens), 1.0 / num_tokens, dtype=torch.float64)
    else:
        noise = dirichlet_rows((*batch, num_states, num_tokens), noise_concentration, seed)
    return observability * deterministic + (1.0 - observability) * noise


def random_hmm(
    num_states: int,
    num_tokens: int,
    *,
    batch: tuple[int, ...] = (),
    transition_concentration: float = 1.0,
    emission_concentration: float | None = 1.0,
    rank: int | None = None,
    transition: torch.Tensor | None = None,
    observability: float | None = None,
    initial: str = "stationary",
    seed=None,
) -> HMM:
    """A batch of random HMMs.

    Args:
        transition_concentration: Dirichlet concentration of transition rows (of both factors
            when ``rank`` is given).
        emission_concentration: Dirichlet concentration of emission rows; with ``observability``
            it is the concentration of the noise part, and ``None`` makes the noise uniform so that
            gamma equals ``observability`` exactly when ``S <= p`` (see :func:`observable_emission`).
        rank: nonnegative rank of the transition (``T = U V``); ``None`` for full rank.
        transition: a transition to use as it is instead of drawing one (e.g. the ``transition``
            of :func:`low_rank_transition`, when the caller needs its factors); excludes ``rank``.
        observability: the knob ``g`` of :func:`observable_emission`; ``None`` for plain
            Dirichlet emissions.
        initial: ``"stationary"`` (the chain starts in its stationary law), ``"uniform"`` or
            ``"dirichlet"`` (random rows with ``transition_concentration``).
    """
    if num_states < 1 or num_tokens < 1:
        raise ValueError(f"num_states, num_tokens: {num_states}, {num_tokens}; expected both >= 1")
    rng = as_generator(seed)
    if transition is not None:
        if rank is not None:
            raise ValueError(f"rank: {rank}; expected None when a transition is given (its rank is fixed)")
    elif rank is None:
        transition = dirichlet_rows((*batch, num_states, num_states), transition_concentration, rng)
    else:
        transition = low_rank_transition(batch, num_states, rank, transition_concentration, rng).transition
    if observability is None:
        # None is refused there: "concentration: None; expected a finite number > 0".
        emission = dirichlet_rows((*batch, num_states, num_tokens), emission_concentration, rng)  # type: ignore[arg-type]
    else:
        emission = observable_emission(batch, num_states, num_tokens, observability, emission_concentration, rng)
    if initial == "stationary":
        initial_probs = stationary_distribution(transition)
    elif initial == "uniform":
        initial_probs = torch.full((*batch, num_states), 1.0 / num_states, dtype=torch.float64)
    elif initial == "dirichlet":
        initial_probs = dirichlet_rows((*batch, num_states), transition_concentration, rng)
    else:
        raise ValueError(f"initial: {initial!r}; expected 'stationary', 'uniform' or 'dirichlet'")
    return HMM(initial_probs, transition, emission)
