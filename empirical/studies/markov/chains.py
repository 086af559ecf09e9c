"""First-order Markov chains on ``m`` tokens: kernels, stationary sampling and exact reference losses.

This is the data side of the "Attention with Markov" study (Makkuva et al., arXiv 2402.04161).

Conventions:
    ``kernel[i, j] = P(x_{t+1} = j | x_t = i)`` (rows sum to 1); tokens are ``0..m-1``;
    ``pi`` is the stationary distribution, ``pi^T kernel = pi^T``; every sequence starts from
    ``x_1 ~ pi``, so each token of every sequence is marginally ``pi``-distributed.

The binary chain with switching probabilities ``(p, q)`` is::

    kernel = [[1 - p, p],
              [q, 1 - q]],   pi = (q, p) / (p + q).

Two predictors bracket what a next-token model can reach on such data (losses in nats/token):

* **bigram** (the Markov kernel, the optimum): ``H_rate = H(x_{t+1} | x_t) = -sum_i pi_i sum_j
  P_ij log P_ij``; for the binary chain ``H_rate = (q h(p) + p h(q)) / (p + q)`` with
  ``h(x) = -x log x - (1 - x) log(1 - x)``;
* **unigram** (predict ``pi`` whatever the context): ``H_unigram = H(pi) = -sum_i pi_i log pi_i``;
  for the binary chain ``H_unigram = h(p / (p + q))``.

``H_rate <= H_unigram`` with equality iff every row of the kernel equals ``pi`` (for the binary
chain: iff ``p + q = 1``, the i.i.d. case), where the two solutions coincide.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from hmm.markov import stationary_distribution as solve_stationary
from hmm.model import HMM, check_stochastic, check_tokens
from hmm.prompts import sample_sequences as sample_hmm_sequences

STATIONARY_TOLERANCE = 1e-9
"""Largest accepted ``|pi^T kernel - pi^T|`` entry of a stationary distribution solved in float64
(rounding is ~1e-15 per entry for small m)."""

MEMORY_NORM_TOLERANCE = 1e-12
"""Below this ``|P - U|_pi^2`` a kernel counts as memoryless (every row equal to ``pi``): the
unigram and bigram solutions coincide and :func:`memory_coordinate` is undefined."""


class ReferenceLosses(NamedTuple):
    """The two loss lines of a chain, in nats per predicted token."""

    bigram: float
    """Entropy rate ``H(x_{t+1} | x_t)``: the loss of the Markov kernel, the lowest possible."""
    unigram: float
    """Stationary entropy ``H(pi)``: the loss of predicting ``pi`` at every position."""


def binary_kernel(p: float, q: float) -> np.ndarray:
    """The ``2 x 2`` kernel ``[[1 - p, p], [q, 1 - q]]`` of a binary chain.

    ``p = P(1 | 0)`` and ``q = P(0 | 1)`` must lie in ``[0, 1]`` with ``p + q > 0`` (for
    ``p = q = 0`` both states are absorbing and the stationary distribution is not unique).
    """
    for name, value in (("p", p), ("q", q)):
        if not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(value):
            raise ValueError(f"{name}: {value!r}; expected a finite switching probability in [0, 1]")
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}: {value!r} is outside [0, 1]; expected a switching probability")
    if p + q == 0.0:
        raise ValueError("p, q: both are 0 (p + q = 0); expected p + q > 0 for a unique stationary distribution")
    return np.array([[1.0 - p, p], [q, 1.0 - q]], dtype=np.float64)


def check_kernel(kernel, name: str = "kernel") -> np.ndarray:
    """Return ``kernel`` as a float64 ``(m, m)`` array after checking it is row-stochastic.

    Raises ``ValueError`` naming ``name`` for a non-square shape, ``m < 2``, or rows that are not
    probability vectors (checked by :func:`hmm.model.check_stochastic`).
    """
    array = np.asarray(kernel, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != array.shape[1] or array.shape[0] < 2:
        raise ValueError(f"{name}: shape {array.shape}; expected a square (m, m) kernel with m >= 2")
    check_stochastic(torch.from_numpy(array), name)
    return array


def stationary_distribution(kernel) -> np.ndarray:
    """The unique ``pi`` with ``pi^T kernel = pi^T``, ``sum(pi) = 1``, as float64 numpy.

    Solved by :func:`hmm.markov.stationary_distribution` (``ValueError`` for a chain without a
    unique stationary distribution), then checked: ``|pi^T kernel - pi^T| <= STATIONARY_TOLERANCE``.
    """
    kernel = check_kernel(kernel)
    try:
        pi = solve_stationary(torch.from_numpy(kernel)).numpy()
    except ValueError as error:
        raise ValueError(f"kernel: {error}") from error
    residual = np.abs(pi @ kernel - pi).max()
    if not residual <= STATIONARY_TOLERANCE:
        raise ValueError(
            f"kernel: stationary solve has residual {residual:.3g}; expected a chain with a unique "
            f"stationary distribution (residual <= {STATIONARY_TOLERANCE:g})"
        )
    return pi


def surprise(probabilities: np.ndarray) -> np.ndarray:
    """``-log x`` elementwise where ``x > 0``, and 0 where ``x = 0`` (such outcomes never occur, so
    every expectation weights them by 0 and ``0 log 0 = 0``)."""
    return -np.log(probabilities, where=probabilities > 0, out=np.zeros_like(probabilities))


def entropy_rate(kernel) -> float:
    """``H(x_{t+1} | x_t) = -sum_i pi_i sum_j P_ij log P_ij`` in nats: the bigram optimum."""
    kernel = check_kernel(kernel)
    return float(stationary_distribution(kernel) @ (kernel * surprise(kernel)).sum(axis=1))


def stationary_entropy(kernel) -> float:
    """``H(pi) = -sum_i pi_i log pi_i`` in nats: the loss of the unigram predictor."""
    pi = stationary_distribution(kernel)
    return float(pi @ surprise(pi))


def reference_losses(kernel) -> ReferenceLosses:
    """Both loss lines of ``kernel``: ``(bigram = entropy rate, unigram = stationary entropy)``."""
    return ReferenceLosses(bigram=entropy_rate(kernel), unigram=stationary_entropy(kernel))


def bigram_loss_variance(kernel, num_predicted: int) -> float:
    """Exact variance of the bigram predictor's mean log-loss over ``n = num_predicted`` tokens of
    one stationary sequence.

    With ``l_t = -log P(x_t, x_{t+1})``, ``f_ij = -log P_ij``, ``h_i = sum_j P_ij f_ij`` (so
    ``E l_t = pi^T h = H_rate``) and ``a_j = sum_i pi_i P_ij f_ij``::

        c_0 = Var l_t = sum_ij pi_i P_ij f_ij^2 - H_rate^2,
        c_d = Cov(l_t, l_{t+d}) = a^T P^{d-1} h - H_rate^2          (d >= 1),
        V_n = Var((1/n) sum_t l_t) = (n c_0 + 2 sum_{d=1}^{n-1} (n - d) c_d) / n^2.

    The covariances decay like ``lambda_2^d`` (``lambda_2 = 1 - p - q`` for the binary chain), so
    by the Markov-chain CLT the mean of ``B`` independent sequences is normal with standard
    deviation ``sqrt(V_n / B)`` for large ``B`` or ``n`` (the sampling tolerance of the trap
    criterion, :func:`empirical.studies.markov.criterion.trap_tolerance`).
    """
    kernel = check_kernel(kernel)
    if isinstance(num_predicted, bool) or not isinstance(num_predicted, (int, np.integer)) or num_predicted < 1:
        raise ValueError(f"num_predicted: {num_predicted!r}; expected an integer >= 1")
    pi = stationary_distribution(kernel)
    surprisal = surprise(kernel)
    joint = pi[:, None] * kernel
    rate = float((joint * surprisal).sum())
    conditional_mean = (kernel * surprisal).sum(axis=1)
    outgoing = (joint * surprisal).sum(axis=0)
    n = int(num_predicted)
    total = n * (float((joint * surprisal**2).sum()) - rate**2)
    propagated = conditional_mean
    for lag in range(1, n):
        total += 2 * (n - lag) * (float(outgoing @ propagated) - rate**2)
        propagated = kernel @ propagated
    return max(total, 0.0) / n**2


def sample_sequences(kernel, num_sequences: int, length: int, seed) -> torch.Tensor:
    """``(num_sequences, length)`` int64 tokens: ``x_1 ~ pi``, ``x_{t+1} ~ kernel[x_t]``.

    A first-order chain is the HMM ``HMM(initial=pi, transition=kernel, emission=I)`` whose tokens
    are its states, so this is :func:`hmm.sample_sequences` on that HMM (vectorised inverse-CDF
    draws). ``seed`` (an int or a ``numpy.random.Generator``) fixes the sequences on every machine.
    """
    kernel = check_kernel(kernel)
    for name, value in (("num_sequences", num_sequences), ("length", length)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: {value!r}; expected an integer >= 1")
    chain = HMM(
        torch.from_numpy(stationary_distribution(kernel)),
        torch.from_numpy(kernel),
        torch.eye(kernel.shape[0], dtype=torch.float64),
    )
    tokens, _ = sample_hmm_sequences(chain, np.zeros(num_sequences, dtype=np.int64), int(length), seed)
    return tokens


def sequence_log_losses(log_probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean next-token log-loss ``-(1/(T-1)) sum_{t<T} log q_t(x_{t+1})``.

    ``log_probs (B, T, m)``: row ``t`` is a predictor's log-distribution of ``x_{t+1}`` given
    ``x_1..x_t`` (the last row, which predicts beyond the sequence, is ignored);
    ``tokens (B, T)``. Returns ``(B,)`` float64.
    """
    tokens = check_tokens(tokens, log_probs.shape[-1], "tokens")
    if log_probs.shape[:-1] != tokens.shape or tokens.shape[-1] < 2:
        raise ValueError(
            f"log_probs: shape {tuple(log_probs.shape)} with tokens {tuple(tokens.shape)}; expected "
            f"log_probs (B, T, m) matching tokens (B, T) with T >= 2"
        )
    targets = tokens[:, 1:].unsqueeze(-1)
    return -log_probs[:, :-1].gather(-1, targets).squeeze(-1).double().mean(-1)


