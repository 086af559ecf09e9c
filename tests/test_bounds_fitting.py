"""Fitted-constant machinery on planted data, the suite generator, and Lemma 1's measurement."""
import numpy as np
import pytest

from bounds import fitting, formulas, lemma1
from bounds.suites import SuiteSpec, build_member, build_suite
from rounding import gamma as summation_gamma
from rounding import least_squares_rounding, lemma1_inversion_rounding, lp_value_accuracy, unit_roundoff

LENGTHS = np.arange(1, 13)


def planted_errors(gamma: float, d: int, C: float, seed: int) -> np.ndarray:
    """``d exp(-gamma^4 L / C)`` times factors in (0.05, 1], exactly 1 at one random L."""
    rng = np.random.default_rng(seed)
    slack = rng.uniform(0.05, 1.0, LENGTHS.size)
    slack[rng.integers(LENGTHS.size)] = 1.0
    return np.array([formulas.lemma1_bound(gamma, d, L, C) for L in LENGTHS]) * slack


@pytest.mark.parametrize("seed", range(5))
def test_smallest_constant_recovers_the_planted_C(seed):
    """The point with factor 1 inverts to C within :func:`rounding.lemma1_inversion_rounding` of
    its exponent ``gamma^4 L / C`` (largest at the smallest L); a point with a factor below 1, at
    most ``1 - u``, inverts to at most ``C (1 - u / exponent)`` exactly, which absorbs the extra
    rounding of its product with the factor."""
    gamma, d, C = 0.4 + 0.1 * seed, 2 + seed % 3, 0.05 * (seed + 1)
    errors = planted_errors(gamma, d, C, seed)
    rounding = lemma1_inversion_rounding(gamma**4 * LENGTHS.min() / C)
    assert fitting.smallest_lemma1_constant(gamma, d, LENGTHS, errors) == pytest.approx(C, rel=rounding, abs=0)
    # One point pushed above the bound needs a larger C, one pushed below does not change it.
    worse = errors.copy()
    worse[3] = formulas.lemma1_bound(gamma, d, LENGTHS[3], C) * 1.5
    assert fitting.smallest_lemma1_constant(gamma, d, LENGTHS, worse) > C * (1 + rounding)


def decay_fit_rounding(lengths: np.ndarray, errors: np.ndarray, rate: float, intercept: float) -> np.ndarray:
    """Bounds on ``|rate - r|`` and ``|intercept - a|`` for ``numpy.polyfit``'s line through
    ``(L, log err)``, where ``err = fl(e^a) exp(-r L)`` was computed in float64 as ``e^a * exp(-r * L)``.

    Data: ``-r L`` rounds once (``u r L`` absolute in the exponent, relative in the exponential),
    exp and log are within 4 ulps (numpy/numpy#23399), the product once, so ``log err`` is within
    ``delta = u r L + 8u + u + 8u |log err|`` of the exact line. polyfit divides the columns of
    ``X = [L, 1]`` by their norms (A = X D^-1, each entry rounded once) and solves ``A z = log err``
    with an SVD (cutoff ``n 2^-52 sigma_1``, as :func:`rounding.least_squares_rounding` assumes),
    then ``c = z / D`` with the same D, so D's own rounding cancels. ``z`` then errs by the solver's
    rounding, plus ``||A^+|| ||delta||`` from the data, plus ``||A^+|| u ||A||_F ||z||`` from A's
    entries; each coefficient divides that by its column's norm and adds u of itself."""
    u = unit_roundoff()
    log_errors = np.log(errors)
    data = u * rate * lengths + 9 * u + 8 * u * np.abs(log_errors)
    features = np.stack([lengths, np.ones_like(lengths)], axis=1)
    scale = np.sqrt((features * features).sum(axis=0))
    scaled = features / scale
    scaled_solution = np.array([-rate, intercept]) * scale
    pseudo_inverse_norm = 1 / np.linalg.svd(scaled, compute_uv=False)[-1]
    solution_error = (least_squares_rounding(scaled, log_errors[:, None], scaled_solution[None, :])
                      + pseudo_inverse_norm * (np.linalg.norm(data) + u * np.linalg.norm(scaled) * np.linalg.norm(scaled_solution)))
    return solution_error / scale + u * np.abs([rate, intercept])


def test_decay_fit_recovers_a_planted_rate_and_ignores_rounding():
    errors = 0.3 * np.exp(-0.7 * LENGTHS)
    errors[-3:] = 1e-16  # below the floor: rounding, left out
    rate, intercept = fitting.decay_fit(LENGTHS, errors)
    rate_bound, intercept_bound = decay_fit_rounding(LENGTHS[:-3], errors[:-3], rate, intercept)
    assert abs(rate - 0.7) <= rate_bound
    # np.log(0.3) is itself within 4 ulps of log(fl(0.3)), the planted intercept.
    assert abs(intercept - np.log(0.3)) <= intercept_bound + 8 * unit_roundoff() * abs(np.log(0.3))
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
        # gamma is the knob exactly for S <= p (suites module docstring); measured by HiGHS's LPs.
        assert member.gamma == pytest.approx(member.knob, abs=lp_value_accuracy(member.model.num_states, member.model.num_tokens))
        # The transition is left @ right, formed once by the generator: a sum of `rank` nonnegative
        # products, within gamma_rank of |left| @ |right| in any order, so the two are within twice it.
        rounding = 2 * summation_gamma(member.rank) * (member.left.abs() @ member.right.abs())
        assert ((member.left @ member.right - member.model.transition).abs() <= rounding).all()
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
