"""Softmax leak of the position heads, the stage 1-2 error it causes, and the choice of beta.

**Per-layer leak.** A shift head (see :func:`construction.weights.shift_head`) has logits
``s_ij = beta cos(delta_ij theta)`` with offset ``delta_ij = j - i + s``. Let ``j*`` be the column
with the largest logit (``j* = i - s`` when it exists, else the nearest column). Its softmax weight
is ``1 / (1 + sum_{j != j*} exp(-(s_ij* - s_ij)))``, so the mass off the target is at most

    sum_{j != j*} exp(-(s_ij* - s_ij)).

If every ``|delta_ij| theta <= pi``, the competitors' gaps are at least ``beta (1 - cos k theta)``,
k = 1, 2, ..., each k used at most twice: for an interior query the competitors sit at offsets
``+-k`` around ``delta = 0``; for a query whose target is at offset ``delta0 != 0`` (no column
i - s) they sit on one side at ``delta0 + k`` and
``cos(a) - cos(a + b) - (1 - cos b) = 4 sin(a/2) sin(b/2) cos((a+b)/2) >= 0`` for
``a, b >= 0, a + b <= pi``. Hence, with N columns, the leak of one layer is

    eps(beta, theta, N) = 2 sum_{k=1}^{N-1} exp(-beta (1 - cos k theta))            (leak formula)
                        ~ 2 exp(-beta (1 - cos theta))       (its leading term, tight for an
                                                               interior query with both neighbours)

**Stage 1-2 error.** A copied block is a convex combination of one-hot (0/1) blocks, so a layer
copying an exact block errs by at most eps per coordinate, and a layer copying a block that already
errs by e errs by at most e + eps. Therefore, per coordinate:

* ``history.r`` (sequential): ``r eps``; doubling: ``(floor(log2 r) + 1) eps`` (layer of the copy);
* ``future.r``: ``r eps``; ``joint`` (m >= 2): ``sum_r r eps = m(m+1)/2 eps`` (ReLU is 1-Lipschitz);
* the exclusion count D of a sample: the sum of the errors of the delimiter coordinates it reads.

**End to end (first order in eps).** Let ``dx, dy, dD`` bound the errors of a covariate
coordinate, a target coordinate and D of a sample, and ``B >= ||w_{t,k}||_1`` for every GD iterate
(the mask already needs ``penalty > B + 1``, so ``B <= penalty`` is assumed). One GD step changes
the error ``Delta`` of row k by ``Delta (I - eta H_hat)`` (non-expansive for ``eta < 2/lambda_max``)
plus a forcing of 2-norm at most
``eta [(B dx + dy + penalty dD) sqrt(L) + (B + 1) sqrt(pL) dx]``; null-space directions need not
contract, so after T steps (``T = gd_steps``) ``||Delta_T|| <= T`` times that, and the read-out
adds ``sqrt(L) ||Delta_T|| + B dx``. :func:`amplification` is that bound divided by eps; the bound
itself, ``eps * A``, is ``ConstructionSpec.error_bound`` (:mod:`construction.spec`).
"""
from __future__ import annotations

import math

import numpy as np

from construction.layout import Layout


def layer_leak(beta: float, theta: float, num_columns: int) -> float:
    """Leak formula ``eps = 2 sum_{k=1}^{N-1} exp(-beta (1 - cos k theta))`` (module docstring)."""
    if not beta >= 0:
        raise ValueError(f"beta={beta!r}: expected a softmax scale >= 0")
    k = np.arange(1, num_columns)
    return float(2.0 * np.exp(-beta * (1.0 - np.cos(k * theta))).sum())


def history_error_factor(history_length: int, doubling: bool) -> int:
    """Largest number of leaky copies behind a ``history.r`` coordinate, r = 1..L-1 (0 for L = 1)."""
    if history_length == 1:
        return 0
    if doubling:
        return math.floor(math.log2(history_length - 1)) + 1
    return history_length - 1


def error_factors(layout: Layout, doubling: bool) -> dict[str, float]:
    """Stage 1-2 errors per unit eps: covariate ``x``, target ``y``, exclusion count ``D`` of a sample."""
    L, m = layout.history_length, layout.future_length
    if doubling:
        history: float = sum(math.floor(math.log2(r)) + 1 for r in range(1, L))
    else:
        history = L * (L - 1) / 2
    future = m * (m + 1) / 2
    return {"x": float(history_error_factor(L, doubling)), "y": future, "D": history + future}


def amplification(layout: Layout, doubling: bool, gd_steps: int, eta: float, penalty: float) -> float:
    """First-order bound A on ``|prediction - W_T x_test| / eps`` after ``T = gd_steps`` GD layers
    (module docstring, ``B = penalty``); it does not depend on beta or theta."""
    factors = error_factors(layout, doubling)
    L, p = layout.history_length, layout.num_tokens
    forcing = eta * (
        (penalty * factors["x"] + factors["y"] + penalty * factors["D"]) * math.sqrt(L)
        + (penalty + 1.0) * math.sqrt(p * L) * factors["x"]
    )
    return max(math.sqrt(L) * gd_steps * forcing + penalty * factors["x"], 1.0)


def choose_beta(target: float, theta: float, num_columns: int, gain: float) -> float:
    """Smallest beta (to 1e-9 relative) with ``eps(beta, theta, N) * gain <= target``.

    ``gain`` is the amplification A (:func:`amplification`, or ``ConstructionSpec.amplification``),
    so the result is the smallest beta whose construction-error bound meets ``target``. ``eps``
    decreases in beta, so the bound is inverted by bisection on ``[0, beta0]`` with
    ``beta0 = log(2 (N-1) A / target + 1) / (1 - cos theta)``, which satisfies it because every term
    of eps is at most ``exp(-beta (1 - cos theta))``.
    """
    if not target > 0:
        raise ValueError(f"target={target}: expected a positive error")
    if not 0 < theta < math.pi:
        raise ValueError(f"theta={theta!r}: expected 0 < theta < pi")
    if not num_columns >= 2:
        raise ValueError(f"num_columns={num_columns!r}: expected at least 2 columns (a leading delimiter and a token)")
    high = math.log(2.0 * max(num_columns - 1, 1) * gain / target + 1.0) / (1.0 - math.cos(theta))
    low = 0.0
    while high - low > 1e-9 * high:
        middle = 0.5 * (low + high)
        if layer_leak(middle, theta, num_columns) * gain <= target:
            high = middle
        else:
            low = middle
    return high
