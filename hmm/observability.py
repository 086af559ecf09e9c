"""The observability coefficient gamma of an emission matrix (Assumption 2 of arXiv 2506.01919).

For ``M (S, q)`` with rows summing to 1 (the emission ``O``, or the m-step emission ``O_m``)::

    gamma(M) = min { ||M^T x||_1 : sum(x) = 0, ||x||_1 = 1 },

so that ``||M^T b - M^T b'||_1 >= gamma ||b - b'||_1`` for all beliefs ``b, b'``.

Exact value (small S). The feasible set is the relative boundary of the polytope
``{sum x = 0, ||x||_1 <= 1}``; it is the union of the faces on which the sign of every ``x_i`` is
fixed. Fix a split of the states into ``P`` (``x_i >= 0``) and ``N`` (``x_i <= 0``), both non-empty;
then ``||x||_1 = 1`` with ``sum x = 0`` is the linear constraint ``sum_P x = 1/2`` and minimising
``||M^T x||_1`` is a linear program (epigraph variables ``u >= +-M^T x``). ``gamma`` is the least
optimum over the ``2^(S-1) - 1`` splits (a split and its mirror give the same face up to sign).
Cost grows as ``2^S``: :data:`EXACT_MAX_STATES` bounds it.

Certified lower bound (any S). If ``G`` satisfies ``G M^T x = x`` for every ``x`` with
``sum x = 0`` then ``||x||_1 <= ||G||_{1->1} ||M^T x||_1``, so ``gamma >= 1 / ||G||_{1->1}``
(``||G||_{1->1}`` = largest column l1 norm). We take ``G = P0 (M^T)^+`` with ``P0 = I - 11^T/S``
(valid when ``M^T`` is injective on the sum-zero subspace); when it is not, some sum-zero ``x`` has
``M^T x = 0`` and gamma = 0 exactly.

Upper bound (any S): the value at the best of many random sum-zero directions, refined by the LP on
that direction's face.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import torch
from scipy.optimize import linprog

from hmm.generators import as_generator
from hmm.model import HMM, as_tensor, check_stochastic

EXACT_MAX_STATES = 12
"""Largest S solved exactly (2^11 - 1 = 2047 linear programs, a few seconds)."""

MAX_OPERATOR_BYTES = 1 << 30
"""Largest m-step operator ``O_m`` (``S x p^m`` float64 entries) :func:`multistep_emission` builds."""

RANK_TOLERANCE = 1e-10
"""Singular values of ``M^T`` on the sum-zero subspace below this count as zero."""


class Observability(NamedTuple):
    """``lower <= gamma <= upper``; ``exact`` when both come from the face enumeration."""

    lower: float
    upper: float
    exact: bool


def _emission_matrix(emission) -> np.ndarray:
    matrix = as_tensor(emission, "emission", dtype=torch.float64)
    if matrix.ndim != 2:
        raise ValueError(f"emission: shape {tuple(matrix.shape)}; expected (S, q) for one HMM")
    check_stochastic(matrix, "emission")
    return matrix.cpu().numpy()


def _face_minimum(emission: np.ndarray, positive: np.ndarray) -> tuple[float, np.ndarray]:
    """LP on the face where ``x_i >= 0`` for ``positive[i]`` and ``x_i <= 0`` otherwise."""
    S, q = emission.shape
    # variables: x (S), u (q); minimise sum(u) with -u <= M^T x <= u
    cost = np.concatenate([np.zeros(S), np.ones(q)])
    upper_rows = np.block([[emission.T, -np.eye(q)], [-emission.T, -np.eye(q)]])
    equalities = np.vstack([
        np.concatenate([np.ones(S), np.zeros(q)]),
        np.concatenate([positive.astype(float), np.zeros(q)]),
    ])
    bounds = [(0, None) if flag else (None, 0) for flag in positive] + [(0, None)] * q
    result = linprog(cost, A_ub=upper_rows, b_ub=np.zeros(2 * q), A_eq=equalities, b_eq=[0.0, 0.5], bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"observability LP failed on face {positive.astype(int).tolist()}: {result.message}")
    return float(result.fun), result.x[:S]


def observability_exact(emission) -> float:
    """gamma by enumerating every face (see module docstring); S <= :data:`EXACT_MAX_STATES`."""
    matrix = _emission_matrix(emission)
    S = matrix.shape[0]
    if S > EXACT_MAX_STATES:
        raise ValueError(f"emission: {S} states; exact enumeration expects S <= {EXACT_MAX_STATES} (use observability_bounds)")
    if S == 1:
        raise ValueError("emission: 1 state; gamma needs S >= 2 (there is no sum-zero direction)")
    best = np.inf
    for signs in itertools.product((True, False), repeat=S - 1):
        positive = np.array((True, *signs))  # state 0 in P: each face counted once
        if positive.all():
            continue
        best = min(best, _face_minimum(matrix, positive)[0])
    return best


def observability_lower_bound(emission) -> float:
    """Certified ``gamma >= 1 / ||P0 (M^T)^+||_{1->1}``, or 0 when ``M^T`` has a sum-zero kernel."""
    matrix = _emission_matrix(emission)
    S = matrix.shape[0]
    centering = np.eye(S) - np.full((S, S), 1.0 / S)
    basis = np.linalg.svd(centering)[0][:, : S - 1]  # orthonormal basis of the sum-zero subspace
    if np.linalg.svd(matrix.T @ basis, compute_uv=False).min() <= RANK_TOLERANCE:
        return 0.0
    left_inverse = centering @ np.linalg.pinv(matrix.T)
    return 1.0 / np.abs(left_inverse).sum(axis=0).max()


def observability_upper_bound(emission, num_directions: int = 4096, seed=0) -> float:
    """``min ||M^T x||_1`` over random sum-zero unit directions, refined by the LP of the best one's face."""
    matrix = _emission_matrix(emission)
    S = matrix.shape[0]
    rng = as_generator(seed)
    directions = rng.standard_normal((num_directions, S))
    directions -= directions.mean(axis=1, keepdims=True)
    directions /= np.abs(directions).sum(axis=1, keepdims=True)
    values = np.abs(directions @ matrix).sum(axis=1)
    best = directions[values.argmin()]
    positive = best >= 0
    if positive.all() or not positive.any():
        return float(values.min())
    return min(float(values.min()), _face_minimum(matrix, positive)[0])


