"""Unit roundoff and the error constants the tests derive their rounding tolerances from.

An operation on floating-point numbers returns the exact result times ``1 + d`` with ``|d| <= u``,
the unit roundoff of its format (``2^-24`` for float32, ``2^-53`` for float64); a sum of n terms,
in any order, then errs by at most ``gamma_{n-1}`` times the sum of the terms' magnitudes, with
``gamma_n = n u / (1 - n u)`` (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
Lemma 3.1 and eq. 3.5). Two implementations of one function that sum in different orders each
stay within that bound of the exact value, so they differ by at most twice it. One constant is
not rounding but a solver's stopping rule: :func:`lp_value_accuracy`, for the linear programs of
:mod:`hmm.observability`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from empirical.training.model import RoFormerConfig

if TYPE_CHECKING:
    from empirical.training.train import TrainConfig


def unit_roundoff(dtype: torch.dtype = torch.float64) -> float:
    """``u``: half the distance from 1 to the next number of ``dtype``."""
    return torch.finfo(dtype).eps / 2


def gamma(n: int, dtype: torch.dtype = torch.float64) -> float:
    """``gamma_n = n u / (1 - n u)``: a sum of n products errs by at most ``gamma_n`` times the sum
    of the products' magnitudes (Higham, Lemma 3.1)."""
    u = unit_roundoff(dtype)
    if not n * u < 1:
        raise ValueError(f"n: {n!r}; expected n u < 1 (u = {u:.3g}), where gamma_n is finite")
    return n * u / (1 - n * u)


def forward_rounding(num_states: int, length: int, log_likelihood: float) -> float:
    """First-order bound on the float64 rounding error of the log-likelihood ``log p`` of ``length``
    tokens from a forward pass over ``num_states`` states, scaled (ours, hmmlearn's ``scaling``)
    or in log space (hmmlearn's ``log``): ``T (S + 3) u + 3 T u |log p|`` (Higham, Lemma 3.1).

    Scaled: a step multiplies the normalised belief by an S x S matrix and an emission column, all
    nonnegative, and divides by their sum ``c_t``. Every entry of the unnormalised path so gains a
    relative error of at most ``gamma_S + 3u ~ (S + 3) u`` per step, which ``log p`` inherits
    absolutely; ``log p = sum_t log c_t`` adds ``u |log c_t|`` per logarithm and ``gamma_T
    sum_t |log c_t|`` for the sum, where ``sum_t |log c_t| = |log p|`` (every ``c_t <= 1``).
    Log space: a step is a log-sum-exp of S terms, within ``(S + 3) u`` of the exact one plus u
    times the magnitudes of the log-probabilities it adds, at most about ``|log p|`` each.
    Two implementations then differ by at most twice the bound.
    """
    return length * (num_states + 3) * unit_roundoff() + 3 * gamma(length) * abs(log_likelihood)


def row_sum_deviation(stochastic: torch.Tensor) -> float:
    """Largest ``|sum of a row - 1|`` of a stored stochastic matrix (or vector), plus
    ``gamma_n`` for computing the sums of its ``n`` nonnegative entries: how far from 1 the rows
    of the exact stored numbers can be."""
    return (stochastic.sum(-1) - 1).abs().max().item() + gamma(stochastic.shape[-1])


def filtering_rounding(num_states: int, steps: int, dtype: torch.dtype = torch.float64) -> float:
    """Entrywise relative rounding bound on the filtered belief of :func:`hmm.filter_beliefs`
    (computed in ``dtype``) after ``steps`` tokens: ``2 gamma_{steps (S + 2)} + gamma_S``.

    Every quantity of the recursion is a sum of nonnegative products, so each rounding is relative
    to the entry it lands in. A step multiplies the predicted belief by the likelihoods (u per
    entry), divides it by its sum (u per entry; the sum's own error is one factor common to every
    entry) and multiplies it by the transition (``gamma_S`` per entry). The computed belief is
    therefore ``c alpha (1 + theta)`` for the exact forward vector ``alpha``, some scalar ``c`` and
    ``|theta| <= rho = gamma_{steps (S + 2)}`` entrywise, and it sums to ``1 + eta``, ``|eta| <=
    u + gamma_{S-1} <= gamma_S`` (the division's rounding over the sum's). Against the exact
    belief ``alpha / sum(alpha)`` it errs by ``(1 + eta)(1 + theta_i) / (1 + mean theta) - 1``:
    at most ``2 rho + gamma_S`` relative, to first order.
    """
    return 2 * gamma(steps * (num_states + 2), dtype) + gamma(num_states, dtype)


