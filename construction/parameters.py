"""The :class:`~construction.spec.ConstructionSpec` suited to a given prompt: eta, theta, beta, penalty.

* ``theta = pi / (N + max_shift)``: the largest angle with ``(N - 1 + max_shift) theta < pi``
  (no wrap), hence the widest softmax gap ``1 - cos theta``.
* ``eta = 1 / lambda_max`` of the prompt's Hessian ``(1/N) X^T X`` (Lemma 5's step), from
  :mod:`construction.reference`; it is at least 1/L because ``lambda_max <= max ||x||^2 = L``.
* ``penalty = 10 p L`` (:func:`construction.spec.default_penalty`).
* ``beta = choose_beta(target, ...)``: the smallest beta whose construction-error bound is at most
  ``target``.
"""
from __future__ import annotations

import math

import numpy as np

from construction import reference
from construction.checks import check_prompt
from construction.layout import build_layout
from construction.leak import amplification, choose_beta
from construction.spec import ConstructionSpec, default_penalty
from construction.weights import max_shift


def parameters_for_prompt(
    tokens, p: int, L: int, gd_steps: int, *, future_length: int = 1, doubling: bool = False, target: float = 1e-9
) -> ConstructionSpec:
    """The spec for one prompt (module docstring), ``T = gd_steps``; ``build_network(spec)`` builds it.

    Raises ``ValueError`` for a prompt :func:`construction.checks.check_prompt` refuses (no
    delimiter, a token outside ``0..p``, a demonstration shorter than ``L + m``, a test sequence
    shorter than L) or one that yields no regression sample (eta = 1/lambda_max needs N' >= 1).
    """
    layout = build_layout(p, L, future_length)
    tokens = check_prompt(tokens, layout)
    num_columns = len(tokens) + 1
    X, _, _ = reference.regression_problem(tokens, p, L, future_length)
    if X.shape[0] == 0:
        raise ValueError(
            f"tokens: N' = 0 regression samples; expected a demonstration of length >= L + m = {L + future_length}"
        )
    eta = 1.0 / float(np.linalg.eigvalsh(reference.hessian(X, num_columns))[-1])
    return parameters_for_columns(
        num_columns, p, L, gd_steps, eta, future_length=future_length, doubling=doubling, target=target
    )


def parameters_for_columns(
    num_columns: int, p: int, L: int, gd_steps: int, eta: float, *, future_length: int = 1, doubling: bool = False,
    target: float = 1e-9,
) -> ConstructionSpec:
    """The spec with theta, penalty and beta (module docstring) for prompts of up to ``num_columns``
    columns and a given step size ``eta``."""
    theta = math.pi / (num_columns + max_shift(L, doubling))
    penalty = default_penalty(p, L)
    gain = amplification(build_layout(p, L, future_length), doubling, gd_steps, eta, penalty)
    beta = choose_beta(target, theta, num_columns, gain)
    return ConstructionSpec(
        num_tokens=p,
        history_length=L,
        gd_steps=gd_steps,
        eta=eta,
        beta=beta,
        theta=theta,
        future_length=future_length,
        doubling=doubling,
        penalty=penalty,
    )