def excess_losses(kernel, tokens: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean of ``KL(P[x_t] || q_t)`` over ``t < T``: a predictor's loss above the
    entropy rate, with the sampling noise of the next token integrated out exactly.

    Since ``x_{t+1} ~ P[x_t]`` given ``x_1..x_t``::

        E[-log q_t(x_{t+1}) | x_1..x_t] = H(P[x_t]) + KL(P[x_t] || q_t),   E H(P[x_t]) = H_rate,

    so ``E[loss] = H_rate + E[excess]``. The excess is exactly 0 for the bigram predictor and has
    mean ``H_unigram - H_rate`` for the unigram one. ``log_probs (B, T, m)`` as in
    :func:`sequence_log_losses`; returns ``(B,)`` float64.
    """
    kernel = check_kernel(kernel)
    tokens = check_tokens(tokens, kernel.shape[0], "tokens")
    if log_probs.shape != (*tokens.shape, kernel.shape[0]) or tokens.shape[-1] < 2:
        raise ValueError(
            f"log_probs: shape {tuple(log_probs.shape)} with tokens {tuple(tokens.shape)}; expected "
            f"(B, T, {kernel.shape[0]}) matching tokens (B, T) with T >= 2"
        )
    true_next = torch.from_numpy(kernel)[tokens[:, :-1]]
    true_log = torch.from_numpy(-surprise(kernel))[tokens[:, :-1]]
    # Outcomes with P_ij = 0 contribute 0 even where the predictor gives them log q = -inf.
    terms = torch.where(true_next > 0, true_next * (true_log - log_probs[:, :-1].double()), 0.0)
    return terms.sum(-1).mean(-1)


class KernelReadBack(NamedTuple):
    """The transition probabilities a predictor implies, per current token (``(m, m)`` float64)."""

    mean: np.ndarray
    """``K_hat[i, j]``: mean of ``q_t(j)`` over the positions ``t`` with ``x_t = i``."""
    spread: np.ndarray
    """Standard deviation of ``q_t(j)`` over the same positions (0 for a predictor that depends
    only on the current token)."""


def read_back_kernel(tokens: torch.Tensor, probs: torch.Tensor) -> KernelReadBack:
    """The transition probabilities a predictor implies: over the positions ``t`` with ``x_t = i``
    (all positions but the last of every sequence), the mean and standard deviation of ``q_t(j)``::

        K_hat[i, j] = (1 / N_i) sum_{t: x_t = i} q_t(j),
        spread[i, j] = sqrt((1 / N_i) sum_{t: x_t = i} (q_t(j) - K_hat[i, j])^2).

    ``tokens (B, T)``, ``probs (B, T, m)`` (row ``t`` predicts ``x_{t+1}``). A state that never
    occurs gets rows of NaN. For the bigram predictor ``K_hat = kernel``; for the unigram
    predictor every row is ``pi``; both have spread 0.
    """
    m = probs.shape[-1]
    tokens = check_tokens(tokens, m, "tokens")
    if probs.shape[:-1] != tokens.shape:
        raise ValueError(f"probs: shape {tuple(probs.shape)} with tokens {tuple(tokens.shape)}; expected (B, T, m)")
    current = tokens[:, :-1].reshape(-1)
    predicted = probs[:, :-1].reshape(-1, m).double()
    counts = torch.bincount(current, minlength=m).double().unsqueeze(-1)
    mean = torch.zeros(m, m, dtype=torch.float64).index_add_(0, current, predicted) / counts
    deviations = (predicted - mean[current]) ** 2
    variance = torch.zeros(m, m, dtype=torch.float64).index_add_(0, current, deviations) / counts
    return KernelReadBack(mean.numpy(), variance.sqrt().numpy())


def memory_norm(kernel) -> float:
    """``|P - U|_pi^2 = sum_i pi_i sum_j (P_ij - pi_j)^2`` with ``U = 1 pi^T`` (every row ``pi``):
    how far the kernel is from the memoryless chain with the same marginals. For the binary
    chain it is ``2 pi_0 pi_1 (1 - p - q)^2``, zero iff ``p + q = 1``."""
    kernel = check_kernel(kernel)
    pi = stationary_distribution(kernel)
    return float(pi @ ((kernel - pi[None, :]) ** 2).sum(axis=1))


def is_memoryless(p: float, q: float) -> bool:
    """True iff the binary chain ``(p, q)`` is i.i.d. (``p + q = 1``): every kernel row equals
    ``pi``, so its :func:`memory_norm` is at most :data:`MEMORY_NORM_TOLERANCE`."""
    return memory_norm(binary_kernel(p, q)) <= MEMORY_NORM_TOLERANCE


def memory_coordinate(estimated_kernel: np.ndarray, kernel) -> float:
    """Where ``estimated_kernel`` lies between the unigram (0) and bigram (1) solutions.

    With ``U = 1 pi^T`` and the ``pi``-weighted inner product
    ``<A, B>_pi = sum_i pi_i sum_j A_ij B_ij``::

        alpha = <K_hat - U, P - U>_pi / <P - U, P - U>_pi.

    ``alpha = 1`` for ``K_hat = P``, ``0`` for ``K_hat = U``; undefined (``ValueError``) when
    :func:`memory_norm` is at most :data:`MEMORY_NORM_TOLERANCE`, i.e. for i.i.d. chains.
    """
    kernel = check_kernel(kernel)
    norm = memory_norm(kernel)
    if norm <= MEMORY_NORM_TOLERANCE:
        raise ValueError(f"kernel: every row equals pi (|P - U|_pi^2 = {norm:.3g}); expected a chain with memory")
    pi = stationary_distribution(kernel)
    memory = kernel - pi[None, :]
    return float(pi @ ((np.asarray(estimated_kernel) - pi[None, :]) * memory).sum(axis=1)) / norm
