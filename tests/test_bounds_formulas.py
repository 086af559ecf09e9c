"""Every bound of bounds.formulas: sympy form == numeric function; Lemma 5's tight form holds and is attained."""
import math

import numpy as np
import pytest

from bounds import formulas
from bounds_symbolic import symbolic_value
from construction import ConstructionSpec, amplification, build_layout, build_network, reference
from rounding import gamma, unit_roundoff
from test_construction_helpers import hmm_prompt

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
        # log(d / e) = x: an error of e (relative) or of d / e (u) is an absolute error of the log,
        # relative to x; the log's own ulp; the numerator g^4 L, gamma_3.
        own = u / exponent + 2 * u
        inverted = (bound_rounding + u) / exponent + 2 * u
        assert constant == pytest.approx(C, rel=gamma(4) + inverted / (1 - inverted), abs=0)
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
        # float64 computes 1 - cos(k theta) to an absolute 2^-53, so each exponent beta (1 - cos)
        # carries an absolute error of about beta 2^-53: that is the agreement to expect.
        assert numeric == pytest.approx(symbolic, rel=1e-13 + 4 * beta * unit_roundoff())


@pytest.mark.parametrize("p, L, T", [(2, 1, 1), (4, 3, 10), (6, 5, 40)])
def test_network_counts_match_the_built_network_and_the_symbolic_width(p, L, T):
    counts = formulas.network_counts(p, L, T)
    network = build_network(ConstructionSpec(p, L, T, eta=0.1, beta=1e3, theta=0.01))
    assert counts.layers == len(network.layers) == symbolic_value("layers", L=L, T=T)
    gd_heads = {len(layer.heads) for layer in network.layers if layer.name.startswith("gd.")}
    assert gd_heads == {counts.heads_per_gd_layer} and counts.heads_per_gd_layer == symbolic_value("heads_per_gd_layer", p=p)
    assert counts.width == network.layout.width == symbolic_value("width", p=p, L=L)


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
    tokens = hmm_prompt(p, [12] * 6, 8, seed=seed)
    X, Y, x_test = reference.regression_problem(tokens, p, L)
    N = len(tokens) + 1
    eigenvalues = np.linalg.eigvalsh(reference.hessian(X, N))
    positive = eigenvalues[eigenvalues > 1e-10 * eigenvalues[-1]]
    return X, Y, x_test, N, 1.0 / eigenvalues[-1], eigenvalues[-1] / positive[0]


@pytest.mark.parametrize("seed", range(6))
def test_tight_optimization_bound_holds_at_every_step_and_is_attained(seed):
    p, L, T = 3, 3, 150
    X, Y, x_test, N, eta, kappa = _one_hot_problem(seed, p, L)
    iterates = reference.gd_iterates(X, Y, eta, T, N)
    W_hat = reference.min_norm_solution(X, Y)
    norm = np.linalg.norm(W_hat)
    ratios = []
    for t in range(T + 1):
        gap = np.abs((W_hat - iterates[t]) @ x_test).sum()
        assert gap <= formulas.optimization_bound(p, L, norm, kappa, t) * (1 + 1e-12) + 1e-14
        ratios.append(np.linalg.norm(iterates[t] - W_hat) / (norm * (1 - 1 / kappa) ** t))
    # The Frobenius contraction the bound rests on is attained in order of magnitude at every
    # step before rounding (the slowest eigendirection of W_hat carries at least 1% of its norm here).
    resolved = [r for t, r in enumerate(ratios) if norm * (1 - 1 / kappa) ** t > 1e-10]
    assert max(resolved) <= 1 + 1e-12
    assert min(resolved) >= 1e-2
