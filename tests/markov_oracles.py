"""Oracles shared by the Markov-chain tests: the bigram predictor (the chain's own kernel), and
the rounding of a read-back of predictions that depend on the current token only."""
import numpy as np
import torch

from empirical.markov.chains import check_kernel
from hmm import check_tokens
from rounding import gamma


def bigram_log_probs(kernel, tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T, m)`` log-predictions of the bigram predictor: row ``t`` is ``log kernel[x_t]``."""
    kernel = check_kernel(kernel)
    tokens = check_tokens(tokens, kernel.shape[0], "tokens")
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(kernel))[tokens]


def constant_read_back_rounding(tokens: torch.Tensor) -> float:
    """Bound on the float64 rounding of ``read_back_kernel(tokens, probs)``'s mean and spread when
    ``probs`` gives every position with the same current token one vector q (entries <= 1).

    The mean of ``n <= B (T - 1)`` copies of ``q_j`` (summed in any order, then divided by n) is
    within ``gamma_n q_j`` of it (Higham, Lemma 3.1), so is every deviation ``q_j - mean`` (computed
    exactly: the two are within a factor 2), and so is their root mean square, up to its own
    rounding, less than another factor 2: ``2 gamma_n``.
    """
    return 2 * gamma(tokens[:, :-1].numel())
