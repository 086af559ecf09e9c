"""Brute-force Monte Carlo over prior draws of an HMM: the prior predictive of a prompt as a ratio
of prior expectations of likelihoods, for any number of states and tokens and any start law.

Row t's predictive is ``P(o | x_{1:t}) = E[P(x_{1:t}, o | theta)] / E[P(x_{1:t} | theta)]`` over
``theta`` from the prior; the likelihoods of a draw come from the forward algorithm, every segment
(delimiter ``p``) restarted from the draw's start law. Used by tests/test_collapsed_smc.py and, with
its closed-form two-state likelihoods, tests/test_prior_predictive.py."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np


class BruteForce(NamedTuple):
    predictive: np.ndarray
    """``(N, p)``: row t's ``P(o | prompt[:t+1])`` (a new segment's first token after a delimiter)."""
    stderr: np.ndarray
    """``(N, p)``: its delta-method standard error."""
    evidence: float
    """``P(prompt)``, the mean likelihood of the whole prompt."""
    evidence_stderr: float


def likelihood_terms(prompt: list[int], initial: np.ndarray, transition: np.ndarray, emission: np.ndarray) -> np.ndarray:
    """``(1 + (1 + p) N, D)`` for D draws ``initial (D, S)``, ``transition (D, S, S)``, ``emission
    (D, S, p)``: row 0 is ``P(prompt | theta)``, row ``1 + (1 + p) t`` is ``P(prompt[:t+1] | theta)``
    and rows ``2 + (1 + p) t + o`` are ``P(prompt[:t+1], o | theta)`` for ``o = 0..p-1``, by the
    forward algorithm with every segment started from ``initial``."""
    D, _, p = emission.shape
    terms = np.empty((1 + (1 + p) * len(prompt), D))
    likelihood = np.ones(D)
    predicted = initial
    for t, token in enumerate(prompt):
        if token == p:
            predicted = initial
        else:
            joint = predicted * emission[:, :, token]
            step = joint.sum(-1)
            likelihood = likelihood * step
            predicted = np.einsum("ds,dst->dt", joint / step[:, None], transition)
        row = 1 + (1 + p) * t
        terms[row] = likelihood
        terms[row + 1: row + 1 + p] = (likelihood[:, None] * np.einsum("ds,dso->do", predicted, emission)).T
    terms[0] = likelihood
    return terms


def ratio_estimates(chunks: Iterable[np.ndarray], num_tokens: int) -> BruteForce:
    """:class:`BruteForce` from chunks of :func:`likelihood_terms` (independent prior draws): the
    ratio of means, with ``Var(ratio) ~ (Var n - 2 r Cov(n, d) + r^2 Var d) / (D mean(d)^2)``."""
    p = num_tokens
    draws, sums, squares, crossed = 0, 0.0, 0.0, 0.0
    for terms in chunks:
        prefixes = terms[1::1 + p]  # (N, D)
        continued = terms[1:].reshape(-1, 1 + p, terms.shape[1])[:, 1:]  # (N, p, D)
        draws += terms.shape[1]
        sums = sums + terms.sum(1)
        squares = squares + np.square(terms).sum(1)
        crossed = crossed + (continued * prefixes[:, None]).sum(-1)
    mean, variance = sums / draws, squares / draws - np.square(sums / draws)
    denominator, numerator = mean[1::1 + p], mean[1:].reshape(-1, 1 + p)[:, 1:]  # (N,), (N, p)
    denominator_variance = variance[1::1 + p]
    numerator_variance = variance[1:].reshape(-1, 1 + p)[:, 1:]
    ratio = numerator / denominator[:, None]
    covariance = crossed / draws - numerator * denominator[:, None]
    residual = numerator_variance - 2 * ratio * covariance + np.square(ratio) * denominator_variance[:, None]
    stderr = np.sqrt(residual / draws) / denominator[:, None]
    return BruteForce(ratio, stderr, float(mean[0]), math.sqrt(variance[0] / draws))
