"""Every bound of bounds.formulas: sympy form == numeric function; Lemma 5's tight form holds and is attained."""
import math

import numpy as np
import pytest

from bounds import formulas, theorem1
from bounds_symbolic import symbolic_value
from construction import ConstructionSpec, amplification, build_layout, build_network, reference
from rounding import gamma, leak_rounding, least_squares_rounding, lemma1_inversion_rounding, unit_roundoff
from test_construction_helpers import hmm_prompt, pass_rounding

RNG = np.random.default_rng(7)


def test_lemma1_forms_agree_and_invert_each_other():
    """sympy evaluates each form to 30 digits at the same float inputs (within u once rounded to
    float64, :func:`symbolic_value`), so the tolerance is that u plus the float64 form's own
    rounding: the power (within 1 ulp), the products and quotients (u each) and the exponential or
    logarithm (within 1 ulp, and amplifying its argument's error as below)."""
    u = unit_roundoff()
    for g, d, L, C in RNG.uniform([0.1, 1, 1, 0.05], [1, 6, 30, 3], size=(20, 4)):
        exponent = g**4 * L / C
        bound = formulas.lemma1_bound(g, d, L, C)
        # The exponent x errs by gamma_4 relative, which exp turns into |x| gamma_4; exp, times d.
        bound_rounding = exponent * gamma(4) + gamma(3)
        assert bound == pytest.approx(symbolic_value("lemma1_bound", gamma=g, d=d, L=L, C=C), rel=bound_rounding + u, abs=0)
        constant = formulas.lemma1_constant(g, d, L, bound)
        # log(d / e) at the stored e: the quotient's u, absolute in the log and relative to x; the
        # log's own ulp; the numerator g^4 L and the quotient, gamma_5 with the float rounding.
        own = u / exponent + 2 * u
        assert constant == pytest.approx(C, rel=lemma1_inversion_rounding(exponent), abs=0)
        assert constant == pytest.approx(symbolic_value("lemma1_constant", gamma=g, d=d, L=L, e=bound),
                                         rel=gamma(5) + own, abs=0)
    assert formulas.lemma1_constant(0.5, 2, 3, 2.0) == math.inf


def test_generalization_and_optimization_forms_agree():
    """Each float64 form against sympy's 30-digit value at the same inputs (see above): a square
    root halves its argument's relative error; ``1 - 1/kappa`` errs by ``u kappa / (kappa - 1)``
    relative, which the T-th power multiplies by T; ``exp(-T / 2 kappa)`` by ``u T / 2 kappa``."""
    u = unit_roundoff()
    for p, L, lam, n, C_g, norm, kappa, T in RNG.uniform([2, 1, 0.01, 5, 0.1, 0.1, 1, 0], [8, 6, 1, 500, 3, 5, 200, 300], size=(20, 8)):
        p, L, T = int(p), int(L), int(T)
        assert formulas.generalization_bound(p, L, lam, n, C_g) == pytest.approx(
            symbolic_value("generalization_bound", p=p, L=L, **{"lambda": lam}, Nprime=n, C_g=C_g), rel=gamma(4), abs=0
        )
        tight = formulas.optimization_bound(p, L, norm, kappa, T)
        paper = formulas.optimization_bound_paper(p, L, norm, kappa, T)
        contraction = math.expm1(T * u * kappa / (kappa - 1)) + gamma(8)
        assert tight == pytest.approx(symbolic_value("optimization_bound", p=p, L=L, B_W=norm, kappa=kappa, T=T),
                                      rel=contraction, abs=0)
        assert paper == pytest.approx(symbolic_value("optimization_bound_paper", p=p, L=L, B_W=norm, kappa=kappa, T=T),
                                      rel=u * T / (2 * kappa) + gamma(8), abs=0)
        assert tight <= paper


def test_construction_bound_is_p_times_the_leak_sum_times_the_amplification():
    layout = build_layout(4, 3)
    for beta, N in [(200.0, 30), (5e3, 120), (4e4, 400)]:
        theta = math.pi / (N + 1)
        A = amplification(layout, False, 10, 0.3, 120.0)
        numeric = formulas.construction_bound(ConstructionSpec(4, 3, 10, 0.3, beta, theta, penalty=120.0), N)
        symbolic = symbolic_value("construction_bound", p=4, A=A, beta=beta, theta=theta, N=N)
        # sympy's value is within u of the exact one at the stored inputs; numpy's leak within
        # leak_rounding (4-ulp cos and exp), and the products with A and p round once each.
        relative = leak_rounding(beta, theta, N, function_ulps=4) + 3 * unit_roundoff()
        assert numeric == pytest.approx(symbolic, rel=relative, abs=0)


@pytest.mark.parametrize("p, L, T, m", [(2, 1, 1, 1), (4, 3, 10, 1), (6, 5, 40, 1), (2, 3, 4, 2), (3, 2, 3, 3)])
def test_network_counts_match_the_built_network_and_the_symbolic_width(p, L, T, m):
    counts = formulas.network_counts(p, L, T, m)
    network = build_network(ConstructionSpec(p, L, T, eta=0.1, beta=1e3, theta=0.01, future_length=m))
    assert counts.layers == len(network.layers) == symbolic_value("layers", L=L, T=T, m=m)
    gd_heads = {len(layer.heads) for layer in network.layers if layer.name.startswith("gd.")}
    assert gd_heads == {counts.heads_per_gd_layer}
    assert counts.heads_per_gd_layer == symbolic_value("heads_per_gd_layer", p=p, m=m)
    assert counts.width == network.layout.width == symbolic_value("width", p=p, L=L, m=m)


