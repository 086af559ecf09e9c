"""Every bound of Lemma 1 and Theorems 1 and 2 as a numeric function (their sympy forms: tests/bounds_symbolic.py).

All error terms are reported in the **l1 norm** of a difference of distributions over the ``q``
outcomes of the prediction: the p next tokens (Theorem 1, ``q = p``) or the ``p^m`` values of
the next m tokens (Theorem 2, ``q = p^m``). A bound stated in another norm is converted with
``||v||_1 <= sqrt(q) ||v||_2`` or ``||v||_1 <= q ||v||_inf`` (each conversion is named where it is
used); the functions below take that dimension as their argument ``p``.

Lemma 1 (reconstructed, docs/construction.md section 0.3)::

    E ||P(.|o_1..o_t) - P_L(.|o_{t-L+1..t})||_1 <= d exp(-gamma^4 L / C)             (lemma1_bound)

and Lemma 2 (Theorem 2) is the same form for the joint law of the next m tokens, with the m-step
coefficient ``gamma_m`` in place of gamma.

For one measured error ``e`` at one L the smallest C that makes it hold is
``C(L) = gamma^4 L / log(d / e)`` (``e < d``; no C works when ``e >= d``)          (lemma1_constant)

Generalization (least squares from N' in-context samples; the constant ``C_g`` is fitted)::

    E ||W* x - W_hat x||_1 <= C_g sqrt(q L / (lambda N'))                          (generalization_bound)

Optimization (Lemma 5, our tight form; derivation in :func:`optimization_bound`), after
``T = gd_steps`` gradient-descent steps::

    ||(W_hat - W_T) x||_1 <= sqrt(q) ||W_hat||_F sqrt(L) (1 - 1/kappa)^T             (optimization_bound)
    the paper's form, converted the same way: sqrt(q) sqrt(L) B_W exp(-T / (2 kappa))  (optimization_bound_paper)

Construction (softmax leak x amplification, :mod:`construction.leak`, a bound per output
coordinate, hence the factor q)::

    ||W_T x - TF||_1 <= q A eps,   eps = 2 sum_{k=1}^{N-1} exp(-beta (1 - cos k theta))  (construction_bound)

Network size (our construction, T = gd_steps; m = 1 is Theorem 1's network)::

    layers = (L - 1) + m + [m >= 2] + T + 1,  heads per GD / read-out layer = 2 p^m,
    width  = (p + 1)(L + m) + 4 + [m >= 2] p^m + p^m p L + p^m                     (network_counts)
           = p^2 L + (p + 1)(L + 1) + p + 4 for m = 1
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from construction import ConstructionSpec, build_layout


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name}: {value!r}; expected a number > 0")


def lemma1_bound(gamma: float, d: float, L: float, C: float) -> float:
    """``d exp(-gamma^4 L / C)`` (Lemma 1, reconstructed)."""
    _check_positive("C", C)
    return d * math.exp(-(gamma**4) * L / C)


def lemma1_constant(gamma: float, d: float, L: float, error: float) -> float:
    """``gamma^4 L / log(d / e)``: the smallest C with ``e <= d exp(-gamma^4 L / C)``; ``inf`` if ``e >= d``."""
    _check_positive("error", error)
    if error >= d:
        return math.inf
    return gamma**4 * L / math.log(d / error)


def generalization_bound(p: int, L: int, lambda_min: float, n_samples: float, C_g: float) -> float:
    """``C_g sqrt(q L / (lambda N'))`` with ``q = p`` the prediction's dimension (``p^m`` for Theorem 2);
    lambda = smallest nonzero eigenvalue of ``E[x x^T]``.

    The form: the least-squares error at x is ``(W_hat - W*) x = E^T X (X^T X)^+ x`` with E the
    residuals of the N' samples; each of the q output rows has variance about
    ``sigma_k^2 x^T (X^T X)^+ x <= sigma_k^2 ||x||_2^2 / (lambda N')``, ``||x||_2^2 = L`` and
    ``sum_k sigma_k^2 = E||y - W* x||_2^2 <= 1`` for one-hot targets; ``||v||_1 <= sqrt(q) ||v||_2``.
    C_g absorbs what this sketch leaves out (misspecification, the sample against the population
    covariance) and is fitted.
    """
    _check_positive("lambda_min", lambda_min)
    _check_positive("n_samples", n_samples)
    return C_g * math.sqrt(p * L / (lambda_min * n_samples))


def optimization_bound(p: int, L: int, weight_norm: float, kappa: float, gd_steps: int) -> float:
    """Tight Lemma 5: ``||(W_hat - W_T) x||_1 <= sqrt(p) ||W_hat||_F sqrt(L) (1 - 1/kappa)^T``, ``T = gd_steps``.

    Derivation. GD on ``(1/2N) sum_j ||y_j - W x_j||^2`` with Hessian ``H = X^T X / N`` is
    ``W_{t+1} = W_t - eta (W_t H - Y^T X / N)``. From ``W_0 = 0`` every iterate lies in the row space
    of X (each update is a combination of the ``x_j``), and so does the min-norm solution W_hat,
    which solves ``W_hat H = Y^T X / N``. Hence ``W_{t+1} - W_hat = (W_t - W_hat)(I - eta H)`` and
    ``W_T - W_hat = -W_hat (I - eta H)^T``. On the row space the eigenvalues of ``I - eta H`` with
    ``eta = 1/lambda_max`` lie in ``[0, 1 - lambda_min+/lambda_max] = [0, 1 - 1/kappa]``
    (``lambda_min+`` = smallest *nonzero* eigenvalue: the one-hot design is singular for L >= 2), so
    ``||W_T - W_hat||_F <= ||W_hat||_F (1 - 1/kappa)^T``, and with ``||x||_2 = sqrt(L)`` (L one-hot
    blocks) ``||(W_T - W_hat) x||_2 <= ||W_T - W_hat||_2 ||x||_2``. The factor ``sqrt(p)`` converts the
    prediction's 2-norm to its l1 norm (``p`` is its dimension: ``p^m`` for Theorem 2).
    """
    _check_kappa(kappa)
    return math.sqrt(p) * weight_norm * math.sqrt(L) * (1.0 - 1.0 / kappa) ** gd_steps


def optimization_bound_paper(p: int, L: int, weight_norm: float, kappa: float, gd_steps: int) -> float:
    """Paper's Lemma 5 form ``sqrt(L) B_W exp(-T / (2 kappa))`` with ``B_W = ||W_hat||_F``, ``T = gd_steps``,
    times sqrt(p) (l1)."""
    _check_kappa(kappa)
    return math.sqrt(p) * math.sqrt(L) * weight_norm * math.exp(-gd_steps / (2.0 * kappa))


def _check_kappa(kappa: float) -> None:
    if not kappa >= 1:
        raise ValueError(f"kappa: {kappa!r}; expected a condition number >= 1")


def construction_bound(spec: ConstructionSpec, num_columns: int) -> float:
    """``q * spec.error_bound(N)``, ``q = p^m``: :meth:`construction.ConstructionSpec.error_bound` bounds
    every output coordinate ``|(TF - W_T x)_k|`` (its read-out step bounds row k), so the l1 norm of
    the q-vector is at most q times it."""
    return spec.layout.target_dim * spec.error_bound(num_columns)


@dataclass(frozen=True)
class NetworkCounts:
    """Size of the network with m labels (sequential history layers; m = 1: Theorem 1's)."""

    layers: int
    heads_per_gd_layer: int
    width: int


def network_counts(p: int, L: int, gd_steps: int, m: int = 1) -> NetworkCounts:
    """``(L-1) + m + [m >= 2] + T + 1`` layers (``T = gd_steps``; the joint MLP when m >= 2),
    ``2 p^m`` heads per GD layer, width of :func:`construction.build_layout`."""
    return NetworkCounts(layers=(L - 1) + m + (m >= 2) + gd_steps + 1, heads_per_gd_layer=2 * p**m,
                         width=build_layout(p, L, m).width)


def contraction_below_paper_rate() -> bool:
    """Sympy proof that ``(1 - 1/kappa)^T <= exp(-T / (2 kappa))`` for kappa >= 1, T >= 0.

    With ``u = 1/kappa`` in (0, 1] it suffices that ``h(u) = -u/2 - log(1 - u) >= 0`` on [0, 1)
    (then ``(1-u)^T = exp(T log(1-u)) <= exp(-T u / 2)``; at u = 1 the left side is 0). ``h(0) = 0``
    and ``h'(u) = 1/(1-u) - 1/2 > 0`` on [0, 1): sympy checks both, so the tight bound is never
    above the paper's form.
    """
    u = sympy.symbols("u", real=True)
    h = -u / 2 - sympy.log(1 - u)
    starts_at_zero = sympy.simplify(h.subs(u, 0)) == 0
    slope = sympy.diff(h, u)
    never_decreasing = sympy.solveset(slope <= 0, u, sympy.Interval.Ropen(0, 1)) == sympy.S.EmptySet
    return bool(starts_at_zero and never_decreasing)
