"""Exact hidden-Markov-model engine: parameters, filtering, sampling, mixtures, memory predictors."""
from hmm.filtering import FilterResult, filter_beliefs, log_likelihood, next_token_probs
from hmm.model import HMM, check_stochastic, check_tokens

__all__ = [
    "HMM",
    "FilterResult",
    "check_stochastic",
    "check_tokens",
    "filter_beliefs",
    "log_likelihood",
    "next_token_probs",
]