def test_sympy_proves_the_tight_rate_below_the_paper_rate():
    assert formulas.contraction_below_paper_rate()


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="kappa: 0.5"):
        formulas.optimization_bound(3, 2, 1.0, 0.5, 4)
    with pytest.raises(ValueError, match="n_samples: 0"):
        formulas.generalization_bound(3, 2, 0.1, 0, 1.0)
    with pytest.raises(ValueError, match="missing \\['gamma'\\]"):
        symbolic_value("lemma1_bound", d=2, L=3, C=1)


def _one_hot_problem(seed: int, p: int, L: int):
    """A prompt's regression problem with GD's step ``1 / lambda_max`` and ``kappa`` of its Hessian,
    both from :func:`bounds.theorem1.spectrum` (the smallest nonzero eigenvalue, as the report takes it)."""
    tokens = hmm_prompt(p, [12] * 6, 8, seed=seed)
    X, Y, x_test = reference.regression_problem(tokens, p, L)
    N = len(tokens) + 1
    lambda_max, lambda_min = theorem1.spectrum(reference.hessian(X, N))
    return tokens, X, Y, x_test, N, 1.0 / lambda_max, lambda_max / lambda_min


def contraction_rounding(p: int, L: int) -> float:
    """Bound on ``c - (1 - 1/kappa_hat)``, where ``c = 1 - eta_hat lambda_min`` is the contraction of
    exact GD with the computed step ``eta_hat = 1 / lambda_max_hat`` on the row space, for the
    computed ``kappa_hat`` of the Hessian ``H = X^T X / N`` (n = pL): ``(n + sqrt(n) + 3) u``.

    ``X^T X`` counts co-occurrences, integers formed exactly; dividing by N rounds each entry once,
    a perturbation of at most ``u ||H||_F <= u sqrt(n) ||H||_2``. ``eigvalsh`` returns the eigenvalues
    of a matrix within ``p(n) u ||H||_2`` of its input, ``p(n)`` a modestly growing function of n
    (LAPACK Users' Guide, error bounds for the symmetric eigenproblem), taken as n. By Weyl's
    inequality ``lambda_min`` is then within ``(n + sqrt(n)) u lambda_max`` of the computed one,
    which ``eta_hat`` turns into ``(n + sqrt(n)) u``; ``kappa_hat``, ``1 / kappa_hat`` and
    ``1 - 1/kappa_hat`` round once each.
    """
    n = p * L
    return (n + math.sqrt(n) + 3) * unit_roundoff()


@pytest.mark.parametrize("seed", range(6))
def test_tight_optimization_bound_holds_at_every_step_and_is_attained(seed):
    """Lemma 5's tight bound holds at every step up to rounding, derived term by term: exact GD with
    the computed step contracts by ``c <= c_hat + delta`` (:func:`contraction_rounding`), so
    ``c^t <= c_hat^t exp(t delta / c_hat)``; ``||W_hat||_F`` is within ``lsq`` (:func:`rounding.least_squares_rounding`)
    of the computed norm, and the bound's own float form adds ``gamma_7``. The computed gap adds the
    iterates' rounding ``||Delta W_t||_F`` (:func:`pass_rounding`, which bounds the reference GD too),
    ``lsq`` and, for ``(W_hat - W_t) x`` and its l1 norm, ``gamma_{L+p+1}`` of its terms' magnitudes."""
    p, L, T = 3, 3, 150
    tokens, X, Y, x_test, N, eta, kappa = _one_hot_problem(seed, p, L)
    iterates = reference.gd_iterates(X, Y, eta, T, N)
    W_hat = reference.min_norm_solution(X, Y)
    norm = np.linalg.norm(W_hat)
    lsq = least_squares_rounding(X, Y, W_hat)
    # pass_rounding reads p, L, T and eta only; beta and theta play no part in it.
    iterate_rounding, _ = pass_rounding(tokens, ConstructionSpec(p, L, T, eta=eta, beta=1.0, theta=0.1))
    contraction = 1 - 1 / kappa
    steps = np.arange(T + 1)
    relative = (1 + np.expm1(steps * contraction_rounding(p, L) / contraction)) * (1 + lsq / norm) * (1 + gamma(7)) - 1
    ratios, allowed, rounding_share = [], [], []
    for t in steps:
        difference = W_hat - iterates[t]
        gap = np.abs(difference @ x_test).sum()
        additive = math.sqrt(p * L) * (2 * lsq + iterate_rounding[t]) + gamma(L + p + 1) * (np.abs(difference) @ x_test).sum()
        assert gap <= formulas.optimization_bound(p, L, norm, kappa, t) * (1 + relative[t]) + additive
        denominator = norm * contraction**t
        ratios.append(np.linalg.norm(difference) / denominator)
        # ||W_t - W_hat||_F <= ||W_hat||_F c^t in exact arithmetic; the norm adds gamma_{p pL + 3}.
        allowed.append((1 + relative[t]) * (1 + gamma(p * p * L + 3)) + (lsq + iterate_rounding[t]) / denominator)
        rounding_share.append((lsq + iterate_rounding[t]) / denominator)
    assert all(ratio <= bound for ratio, bound in zip(ratios, allowed))
    # The Frobenius contraction the bound rests on is attained in order of magnitude at every step
    # where rounding moves the ratio by at most 1e-3, a tenth of the floor checked (the slowest
    # eigendirection of W_hat carries at least 1% of its norm here).
    resolved = [ratio for ratio, share in zip(ratios, rounding_share) if share <= 1e-3]
    assert len(resolved) > T // 10
    assert min(resolved) >= 1e-2