def predictive_rounding(num_states: int, steps: int, dtype: torch.dtype = torch.float64) -> float:
    """Entrywise relative rounding bound on the next-token predictive of :func:`hmm.filter_beliefs`
    (computed in ``dtype``) after ``steps`` tokens: the belief's (:func:`filtering_rounding`) plus
    ``2 gamma_S``, for ``T O`` (formed once, sums of S nonnegative products) and the belief's product
    with it."""
    return filtering_rounding(num_states, steps, dtype) + 2 * gamma(num_states, dtype)


def enumeration_rounding(num_states: int, length: int) -> float:
    """Relative rounding bound on an entry of ``hmm_strategies.enumerate_joint`` over ``length``
    tokens and on their sum (``enumerate_sequence_probability``): ``gamma_{2 length + S^(length-1)
    + S - 4}``.

    Each path's probability is a product of ``2 length - 1`` nonnegative factors (``2 length - 2``
    roundings); entry s adds the ``S^(length-1)`` paths that end in s one after another, the sum
    adds the S entries: terms of one sign, so the relative errors add (Higham, Lemmas 3.1, 3.3).
    """
    return gamma(2 * length - 2 + num_states ** (length - 1) - 1 + num_states - 1)


def mixture_rounding(num_states: int, num_tasks: int, tokens: int, log_weight_range: float) -> float:
    """Entrywise relative rounding bound on the float64 Bayes mixture predictive after ``tokens``
    tokens, as :func:`hmm.bayes_predictive` computes it or task by task, when every task's log
    prior plus log-likelihood of the tokens has magnitude at most ``log_weight_range``: ``2 omega +
    predictive_rounding(S, tokens) + 2 gamma_{4K}``. It bounds the decoders too, which round less.

    A task's log-weight, its log prior plus a sum of at most ``tokens`` log normalisers, is within
    ``forward_rounding(S, tokens, range) + gamma_{tokens+1} range`` of the exact value; its weight
    ``exp(lw - max)`` errs relatively by that plus ``3 u range + 2 u`` (the difference, of
    magnitude at most ``2 range``, rounds once, the exponential once; the maximum is a factor common
    to every weight): ``omega``. The predictive is a ratio of two sums over the K tasks with the same
    weights, so their errors enter twice; each task's predictive adds its own bound
    (:func:`predictive_rounding`); each sum over the tasks, its chunks merged by rescaling (at most
    4 roundings a task), ``gamma_{4K}``.
    """
    u = unit_roundoff()
    omega = (forward_rounding(num_states, tokens, log_weight_range) + gamma(tokens + 1) * log_weight_range
             + 3 * u * log_weight_range + 2 * u)
    return 2 * omega + predictive_rounding(num_states, tokens) + 2 * gamma(4 * num_tasks)


def lemma1_inversion_rounding(exponent: float) -> float:
    """Relative bound on ``|lemma1_constant(g, d, L, lemma1_bound(g, d, L, C)) - C| / C`` in float64,
    where ``exponent = g^4 L / C``, the exponent of the bound (:mod:`bounds.formulas`).

    The exponent errs by ``gamma_4`` relative (the power within 1 ulp, a product, a quotient), which
    the exponential turns into ``exponent gamma_4`` absolute; exp (1 ulp) and the product with d add
    ``gamma_3``. ``log(d / e)`` equals the exponent in exact arithmetic, so an error of e (relative)
    or of ``d / e`` (u) is an absolute error of the log, relative to the exponent, and the log adds
    its own ulp (2u); the numerator ``g^4 L`` and the quotient add ``gamma_4``.
    """
    u = unit_roundoff()
    bound_rounding = exponent * gamma(4) + gamma(3)
    inverted = (bound_rounding + u) / exponent + 2 * u
    return gamma(4) + inverted / (1 - inverted)


