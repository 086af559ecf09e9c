"""Fitted-constant machinery on planted data, the suite generator, and Lemma 1's measurement."""
import numpy as np
import pytest
import torch

from bounds import fitting, formulas, lemma1
from bounds.suites import SuiteSpec, build_member, build_suite

LENGTHS = np.arange(1, 13)


def planted_errors(gamma: float, d: int, C: float, seed: int) -> np.ndarray:
    """``d exp(-gamma^4 L / C)`` times factors in (0.05, 1], exactly 1 at one random L."""
    rng = np.random.default_rng(seed)
    slack = rng.uniform(0.05, 1.0, LENGTHS.size)
    slack[rng.integers(LENGTHS.size)] = 1.0
    return np.array([formulas.lemma1_bound(gamma, d, L, C) for L in LENGTHS]) * slack


@pytest.mark.parametrize("seed", range(5))
def test_smallest_constant_recovers_the_planted_C(seed):
    gamma, d, C = 0.4 + 0.1 * seed, 2 + seed % 3, 0.05 * (seed + 1)
    errors = planted_errors(gamma, d, C, seed)
    assert fitting.smallest_lemma1_constant(gamma, d, LENGTHS, errors) == pytest.approx(C, rel=1e-12)
    # One point pushed above the bound needs a larger C, one pushed below does not change it.
    worse = errors.copy()
    worse[3] = formulas.lemma1_bound(gamma, d, LENGTHS[3], C) * 1.5
    assert fitting.smallest_lemma1_constant(gamma, d, LENGTHS, worse) > C * (1 + 1e-6)


def test_decay_fit_recovers_a_planted_rate_and_ignores_rounding():
    errors = 0.3 * np.exp(-0.7 * LENGTHS)
    errors[-3:] = 1e-16  # below the floor: rounding, left out
    rate, intercept = fitting.decay_fit(LENGTHS, errors)
    assert rate == pytest.approx(0.7, rel=1e-10) and intercept == pytest.approx(np.log(0.3), rel=1e-10)
    assert fitting.decay_fit(LENGTHS, np.r_[1e-3, np.full(LENGTHS.size - 1, 1e-17)]) is None


def test_fit_on_one_half_and_check_on_the_other_reports_failures():
    halves = ["fit", "held-out"] * 4
    planted = [0.2, 0.1, 0.3, 0.25, 0.15, 0.35, 0.1, 0.05]
    verdict = fitting.fit_and_check(planted, halves)
    assert verdict.constant == 0.3
    assert verdict.held_out_failures == [5]
    with pytest.raises(ValueError, match="halves"):
        fitting.fit_and_check([1.0, 2.0], ["fit", "fit"])


def test_smallest_scale_is_the_largest_ratio():
    assert fitting.smallest_scale([1.0, 3.0, 2.0], [1.0, 2.0, 4.0]) == 1.5
    with pytest.raises(ValueError, match="form > 0"):
        fitting.smallest_scale([1.0], [0.0])


def test_suite_members_have_the_planted_gamma_factors_and_halves():
    members = build_suite(SuiteSpec(gammas=(0.3, 0.8), ranks=(2, None), concentrations=(0.5,), seeds=2))
    assert len(members) == 8
    for member in members:
        assert member.gamma == pytest.approx(member.knob, abs=1e-12)
        assert torch.allclose(member.left @ member.right, member.model.transition, atol=1e-14)
        assert member.left.shape[1] == member.rank
    assert [m.half for m in members[:2]] == ["fit", "held-out"]
    with pytest.raises(ValueError, match="num_states: 7"):
        SuiteSpec(num_states=7, num_tokens=6)


def test_memory_error_decreases_with_L_for_every_prior():
    member = build_member(0, 3, 4, 0.6, 2, 1.0, seed=5, half="fit")
    config = lemma1.Lemma1Config(lengths=(1, 3, 6), num_sequences=200, positions=4, burn_in=6)
    errors = lemma1.memory_errors(member, config)
    assert errors.shape == (len(lemma1.PRIORS), 3)
    assert (errors > 0).all() and (np.diff(errors, axis=1) < 0).all()
    with pytest.raises(ValueError, match="burn_in"):
        lemma1.Lemma1Config(lengths=(1, 8), burn_in=6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_errors_are_refused_not_dropped(bad):
    """NaN > floor is False: a NaN error was silently left out (and inf would give C = 0 or inf)."""
    errors = 0.3 * np.exp(-0.7 * LENGTHS)
    errors[4] = bad
    with pytest.raises(ValueError, match=r"errors: \[-?(nan|inf)\] at indices \[4\]; expected finite values"):
        fitting.decay_fit(LENGTHS, errors)
    with pytest.raises(ValueError, match=r"errors: .*expected finite values"):
        fitting.smallest_lemma1_constant(0.5, 2, LENGTHS, errors)
    with pytest.raises(ValueError, match=r"measured: .*expected finite values"):
        fitting.smallest_scale(errors, np.ones_like(errors))
    with pytest.raises(ValueError, match=r"form: .*expected finite values"):
        fitting.smallest_scale(np.ones_like(errors), np.where(np.isnan(errors), np.inf, np.abs(errors)))


def test_fit_and_check_refuses_a_nan_constant_but_accepts_inf():
    with pytest.raises(ValueError, match=r"constants: \[nan\] at indices \[0\]; expected finite values"):
        fitting.fit_and_check([float("nan"), 0.1], ["fit", "held-out"])
    assert fitting.fit_and_check([0.2, float("inf")], ["fit", "held-out"]).held_out_failures == [1]
