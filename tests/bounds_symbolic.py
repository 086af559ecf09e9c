"""The bounds of bounds.formulas restated in sympy, the oracle tests/test_bounds_formulas.py checks them against.

Symbol names are those of the docs (docs/bounds.md section 5): ``T`` is the number of
gradient-descent steps (``gd_steps`` in the code), ``Nprime`` the number of regression samples N'.
"""
import sympy


def _symbolic_forms() -> dict[str, sympy.Expr]:
    """The formulas of the bounds.formulas docstring as sympy expressions (symbol names as in :func:`symbolic_value`)."""
    gamma, d, L, C, e = sympy.symbols("gamma d L C e", positive=True)
    p, n_samples, lam, C_g = sympy.symbols("p Nprime lambda C_g", positive=True)
    kappa, T, B_W = sympy.symbols("kappa T B_W", positive=True)
    beta, theta, N, A, k = sympy.symbols("beta theta N A k", positive=True)
    m = sympy.symbols("m", positive=True, integer=True)
    joint = sympy.Piecewise((1, m >= 2), (0, True))  # the joint one-hot MLP and its slot exist for m >= 2
    return {
        "lemma1_bound": d * sympy.exp(-(gamma**4) * L / C),
        "lemma1_constant": gamma**4 * L / sympy.log(d / e),
        "generalization_bound": C_g * sympy.sqrt(p * L / (lam * n_samples)),
        "optimization_bound": sympy.sqrt(p) * B_W * sympy.sqrt(L) * (1 - 1 / kappa) ** T,
        "optimization_bound_paper": sympy.sqrt(p) * sympy.sqrt(L) * B_W * sympy.exp(-T / (2 * kappa)),
        "construction_bound": p * A * 2 * sympy.Sum(sympy.exp(-beta * (1 - sympy.cos(k * theta))), (k, 1, N - 1)),
        "layers": (L - 1) + m + joint + T + 1,
        "heads_per_gd_layer": 2 * p**m,
        "width": (p + 1) * (L + m) + 4 + joint * p**m + p**m * p * L + p**m,
    }


SYMBOLIC = _symbolic_forms()
"""name -> sympy expression of every formula in the bounds.formulas docstring."""


DIGITS = 30
"""Working precision of :func:`symbolic_value`, in decimal digits."""


def symbolic_value(name: str, **values: float) -> float:
    """Evaluate ``SYMBOLIC[name]`` at ``values`` (keyword = symbol name, e.g. ``gamma=0.5, Nprime=40``)
    to 30 digits, then round to float64: within u of the exact value at those inputs. A float
    enters as the number it stores, carried at 30 digits; as a sympy Float of its own 53 bits it
    would make sympy evaluate what it meets (``log(d / e)``) at that precision, a float64
    computation of its own."""
    if name not in SYMBOLIC:
        raise ValueError(f"name: {name!r}; expected one of {sorted(SYMBOLIC)}")
    expression = SYMBOLIC[name]
    missing = sorted(symbol.name for symbol in expression.free_symbols if symbol.name not in values)
    if missing:
        raise ValueError(f"values: {sorted(values)}; expected a value for every symbol of {name}, missing {missing}")
    substitutions = {symbol: sympy.Float(float(values[symbol.name]), DIGITS) if isinstance(values[symbol.name], float)
                     else values[symbol.name] for symbol in expression.free_symbols}
    return float(expression.subs(substitutions).doit().evalf(DIGITS))
