"""Oracle shared by the Markov-chain tests: the bigram predictor (the chain's own kernel)."""
import numpy as np
import torch

from empirical.markov.chains import check_kernel
from hmm import check_tokens


def bigram_log_probs(kernel, tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T, m)`` log-predictions of the bigram predictor: row ``t`` is ``log kernel[x_t]``."""
    kernel = check_kernel(kernel)
    tokens = check_tokens(tokens, kernel.shape[0], "tokens")
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(kernel))[tokens]
