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
