"""Refusals of the forward pass: every input the network cannot serve as documented.

Each check raises ``ValueError`` naming the argument, its value and what was expected
(docs/construction.md, sections 1 and 4-5):

* :func:`check_prompt`: the prompt format (delimiters, token range, demonstration and test lengths);
* :func:`check_angle`: ``(N - 1 + max_shift) theta < pi``, so positions never wrap;
* :func:`check_beta`: the construction-error bound of the prompt within the tolerance (or a warning);
* :func:`check_step_size`: ``eta < 2 / lambda_max`` of this prompt's Hessian, read off the stream;
* :func:`check_penalty`: no positive GD score on a non-sample.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from construction import leak
from construction.layout import Layout, exclusion_count
from construction.spec import ConstructionSpec
from construction.weights import max_shift


def check_prompt(tokens, layout: Layout) -> np.ndarray:
    """Validate a prompt and return it as an int64 array.

    Expects a 1-d sequence of integers in ``0..p`` containing at least one delimiter ``p``, every
    demonstration (maximal delimiter-free run before the last delimiter) of length >= L + m so that
    it yields a regression sample, and a test sequence (after the last delimiter) of length >= L.
    """
    p, L, m = layout.num_tokens, layout.history_length, layout.future_length
    array = np.asarray(tokens)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"tokens: shape {array.shape}, dtype {array.dtype}; expected a 1-d integer sequence")
    if array.size and (array.min() < 0 or array.max() > p):
        raise ValueError(
            f"tokens: values in [{array.min()}, {array.max()}]; expected tokens 0..{p - 1} and delimiter {p}"
        )
    delimiters = np.flatnonzero(array == p)
    if delimiters.size == 0:
        raise ValueError(f"tokens: no delimiter {p}; expected demo_1, {p}, ..., demo_n, {p}, test sequence")
    starts = np.concatenate([[0], delimiters[:-1] + 1])
    for index, (start, stop) in enumerate(zip(starts, delimiters), start=1):
        if stop - start < L + m:
            raise ValueError(
                f"history_length L={L} plus future_length m={m} exceeds demonstration {index} of length "
                f"{stop - start}; expected every demonstration to have at least L+m = {L + m} tokens"
            )
    test_length = array.size - delimiters[-1] - 1
    if test_length < L:
        raise ValueError(f"test sequence length {test_length} < history_length L={L}; expected at least L tokens")
    return array.astype(np.int64)


def check_angle(spec: ConstructionSpec, num_columns: int) -> None:
    """Refuse a theta for which some offset ``|j - i + s| theta`` reaches pi (positions wrap)."""
    shift = max_shift(spec.history_length, spec.doubling)
    reach = (num_columns - 1 + shift) * spec.theta
    if reach >= math.pi:
        raise ValueError(
            f"theta={spec.theta:.6g} wraps for a prompt of N={num_columns} columns: "
            f"(N-1+{shift})*theta = {reach:.6g} >= pi; expected theta < {math.pi / (num_columns - 1 + shift):.6g}"
        )


def check_beta(spec: ConstructionSpec, num_columns: int, tolerance: float, allow_leak: bool) -> None:
    """Refuse (or, with ``allow_leak``, warn about) a beta whose error bound exceeds ``tolerance``."""
    bound = spec.error_bound(num_columns)
    if bound <= tolerance:
        return
    needed = leak.choose_beta(tolerance, spec.theta, num_columns, spec.amplification())
    message = (
        f"beta={spec.beta:.6g} too small for a prompt of N={num_columns} columns: the construction "
        f"error bound is {bound:.3g} > tolerance {tolerance:.3g}; expected beta >= {needed:.6g}"
    )
    if not allow_leak:
        raise ValueError(message)
    warnings.warn(message, stacklevel=3)


def check_step_size(stream: torch.Tensor, layout: Layout, eta: torch.Tensor) -> None:
    """Refuse, for prompt b of a batch ``stream (B, D, N)``, ``eta[b] >= 2 / lambda_max`` of
    ``(1/N) sum_samples x x^T`` read off its stage-2 stream."""
    samples = exclusion_count(stream.transpose(0, 1), layout) < 0.5
    covariates = torch.where(samples[:, None, :], stream[:, layout.feature_rows()], 0.0).to(torch.float64)
    hessian = covariates @ covariates.transpose(-1, -2) / stream.shape[-1]
    lambda_max = torch.linalg.eigvalsh(hessian)[:, -1]
    diverging = torch.nonzero(eta * lambda_max >= 2.0).flatten()
    if diverging.numel():
        index = int(diverging[0])
        value, largest = float(eta[index]), float(lambda_max[index])
        where = f"prompt {index} of the batch" if stream.shape[0] > 1 else "this prompt"
        raise ValueError(
            f"eta={value:.6g} >= 2/lambda_max = {2.0 / largest:.6g} for {where} "
            f"(lambda_max of (1/N) sum_samples x x^T is {largest:.6g}): gradient descent diverges; "
            f"expected eta < {2.0 / largest:.6g}"
        )


def check_penalty(stream: torch.Tensor, logits: torch.Tensor, spec: ConstructionSpec) -> None:
    """Refuse a penalty that leaves a positive GD score (``logits (B, heads, N, N)`` of a GD layer)
    on a non-sample key column of a prompt of the batch ``stream (B, D, N)``."""
    outside = exclusion_count(stream.transpose(0, 1), spec.layout) >= 0.5
    by_key = logits.amax(dim=(1, 2))
    worst = float(by_key[outside].max()) if bool(outside.any()) else 0.0
    if worst > 0.0:
        raise ValueError(
            f"penalty={spec.penalty:.6g} too small: a non-sample keeps GD score {worst:.3g} > 0; "
            f"expected penalty > max |<w_k, x_j> - y_jk| over non-samples"
        )
