"""Forward filtering of many distinct HMMs, one sequence each: the particles of the SMC in
:mod:`hmm.prior_predictive`, in numpy.

HMM ``m`` has transition ``T_m (S, S)``, emission ``O_m (S, p)`` and a start law ``a_m (S,)`` (its
initial distribution, or its stationary law when every segment is a fresh run). For its tokens
``o_1..o_J`` and the segment starts (``o_j`` first of a segment; ``o_1`` always is) the recursion
of :mod:`hmm.filtering` becomes::

    b^-_j = a_m                          if o_j starts a segment
            b_{j-1}^T T_m                otherwise
    c_j   = sum_s b^-_j(s) O_m(s, o_j)   = P(o_j | o_<j)   (within the segment's run)
    b_j   = b^-_j * O_m(., o_j) / c_j    = P(s_j | o_<=j)

Why a second filter beside :mod:`hmm.filtering`: that engine groups many sequences per HMM into
one matrix product per step. Here every HMM has one sequence, so a step is a stack of M
vector-matrix products, each reading its own matrix once. ``numpy.matmul`` does that stack 2 to 7
times faster than ``torch.bmm`` or a broadcast product and sum on these CPUs (a stack of 4096
16 x 16 matrices: 0.34 ms against 2.3 ms and 0.84 ms; 16 of 128 x 128: 46 us against 87 us), and
its calls cost about a microsecond against torch's several. ``benchmarks/bench_hmm.py`` times it
against dynamax on the paper's HMM size.

HMMs are filtered in blocks of :data:`BLOCK_BYTES` of matrices, which stay in the last-level cache
across a block's steps; with ``threads > 1`` a pool of threads filters the blocks (numpy releases
the interpreter lock inside ``matmul`` and its element-wise loops).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

BLOCK_BYTES = 4 << 20
"""Bytes of transition matrices per block (32 HMMs of 128 states)."""


def advance(beliefs: np.ndarray, matrices: np.ndarray) -> np.ndarray:
    """``(M, K)``: row m is ``beliefs[m] @ matrices[m]``, for ``beliefs (M, S)`` and ``matrices (M, S, K)``."""
    return np.matmul(beliefs[:, None, :], matrices)[:, 0]


def emission_likelihoods(emission: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``(J, M, S)``: ``O_m(s, o_j)`` for ``emission (M, S, p)`` and ``tokens (M, J)`` (rows of the
    transposed emissions, gathered contiguously)."""
    by_token = np.ascontiguousarray(emission.transpose(0, 2, 1))  # (M, p, S)
    return by_token[np.arange(tokens.shape[0]), tokens.T]


def forward_filter(transition: np.ndarray, start: np.ndarray, likelihoods: np.ndarray, segment_starts: np.ndarray,
                   keep_beliefs: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(filtered, log_normalizers (J, M))``: ``b_j`` and ``log c_j`` of the module docstring for
    ``transition (M, S, S)``, ``start (M, S)``, ``likelihoods (J, M, S)`` (from
    :func:`emission_likelihoods`) and ``segment_starts (J,)`` bool. ``filtered`` is ``(J, M, S)``,
    or only the last belief ``(1, M, S)`` without ``keep_beliefs`` (no fresh memory to touch at
    every step)."""
    J, M, S = likelihoods.shape
    filtered = np.empty((J if keep_beliefs else 1, M, S))
    normalizers = np.empty((J, M))
    predicted = np.empty((M, 1, S))
    for j in range(J):
        belief = filtered[j if keep_beliefs else 0]
        if segment_starts[j] or j == 0:
            np.multiply(start, likelihoods[j], out=belief)
        else:
            np.matmul(filtered[j - 1 if keep_beliefs else 0][:, None, :], transition, out=predicted)
            np.multiply(predicted[:, 0], likelihoods[j], out=belief)
        np.sum(belief, axis=-1, out=normalizers[j])
        belief /= normalizers[j][:, None]
    return filtered, np.log(normalizers)


def log_likelihood(transition: np.ndarray, emission: np.ndarray, start: np.ndarray, tokens: np.ndarray,
                   segment_starts: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
    """``(M,)``: ``log P(o_1..o_J) = sum_j log c_j`` of HMM m's tokens ``tokens[m]``, for
    ``transition (M, S, S)``, ``emission (M, S, p)``, ``start (M, S)``, ``tokens (M, J)`` and
    ``segment_starts (J,)`` (default: one segment), in blocks of :data:`BLOCK_BYTES` filtered by
    ``threads`` threads."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: {threads!r}; expected an integer >= 1")
    M, S, _ = transition.shape
    if tokens.ndim != 2 or tokens.shape[0] != M:
        raise ValueError(f"tokens: shape {tokens.shape}; expected ({M}, J), one sequence per HMM")
    if segment_starts is None:
        segment_starts = np.zeros(tokens.shape[1], dtype=bool)
    per_block = max(1, BLOCK_BYTES // (transition.itemsize * S * S))
    blocks = [slice(first, first + per_block) for first in range(0, M, per_block)]

    def block(rows: slice) -> np.ndarray:
        likelihoods = emission_likelihoods(emission[rows], tokens[rows])
        return forward_filter(transition[rows], start[rows], likelihoods, segment_starts, keep_beliefs=False)[1].sum(0)

    if threads == 1:
        return np.concatenate([block(rows) for rows in blocks])
    with ThreadPoolExecutor(threads) as pool:
        return np.concatenate(list(pool.map(block, blocks)))
