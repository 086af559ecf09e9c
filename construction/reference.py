"""Plain-numpy reference of every stage, sharing no code with the network.

It works on the prompt as a list of tokens (``p`` = delimiter) and on the network's column
convention: column 0 is a leading delimiter and column c holds prompt token c-1, so a prompt of
n tokens has ``N = n + 1`` columns. A position head whose target lies outside the prompt attends
to the nearest column, so indices clamp to ``0..N-1``:

* :func:`history` ``(N, L, p+1)``: block r of column c is the one-hot of the token of column
  ``max(c - r, 0)`` (the leading delimiter when the history runs past the start);
* :func:`future` ``(N, m, p+1)``: block r-1 of column c is the one-hot of the token of column
  ``min(c + r, N - 1)`` (the last test token when the future runs past the end).
* :func:`sample_mask` ``(N,)``: column c is a regression sample iff it holds token i (1-based) of a
  demonstration of length n_d with ``L <= i <= n_d - m`` (history and label inside that
  demonstration, never the test sequence). N' = the number of samples = ``sum_d (n_d - L - m + 1)``.
* :func:`regression_problem`: ``X (N', pL)``, ``Y (N', p^m)``, ``x_test (pL,)``.
* :func:`gd_iterates`: ``W_{t+1} = W_t - (eta/N) (W_t X^T - Y^T) X``, ``W_0 = 0`` (gradient descent
  on ``(1/2N) sum_samples ||y_j - W x_j||^2``; N counts all columns, see docs/construction.md).
* :func:`min_norm_solution`: the minimum-norm least-squares ``W+ = Y^T (X^T)^+``, the limit of
  those iterates (the design is singular for L >= 2).
"""
from __future__ import annotations

import numpy as np


def columns(tokens, p: int) -> np.ndarray:
    """The network's columns: a leading delimiter, then the prompt tokens."""
    return np.array([p] + [int(token) for token in tokens])


def history(tokens, p: int, L: int) -> np.ndarray:
    """``(N, L, p+1)``: one-hot of the token of column ``max(c - r, 0)``, r = 0..L-1, for every column c."""
    cols = columns(tokens, p)
    out = np.zeros((cols.size, L, p + 1))
    for c in range(cols.size):
        for r in range(L):
            out[c, r, cols[max(c - r, 0)]] = 1.0
    return out


def future(tokens, p: int, m: int) -> np.ndarray:
    """``(N, m, p+1)``: one-hot of the token of column ``min(c + r, N - 1)``, r = 1..m, for every column c."""
    cols = columns(tokens, p)
    out = np.zeros((cols.size, m, p + 1))
    for c in range(cols.size):
        for r in range(1, m + 1):
            out[c, r - 1, cols[min(c + r, cols.size - 1)]] = 1.0
    return out


def joint(future_blocks: np.ndarray, p: int) -> np.ndarray:
    """``(N, p^m)``: joint one-hot of ``(o_{c+1}, ..., o_{c+m})``, index ``sum_r o_{c+r} p^(m-r)``.

    Zero where a block is the delimiter.
    """
    N, m, _ = future_blocks.shape
    out = np.zeros((N, p**m))
    for c in range(N):
        symbols = [int(np.argmax(block)) for block in future_blocks[c]]
        if p not in symbols:
            out[c, sum(symbol * p ** (m - 1 - r) for r, symbol in enumerate(symbols))] = 1.0
    return out


def sample_mask(tokens, p: int, L: int, m: int = 1) -> np.ndarray:
    """``(N,)`` bool: column c is a sample iff it is token i of a demonstration with L <= i <= n_d - m."""
    cols = columns(tokens, p)
    mask = np.zeros(cols.size, dtype=bool)
    last_delimiter = max(c for c in range(cols.size) if cols[c] == p)
    start = 1
    for c in range(1, last_delimiter + 1):
        if cols[c] == p:
            length = c - start
            for i in range(L, length - m + 1):
                mask[start + i - 1] = True
            start = c + 1
    return mask


def regression_problem(tokens, p: int, L: int, m: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X (N', pL)`` covariates, ``Y (N', p^m)`` targets of the samples, ``x_test (pL,)`` of the last column.

    ``x = [e(o_c); e(o_{c-1}); ...; e(o_{c-L+1})]`` with p-dimensional one-hots (the delimiter
    coordinate dropped); ``y = e(o_{c+1})`` (m = 1) or the joint one-hot of the next m tokens.
    """
    blocks = history(tokens, p, L)[:, :, :p].reshape(-1, p * L)
    ahead = future(tokens, p, m)
    targets = ahead[:, 0, :p] if m == 1 else joint(ahead, p)
    mask = sample_mask(tokens, p, L, m)
    return blocks[mask], targets[mask], blocks[-1]


def hessian(X: np.ndarray, num_columns: int) -> np.ndarray:
    """``(1/N) X^T X``, the Hessian of the in-context loss (N = number of columns)."""
    return X.T @ X / num_columns


def gd_iterates(X: np.ndarray, Y: np.ndarray, eta: float, gd_steps: int, num_columns: int) -> np.ndarray:
    """``(T+1, p^m, pL)``, ``T = gd_steps``: ``W_0 = 0``, ``W_{t+1} = W_t - (eta/N) (W_t X^T - Y^T) X``."""
    W = np.zeros((Y.shape[1], X.shape[1]))
    iterates = [W]
    for _ in range(gd_steps):
        W = W - (eta / num_columns) * (W @ X.T - Y.T) @ X
        iterates.append(W)
    return np.stack(iterates)


def min_norm_solution(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Minimum-norm least-squares ``W+ = argmin ||W||_F`` over minimisers of ``sum ||y_j - W x_j||^2``."""
    return np.linalg.lstsq(X, Y, rcond=None)[0].T


def prediction(tokens, p: int, L: int, eta: float, gd_steps: int, m: int = 1) -> np.ndarray:
    """Reference end to end: ``W_T x_test`` with the ``T = gd_steps`` GD iterates of this prompt."""
    X, Y, x_test = regression_problem(tokens, p, L, m)
    return gd_iterates(X, Y, eta, gd_steps, len(tokens) + 1)[-1] @ x_test