def leak_rounding(beta: float, theta: float, num_columns: int, function_ulps: float) -> float:
    """Relative bound on a float64 evaluation of the leak ``eps = 2 sum_{k=1}^{N-1} exp(-beta (1 - cos k theta))``
    (:func:`construction.leak.layer_leak`) against its exact value at the stored ``beta, theta``,
    when its cosines and exponentials are within ``function_ulps`` ulps (4 for numpy's vectorised
    float64 functions, numpy/numpy#23399; 1 for the C library's).

    Term k: ``k theta`` rounds (``u k theta``, which moves the cosine by ``|sin k theta|`` times it);
    the cosine, below 1 in magnitude where an ulp is at most u, errs by ``function_ulps u``; ``1 - cos``
    rounds once (``u a_k / beta``), the product with beta once (``u a_k``), so the exponent
    ``a_k = beta (1 - cos k theta)`` errs by ``beta u (function_ulps + k theta |sin k theta|) + 2 u a_k``
    absolute, which is the term's relative error, plus ``2 function_ulps u`` for the exponential.
    The terms are positive, so the sum's relative error is at most the largest term's plus
    ``gamma_{N-2}`` for adding them (the factor 2 is exact).
    """
    u = unit_roundoff()
    angles = np.arange(1, num_columns) * theta
    exponents = beta * (1 - np.cos(angles))
    terms = beta * u * (function_ulps + angles * np.abs(np.sin(angles))) + 2 * u * exponents + 2 * function_ulps * u
    return float(terms.max()) + gamma(num_columns - 2)


HIGHS_FEASIBILITY_TOLERANCE = 1e-7
"""Primal and dual feasibility tolerance of scipy's ``linprog(method="highs")`` (its default)."""


def lp_value_accuracy(num_states: int, num_tokens: int) -> float:
    """Bound on ``|value - gamma|`` for :func:`hmm.observability.observability_exact` (S states, q tokens), whose value
    is the least of the face LPs HiGHS solves: ``tol (4S + 2q + 7)``, ``tol`` its feasibility tolerance.

    Not rounding: HiGHS reports an optimum once the primal and dual infeasibilities of its basic
    solution are within ``tol``. Such a pair is optimal for the LP with right-hand sides and bounds
    moved by at most ``tol`` and costs by at most ``tol``; the reported ``c^T x`` is then within
    ``tol`` times the l1 mass of the duals plus twice that of the primal of the face's optimum
    (LP sensitivity, first order), and the least over the faces within the same of gamma.
    Primal: ``||x||_1 = 1`` and ``sum u = ||M^T x||_1 <= 1``. Duals: each epigraph pair sums to at most
    1 and so does the reduced cost of ``u_j`` (the dual row of ``u_j``), 2q in all; the face row's is
    ``2 gamma <= 2`` (the dual objective is half of it); the sum-zero row's at most 1 (the dual row of
    a nonzero ``x_i`` outside the face's positive part reads ``M_i w + mu = 0`` with ``|w_j| <= 1``
    and M row-stochastic); every state's reduced cost at most 4.
    """
    return HIGHS_FEASIBILITY_TOLERANCE * (4 * num_states + 2 * num_tokens + 7)


