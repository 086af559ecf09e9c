"""Lemma 1 measured: ``E ||P - P_L||_1`` against exact filtering, for three priors, vs L.

Measurement. For one HMM (started in its stationary law) draw ``num_sequences`` sequences of
``burn_in + positions`` tokens. At each of the last ``positions`` positions t (all with
``t >= burn_in >= max L``, so the window never reaches the start):

* ``P(.|o_1..o_t)``: exact forward filtering (:func:`hmm.next_token_probs`);
* ``P_L(.|o_{t-L+1..t})``: :func:`hmm.memory.memory_predictor` on the last ``positions + L``
  tokens; its rows ``L..`` are the windows ending at those positions, each filtered from ``b0``.

The reported error is the mean of ``||P - P_L||_1`` over sequences and positions, a Monte-Carlo
estimate of the stationary expectation (burn-in makes the conditioning on the far past
negligible: filtering forgets it exponentially).

Priors ``b0``: ``stationary``, ``uniform`` and ``g-optimal``
(:func:`hmm.memory.g_optimal_prior` over ``psi(s) = left[s]``).

Per HMM and prior: the smallest constant ``C_i = max_L gamma^4 L / log(d / err(L))``, the decay
rate ``r`` (least-squares slope of ``-log err`` vs L) and ``r / gamma^4``; the reconstructed Lemma 1 predicts
``r >= gamma^4 / C`` for one universal C, i.e. ``r / gamma^4`` bounded away from 0. The universal C
is fitted on the fit half and checked on the held-out half (:mod:`bounds.fitting`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

import hmm
from bounds.fitting import decay_fit, fit_and_check, smallest_lemma1_constant
from bounds.suites import MemberResult, SuiteMember
from hmm.memory import g_optimal_prior, memory_predictor, resolve_prior

PRIORS = ("stationary", "uniform", "g-optimal")


@dataclass(frozen=True)
class Lemma1Config:
    """Monte-Carlo sizes and the L grid of the Lemma 1 measurement."""

    lengths: tuple[int, ...] = tuple(range(1, 13))
    num_sequences: int = 1000
    positions: int = 8
    burn_in: int = 40
    seed: int = 1234

    def __post_init__(self) -> None:
        if min(self.lengths) < 1 or self.burn_in < max(self.lengths):
            raise ValueError(f"lengths/burn_in: {self.lengths}, {self.burn_in}; expected 1 <= L <= burn_in")


def prior_vectors(member: SuiteMember) -> torch.Tensor:
    """``(3, S)``: the priors of :data:`PRIORS` for this HMM."""
    return torch.stack(
        [
            resolve_prior(member.model, "stationary"),
            resolve_prior(member.model, "uniform"),
            g_optimal_prior(member.left, member.right),
        ]
    )


def memory_errors(member: SuiteMember, config: Lemma1Config) -> np.ndarray:
    """``(len(PRIORS), len(lengths))``: mean ``||P - P_L||_1`` at stationarity (module docstring)."""
    length = config.burn_in + config.positions
    task_ids = np.zeros(config.num_sequences, dtype=int)
    tokens, _ = hmm.sample_sequences(member.model, task_ids, length, seed=config.seed + member.index)
    exact = hmm.next_token_probs(member.model, tokens)[:, -config.positions :]
    priors = prior_vectors(member)[:, None, :]
    errors = np.empty((len(PRIORS), len(config.lengths)))
    for column, L in enumerate(config.lengths):
        memory = memory_predictor(member.model, tokens[:, -(config.positions + L) :], L, priors)[..., L:, :]
        errors[:, column] = (memory - exact).abs().sum(-1).mean(dim=(-1, -2)).numpy()
    return errors


@dataclass(frozen=True)
class PriorDecay:
    """Lemma 1 on one HMM and one prior: ``E|P - P_L|_1`` per L, the smallest C, and the decay
    line ``log err = decay_intercept - decay_rate L`` (``None`` when too fast to measure)."""

    errors: list[float]
    smallest_C: float
    decay_rate: float | None
    decay_intercept: float | None
    rate_over_gamma4: float | None


@dataclass(frozen=True)
class Lemma1Failure(MemberResult):
    """A held-out HMM whose own smallest C exceeds the fitted one."""

    smallest_C: float


@dataclass(frozen=True)
class SlowestMember(MemberResult):
    """The HMM with the smallest decay rate relative to gamma^4."""

    decay_rate: float


@dataclass(frozen=True)
class PriorFit:
    """One prior over the suite: the universal C of the fit half (counts of fit and held-out HMMs),
    the held-out failures, the range of ``rate / gamma^4`` and the HMMs too fast to measure."""

    C: float
    fit_members: int
    held_out_members: int
    held_out_failures: list[Lemma1Failure]
    min_rate_over_gamma4: float
    max_rate_over_gamma4: float
    slowest_member: SlowestMember
    too_fast_to_measure: list[str]


def member_summary(member: SuiteMember, lengths, errors: np.ndarray) -> dict[str, PriorDecay]:
    """Per prior: errors, smallest C, decay rate and rate / gamma^4 of one HMM."""
    summary = {}
    gamma4 = member.gamma**4
    for prior, row in zip(PRIORS, errors):
        line = decay_fit(lengths, row)
        rate = None if line is None else line[0]
        summary[prior] = PriorDecay(
            errors=row.tolist(),
            smallest_C=smallest_lemma1_constant(member.gamma, member.rank, lengths, row),
            decay_rate=rate,
            decay_intercept=None if line is None else line[1],
            rate_over_gamma4=None if rate is None else rate / gamma4,
        )
    return summary


def measure_suite(members: list[SuiteMember], config: Lemma1Config, progress: bool = True) -> list[dict[str, PriorDecay]]:
    """:func:`memory_errors` and :func:`member_summary` of every member."""
    results = []
    for member in tqdm(members, desc="Lemma 1: E|P - P_L| vs L", disable=not progress):
        errors = memory_errors(member, config)
        results.append(member_summary(member, config.lengths, errors))
    return results


def fit_constants(members: list[SuiteMember], results: list[dict[str, PriorDecay]]) -> dict[str, PriorFit]:
    """Per prior: the universal C (fit half), held-out failures with parameters, rate/gamma^4 range."""
    halves = [member.half for member in members]
    fits = {}
    for prior in PRIORS:
        constants = [result[prior].smallest_C for result in results]
        verdict = fit_and_check(constants, halves)
        ratios = [result[prior].rate_over_gamma4 for result in results]
        measured = [i for i, ratio in enumerate(ratios) if ratio is not None]
        slowest = min(measured, key=lambda i: ratios[i])
        fits[prior] = PriorFit(
            C=verdict.constant,
            fit_members=len(verdict.fit_members),
            held_out_members=len(verdict.held_out_members),
            held_out_failures=[
                Lemma1Failure(member=members[i].describe(), smallest_C=constants[i]) for i in verdict.held_out_failures
            ],
            min_rate_over_gamma4=ratios[slowest],
            max_rate_over_gamma4=max(ratios[i] for i in measured),
            slowest_member=SlowestMember(member=members[slowest].describe(), decay_rate=results[slowest][prior].decay_rate),
            too_fast_to_measure=[members[i].name for i, ratio in enumerate(ratios) if ratio is None],
        )
    return fits
