"""Unit roundoff and the error constants the tests derive their rounding tolerances from.

An operation on floating-point numbers returns the exact result times ``1 + d`` with ``|d| <= u``,
the unit roundoff of its format (``2^-24`` for float32, ``2^-53`` for float64); a sum of n terms,
in any order, then errs by at most ``gamma_{n-1}`` times the sum of the terms' magnitudes, with
``gamma_n = n u / (1 - n u)`` (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
Lemma 3.1 and eq. 3.5). Two implementations of one function that sum in different orders each
stay within that bound of the exact value, so they differ by at most twice it.
"""
from __future__ import annotations

import torch

from empirical.model import RoFormerConfig


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


def filtering_rounding(num_states: int, steps: int) -> float:
    """Entrywise relative rounding bound on the filtered belief of :func:`hmm.filter_beliefs`
    (float64) after ``steps`` tokens: ``2 gamma_{steps (S + 2)} + gamma_S``.

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
    return 2 * gamma(steps * (num_states + 2)) + gamma(num_states)


def predictive_rounding(num_states: int, steps: int) -> float:
    """Entrywise relative rounding bound on the next-token predictive of :func:`hmm.filter_beliefs`
    (float64) after ``steps`` tokens: the belief's (:func:`filtering_rounding`) plus ``2 gamma_S``,
    for ``T O`` (formed once, sums of S nonnegative products) and the belief's product with it."""
    return filtering_rounding(num_states, steps) + 2 * gamma(num_states)


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