def least_squares_rounding(features, targets, solution) -> float:
    """Bound on ``||W_hat - W+||_F`` for a float64 minimum-norm least-squares solution
    ``W+ = Y^T (X^T)^+`` of ``features X (n, D)`` and ``targets Y (n, q)`` computed through an SVD
    (``torch.linalg.pinv``, ``numpy.linalg.lstsq``), given either computed ``solution (q, D)``:
    ``eps kappa (3 ||W||_F + (kappa + 1) ||R||_F / ||X||_2)``, first order in u, with
    ``kappa = sigma_1 / sigma_r`` over the r singular values above the solvers' cutoff
    (``max(n, D) 2^-52 sigma_1``), ``R = Y - X W^T`` and ``eps = gamma_{2nD} ||X||_F / ||X||_2``.

    *Backward error.* The SVD reduces X to bidiagonal form by Householder reflections from both
    sides; as for Householder QR least squares (Higham, Theorems 19.4 and 20.3, the small constant
    of ``gamma~`` taken as 1, once per side), the computed solution is the exact minimum-norm
    solution of a problem whose matrix moved by ``||dX||_F <= gamma_{2nD} ||X||_F`` and whose
    target columns moved by at most ``gamma_{2nD}`` of their norms: ``eps`` relative in the 2-norm.
    The cutoff drops the singular values that rounding lifted off zero, so the nearby problem keeps
    the rank r while ``eps kappa < 1``.
    *Perturbation.* For a rank-preserving ``dX`` the pseudo-inverse moves, to first order, by
    ``-X^+ dX X^+ + X^+ X^+T dX^T (I - X X^+) + (I - X^+ X) dX^T X^+T X^+`` (Golub and Pereyra),
    so a target column y with solution w and residual r moves its solution by at most
    ``||X^+|| ||dX|| (2 ||w|| + ||X^+|| ||r||) + ||X^+|| ||dy||`` with ``||dy|| <= eps (||X|| ||w|| + ||r||)``:
    ``eps kappa (3 ||w|| + (kappa + 1) ||r|| / ||X||)`` (the full-rank case of Higham, Theorem 20.1,
    lacks the null-space term and has 2). The columns' bounds add in the Frobenius norm (Minkowski).
    """
    features, targets, solution = (np.asarray(array, dtype=np.float64) for array in (features, targets, solution))
    num_rows, width = features.shape
    singular_values = np.linalg.svd(features, compute_uv=False)
    nonzero = singular_values[singular_values > max(num_rows, width) * np.finfo(np.float64).eps * singular_values[0]]
    kappa = nonzero[0] / nonzero[-1]
    eps = gamma(2 * num_rows * width) * np.linalg.norm(features) / nonzero[0]
    if not eps * kappa < 1:
        raise ValueError(f"features: condition number {kappa:.3g} times backward error {eps:.3g} is not below 1, "
                         "where the first-order bound holds")
    residual = np.linalg.norm(targets - features @ solution.T)
    return eps * kappa * (3 * np.linalg.norm(solution) + (kappa + 1) * residual / nonzero[0])


def gepp_backward_error(size: int) -> float:
    """Normwise relative backward error of Gaussian elimination with partial pivoting on a ``size``
    x ``size`` system (``torch.linalg.solve``, ``numpy.linalg.solve``): the computed x solves
    ``(A + dA) x = b`` exactly with ``|dA| <= gamma_{3n} |L||U|`` and ``|| |L||U| ||_inf <= (1 + 2
    (n^2 - n) rho) ||A||_inf``, growth factor ``rho <= 2^(n-1)`` (Higham, Theorem 9.4, Lemma 9.6):
    ``gamma_{3n} (1 + 2 (n^2 - n) 2^(n-1))``."""
    return gamma(3 * size) * (1 + 2 * (size * size - size) * 2 ** (size - 1))


def ridge_residual_rounding(features, targets, ridge: float, solution) -> float:
    """Bound on every entry of ``W_hat G - Y^T X`` (exact arithmetic), ``G = X^T X + ridge I``, for
    the float64 ridge solution ``W_hat (q, D)`` of :func:`hmm.memory.least_squares` (the normal
    equations, solved by Gaussian elimination with partial pivoting): the exact ridge gradient at the
    computed solution. ``W_hat - W = (W_hat G - Y^T X) G^-1`` then bounds the forward error by it
    times ``||G^-1||_inf`` (G is symmetric).

    Forming ``G_hat`` rounds each entry by ``gamma_{n+1}`` of ``|X|^T |X| + ridge I`` (n products
    and the ridge), ``X^T y_k`` by ``gamma_n`` of ``|X|^T |y_k|``; the solve is exact for ``G_hat +
    dG`` with ``||dG||_inf <=`` :func:`gepp_backward_error` ``||G_hat||_inf``. So for each target k
    ``||G w_k - X^T y_k||_inf <= (gamma_{n+1} || |X|^T |X| + ridge I ||_inf + ||dG||_inf) ||w_k||_inf
    + gamma_n || |X|^T |y_k| ||_inf``.
    """
    features, targets, solution = (np.asarray(array, dtype=np.float64) for array in (features, targets, solution))
    num_rows, width = features.shape
    magnitudes = np.abs(features).T @ np.abs(features) + ridge * np.eye(width)
    gram = features.T @ features + ridge * np.eye(width)
    matrix = gamma(num_rows + 1) * magnitudes.sum(1).max() + gepp_backward_error(width) * np.abs(gram).sum(1).max()
    right_hand_sides = gamma(num_rows) * (np.abs(features).T @ np.abs(targets)).max(0)
    return float((matrix * np.abs(solution).max(1) + right_hand_sides).max())


