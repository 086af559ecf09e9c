"""Oracles shared by the Markov-chain tests: the bigram predictor (the chain's own kernel) and
the exact variance of its mean log-loss, which sets the sampling tolerance of
``test_bigram_predictor_reaches_the_entropy_rate``."""
import numpy as np
import torch

from empirical.markov.chains import check_kernel, stationary_distribution, surprise
from hmm import check_tokens


def bigram_log_probs(kernel, tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T, m)`` log-predictions of the bigram predictor: row ``t`` is ``log kernel[x_t]``."""
    kernel = check_kernel(kernel)
    tokens = check_tokens(tokens, kernel.shape[0], "tokens")
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(kernel))[tokens]


def bigram_loss_variance(kernel, num_predicted: int) -> float:
    """Exact variance of the bigram predictor's mean log-loss over ``n = num_predicted`` tokens of
    one stationary sequence.

    With ``l_t = -log P(x_t, x_{t+1})``, ``f_ij = -log P_ij``, ``h_i = sum_j P_ij f_ij`` (so
    ``E l_t = pi^T h = H_rate``) and ``a_j = sum_i pi_i P_ij f_ij``::

        c_0 = Var l_t = sum_ij pi_i P_ij f_ij^2 - H_rate^2,
        c_d = Cov(l_t, l_{t+d}) = a^T P^{d-1} h - H_rate^2          (d >= 1),
        Var((1/n) sum_t l_t) = (n c_0 + 2 sum_{d=1}^{n-1} (n - d) c_d) / n^2.

    The covariances decay like ``lambda_2^d`` (``lambda_2 = 1 - p - q`` for the binary chain), so
    by the Markov-chain CLT the mean of ``B`` independent sequences is normal with standard
    deviation ``sqrt(bigram_loss_variance / B)`` for large ``B`` or ``n``.
    """
    kernel = check_kernel(kernel)
    if not isinstance(num_predicted, (int, np.integer)) or num_predicted < 1:
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
