"""Suites of HMMs with controlled observability gamma, transition rank d and mixing.

Every member is ``hmm.random_hmm(S, p, transition=Q_d, observability=g, emission_concentration=None,
transition_concentration=c, initial="stationary", seed=seed)``, with a transition matrix ``Q_d`` of
rank d from ``hmm.low_rank_transition`` (or drawn by ``random_hmm`` itself for full rank): emission ``O = g D + (1-g) U``
(D deterministic, U uniform rows), whose gamma equals the knob g exactly when ``S <= p``
(:func:`hmm.observable_emission`; re-measured here with :func:`hmm.observability.observability`).
The chain starts in its stationary law, so every position of a sampled sequence has the same
marginal law and the L-memory predictor with the stationary prior is the exact conditional law
of the next token given the last L tokens.

Transition factors ``Q = left @ right`` (``psi(s) = left[s]``) feed the G-optimal prior: a
rank-d member's transition is drawn by :func:`hmm.low_rank_transition` and handed to
``random_hmm`` with its factors kept; for a full-rank member (``d = S``) we take ``left = Q``,
``right = I``.

Fit / held-out split: within every (gamma, d, c) cell, seeds alternate between the ``fit`` half
(even seed index) and the ``held-out`` half (odd), so both halves cover every cell.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

import hmm
from bounds.serialize import INLINE
from hmm.observability import observability


@dataclass(frozen=True)
class SuiteSpec:
    """Axes of a suite: ``gammas x ranks x concentrations x seeds`` (rank ``None`` = full rank)."""

    gammas: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
    ranks: tuple[int | None, ...] = (2, None)
    concentrations: tuple[float, ...] = (1.0, 0.1)
    seeds: int = 2
    num_states: int = 4
    num_tokens: int = 6

    def __post_init__(self) -> None:
        if self.num_states > self.num_tokens:
            raise ValueError(
                f"num_states: {self.num_states}; expected <= num_tokens = {self.num_tokens} (gamma = g exactly needs S <= p)"
            )
        if not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(f"seeds: {self.seeds!r}; expected an integer >= 2 (one fit and one held-out HMM per cell)")
        for g in self.gammas:
            if not 0 < g <= 1:
                raise ValueError(f"gammas: {g!r}; expected numbers in (0, 1]")


@dataclass(frozen=True)
class MemberDescription:
    """The parameters of a suite member, enough to rebuild its HMM with :func:`build_member`."""

    name: str
    gamma_knob: float
    gamma: float
    rank: int
    num_states: int
    num_tokens: int
    transition_concentration: float
    seed: int
    half: str


@dataclass(frozen=True)
class MemberResult:
    """Base of a result about one suite member: its description, written inline in the JSON."""

    member: MemberDescription = field(metadata=INLINE)


@dataclass(frozen=True)
class SuiteMember:
    """One HMM of a suite with its generating parameters and transition factors."""

    index: int
    model: hmm.HMM
    left: torch.Tensor
    right: torch.Tensor
    knob: float
    gamma: float
    rank: int
    concentration: float
    seed: int
    half: str

    @property
    def name(self) -> str:
        """``g{gamma knob}-d{rank}-c{concentration}-s{seed}``, e.g. ``g0.9-d2-c0.1-s2053``."""
        return f"g{self.knob:g}-d{self.rank}-c{self.concentration:g}-s{self.seed}"

    def describe(self) -> MemberDescription:
        """The member's parameters without its tensors."""
        return MemberDescription(
            name=self.name,
            gamma_knob=self.knob,
            gamma=self.gamma,
            rank=self.rank,
            num_states=self.model.num_states,
            num_tokens=self.model.num_tokens,
            transition_concentration=self.concentration,
            seed=self.seed,
            half=self.half,
        )


def build_member(
    index: int, S: int, p: int, knob: float, rank: int | None, concentration: float, seed: int, half: str
) -> SuiteMember:
    """The HMM of the module docstring, its factors and its exactly measured gamma."""
    factors = None if rank is None else hmm.low_rank_transition((), S, rank, concentration, seed)
    model = hmm.random_hmm(
        S,
        p,
        transition_concentration=concentration,
        emission_concentration=None,
        transition=None if factors is None else factors.transition,
        observability=knob,
        initial="stationary",
        seed=seed,
    )
    if factors is None:
        left, right = model.transition, torch.eye(S, dtype=torch.float64)
    else:
        left, right = factors.left, factors.right
    measured = observability(model.emission)
    return SuiteMember(
        index=index,
        model=model,
        left=left,
        right=right,
        knob=knob,
        gamma=measured.lower,
        rank=S if rank is None else rank,
        concentration=concentration,
        seed=seed,
        half=half,
    )


def build_suite(spec: SuiteSpec, base_seed: int = 0) -> list[SuiteMember]:
    """Every member of ``spec``; seed of the j-th member ``base_seed + j``."""
    members = []
    for knob in spec.gammas:
        for rank in spec.ranks:
            for concentration in spec.concentrations:
                for replicate in range(spec.seeds):
                    index = len(members)
                    half = "fit" if replicate % 2 == 0 else "held-out"
                    members.append(
                        build_member(
                            index, spec.num_states, spec.num_tokens, knob, rank, concentration, base_seed + index, half
                        )
                    )
    return members
