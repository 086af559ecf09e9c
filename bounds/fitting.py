"""Fitting the unknown constants from measurements, on one half of a suite, checked on the other.

Protocol (the same for Lemma 1's C and the generalization constant C_g):

1. For every HMM of the suite, the smallest constant that makes its bound hold at every measured
   point: for Lemma 1 ``C_i = max_L gamma^4 L / log(d / err_i(L))``
   (:func:`smallest_lemma1_constant`), for a bound linear in its constant
   ``C_i = max_points measured / form`` (:func:`smallest_scale`).
2. The universal constant is the largest ``C_i`` over the **fit** half: the smallest constant
   that makes the bound hold on every fit-half HMM.
3. The bound with that constant is checked on every **held-out** HMM; each one with
   ``C_i > C_fit`` is a failure of the claimed universality and is reported with its parameters.

Points at or below :data:`ROUNDING_FLOOR` are left out: the two predictors are computed
separately in float64, so an error there is rounding, not the decay being measured (and would
inflate C: ``gamma^4 L / log(d / 1e-16)`` grows with L).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bounds.formulas import generalization_bound, lemma1_constant
from bounds.suites import MemberResult

ROUNDING_FLOOR = 1e-12
"""Errors at or below this are float64 rounding of two separately computed predictors."""


def _check_finite(name: str, values: np.ndarray) -> None:
    """Refuse NaN or infinite entries: a comparison with NaN is False, so one would be dropped silently."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise ValueError(f"{name}: {values[bad].tolist()} at indices {bad.tolist()}; expected finite values")


def _resolved(lengths, errors) -> tuple[np.ndarray, np.ndarray]:
    """``lengths, errors`` as float arrays restricted to errors above :data:`ROUNDING_FLOOR`."""
    lengths = np.asarray(lengths, dtype=float)
    errors = np.asarray(errors, dtype=float)
    if lengths.shape != errors.shape or lengths.ndim != 1:
        raise ValueError(f"lengths/errors: shapes {lengths.shape}, {errors.shape}; expected equal 1-d shapes")
    _check_finite("lengths", lengths)
    _check_finite("errors", errors)
    keep = errors > ROUNDING_FLOOR
    return lengths[keep], errors[keep]


def smallest_lemma1_constant(gamma: float, d: float, lengths, errors) -> float:
    """``max_L gamma^4 L / log(d / err(L))`` over resolved points (``inf`` if some ``err >= d``)."""
    lengths, errors = _resolved(lengths, errors)
    if lengths.size == 0:
        raise ValueError("errors: all at or below the rounding floor; expected at least one resolved point")
    return max(lemma1_constant(gamma, d, length, value) for length, value in zip(lengths, errors))


def decay_fit(lengths, errors) -> tuple[float, float] | None:
    """Least-squares line ``log err(L) = a - r L`` over resolved points: ``(r, a)``; ``None`` when
    fewer than 2 points are resolved (the error reaches rounding by the second L: too fast to measure)."""
    lengths, errors = _resolved(lengths, errors)
    if lengths.size < 2:
        return None
    slope, intercept = np.polyfit(lengths, np.log(errors), 1)
    return float(-slope), float(intercept)


def smallest_scale(measured, form) -> float:
    """``max measured / form``: the smallest C with ``measured <= C form`` at every point."""
    measured = np.asarray(measured, dtype=float)
    form = np.asarray(form, dtype=float)
    if measured.shape != form.shape or measured.size == 0 or not (form > 0).all():
        raise ValueError(f"measured/form: shapes {measured.shape}, {form.shape}; expected equal non-empty shapes, form > 0")
    _check_finite("measured", measured)
    _check_finite("form", form)
    return float((measured / form).max())


@dataclass(frozen=True)
class FitVerdict:
    """The universal constant of the fit half and the held-out indices it fails on.

    The member lists are indices into the ``constants`` of :func:`fit_and_check`; a failure is a
    held-out index whose own smallest constant exceeds the fitted one.
    """

    constant: float
    fit_members: list[int]
    held_out_members: list[int]
    held_out_failures: list[int]


def fit_and_check(constants: list[float], halves: list[str]) -> FitVerdict:
    """Universal constant from the fit half, verdict on the held-out half (module docstring).

    A constant may be ``+inf`` (no finite constant fits that HMM, see
    :func:`smallest_lemma1_constant`); NaN or ``-inf`` is refused.
    """
    if len(constants) != len(halves):
        raise ValueError(f"constants/halves: lengths {len(constants)}, {len(halves)}; expected equal lengths")
    bad = [i for i, value in enumerate(constants) if not (math.isfinite(value) or value == math.inf)]
    if bad:
        raise ValueError(
            f"constants: {[constants[i] for i in bad]} at indices {bad}; expected finite values (or +inf)"
        )
    fit = [i for i, half in enumerate(halves) if half == "fit"]
    held = [i for i, half in enumerate(halves) if half == "held-out"]
    if not fit or not held or len(fit) + len(held) != len(halves):
        raise ValueError(f"halves: {sorted(set(halves))}; expected only 'fit' and 'held-out', both present")
    constant = max(constants[i] for i in fit)
    failures = [i for i in held if not constants[i] <= constant]
    return FitVerdict(constant=constant, fit_members=fit, held_out_members=held, held_out_failures=failures)


@dataclass(frozen=True)
class GeneralizationFailure(MemberResult):
    """A held-out HMM whose own smallest C_g exceeds the fitted one."""

    smallest_C_g: float


@dataclass(frozen=True)
class GeneralizationFit:
    """``C_g`` of the fit half, every HMM's own smallest C_g, and the held-out failures."""

    C_g: float
    smallest_C_g: list[float]
    held_out_members: int
    held_out_failures: list[GeneralizationFailure]


def generalization_fit(members: list, sweeps: list, p: int, L: int, lambdas: list[float]) -> GeneralizationFit:
    """``C_g`` from the fit half of the N' sweeps, verdict on the held-out half (module docstring).

    ``members`` have a ``half`` and a ``describe()``; ``sweeps[i]`` are member i's
    :class:`bounds.theorem1.SweepPoint` (mean N' and generalization term); ``p`` is the
    prediction's dimension (``p^m`` for Theorem 2).
    """
    constants = []
    for sweep, lam in zip(sweeps, lambdas):
        measured = [point.generalization for point in sweep]
        form = [generalization_bound(p, L, lam, point.n_samples, 1.0) for point in sweep]
        constants.append(smallest_scale(measured, form))
    verdict = fit_and_check(constants, [member.half for member in members])
    return GeneralizationFit(
        C_g=verdict.constant,
        smallest_C_g=constants,
        held_out_members=len(verdict.held_out_members),
        held_out_failures=[
            GeneralizationFailure(member=members[i].describe(), smallest_C_g=constants[i]) for i in verdict.held_out_failures
        ],
    )