def observability(emission) -> Observability:
    """Exact gamma for S <= :data:`EXACT_MAX_STATES`, else certified lower and sampled upper bounds."""
    matrix = _emission_matrix(emission)
    if matrix.shape[0] <= EXACT_MAX_STATES:
        value = observability_exact(matrix)
        return Observability(value, value, True)
    return Observability(observability_lower_bound(matrix), observability_upper_bound(matrix), False)


def multistep_emission(model: HMM, m: int) -> torch.Tensor:
    """``O_m (S, p^m)``: ``O_m[s, (o_1..o_m)] = P(o_t..o_{t+m-1} = o_1..o_m | s_t = s)``.

    Recursion ``O_1 = O``, ``O_m[s, (o, rest)] = O(s, o) sum_{s'} T(s, s') O_{m-1}[s', rest]``;
    the token tuple is flattened with ``o_1`` most significant. Single HMM only; an operator of
    more than :data:`MAX_OPERATOR_BYTES` is refused, with its size.
    """
    if model.batch_shape != ():
        raise ValueError(f"model: batch shape {tuple(model.batch_shape)}; expected a single HMM")
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"m: {m!r}; expected an integer >= 1")
    S, p = model.num_states, model.num_tokens
    size = S * p**m * model.emission.element_size()
    if size > MAX_OPERATOR_BYTES:
        raise ValueError(f"m: {m}; O_m has S x p^m = {S} x {p}^{m} = {S * p**m:.3g} entries ({size / 2**30:.3g} GiB); "
                         f"expected at most {MAX_OPERATOR_BYTES / 2**30:.3g} GiB (a smaller m)")
    operator = model.emission
    for _ in range(m - 1):
        ahead = model.transition @ operator  # (S, p^(k))
        operator = (model.emission[:, :, None] * ahead[:, None, :]).reshape(model.num_states, -1)
    return operator