def learning_rate_rounding(config: TrainConfig, step: int) -> float:
    """Bound on ``|learning_rate(config, step) - lr(step)|`` (:func:`empirical.training.train.learning_rate`), ``lr``
    the exact schedule of the stored floats ``M = config.learning_rate`` and ``m = min_lr_ratio * M``:
    ``gamma_2 lr(step)`` in the warm-up, ``3 u M + (M - m) (pi gamma_3 + 4 u) / 2`` after it, first order in u.

    Warm-up: ``M (s + 1) / w`` rounds twice. Decay, ``m + (M - m) (1 + cos(pi p)) / 2``: the progress ``p``
    (a quotient of exact integers) and the angle ``fl(pi) p`` round three times in all, ``pi gamma_3``
    absolute, which moves the cosine by as much; math.cos is within 1 ulp (at most 2u for a magnitude at
    most 1) and ``1 + cos`` within 2u more: ``pi gamma_3 + 4u`` on ``c = 1 + cos <= 2``, which the
    factor ``(M - m) / 2`` passes on. ``m`` rounds (``u m``), entering the sum directly and through
    ``M - m``, which rounds by ``u (M - m)`` more and reaches the sum scaled by ``c / 2 <= 1``: ``u m + u M``;
    the product (the halving exact) rounds by ``u (M - m)``, the final sum by ``u lr <= u M``: ``3 u M``.
    """
    u = unit_roundoff()
    if step < config.warmup_steps:
        return gamma(2) * config.learning_rate * (step + 1) / config.warmup_steps
    top, floor = config.learning_rate, config.min_lr_ratio * config.learning_rate
    return 3 * u * top + (top - floor) * (math.pi * gamma(3) + 4 * u) / 2


def reordered_forward_tolerance(dtype: torch.dtype, config: RoFormerConfig, length: int, sub_blocks: int,
                                scale: float) -> float:
    """Largest accepted difference between two computations of one RoFormer activation that sum in
    different orders, for an activation of largest magnitude ``scale`` reached after ``sub_blocks``
    attention/MLP sub-blocks on prompts of ``length`` positions: ``u * n * sub_blocks * scale``.

    Each computation is within a forward-error bound of the exact value: ``gamma_n ~ n u``
    relative to the magnitude for a sum of ``n`` terms, once per sub-block on the path.
    ``n = d_mlp + length``: the longest reduction, plus the rotary angles ``m theta_i``, which two
    libraries may round differently (``m / base^x`` vs ``m base^-x``), an error of
    ``m u <= length u`` radians. The network's gain from one sub-block to the next (LayerNorm's
    ``|w| / sigma``, the softmax Jacobian) is O(1) for O(1) weights, so it adds no factor.
    """
    size = config.mlp_ratio * config.width + length
    return unit_roundoff(dtype) * size * sub_blocks * scale


def sub_blocks_before(hook: str, config: RoFormerConfig) -> int:
    """Sub-blocks whose rounding reaches ``hook`` (an upper bound: all of block l for block l's hooks;
    the logits also pass the final LayerNorm and the unembedding, counted as one more)."""
    if hook == "hook_embed":
        return 0
    if hook == "logits":
        return 2 * config.num_layers + 1
    return 2 * (int(hook.split(".")[1]) + 1)
