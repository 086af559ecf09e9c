"""hmmlearn's ``CategoricalHMM`` holding one of our HMMs: an independent implementation of the
forward algorithm, the oracle of the filtering and memory tests.

hmmlearn imports scikit-learn and pandas (2.4 s on 2 cores), so it is imported when the first
oracle is built, not when the test modules are collected, and the tests that build one are marked
:data:`on_the_hmmlearn_worker` (one xdist group): one worker pays the import, not both."""
import numpy as np
import pytest

from rounding import gamma, unit_roundoff

on_the_hmmlearn_worker = pytest.mark.xdist_group("hmmlearn")


def hmmlearn_model(model, initial: np.ndarray | None = None):
    """A ``CategoricalHMM`` with the transition and emission probabilities of our ``hmm.HMM``
    ``model`` and its initial distribution, or ``initial`` (none of them refit)."""
    from hmmlearn.hmm import CategoricalHMM

    reference = CategoricalHMM(n_components=model.num_states, n_features=model.num_tokens, init_params="", params="")
    reference.startprob_ = model.initial.numpy() if initial is None else initial
    reference.transmat_, reference.emissionprob_ = model.transition.numpy(), model.emission.numpy()
    return reference


def forward_rounding(num_states: int, length: int, log_likelihood: float) -> float:
    """First-order bound on the float64 rounding error of the log-likelihood ``log p`` of ``length``
    tokens from a forward pass over ``num_states`` states, scaled (ours, hmmlearn's ``scaling``)
    or in log space (hmmlearn's ``log``): ``T (S + 3) u + 3 T u |log p|`` (Higham, Lemma 3.1).

    Scaled: a step multiplies the normalised belief by an S x S matrix and an emission column, all
    nonnegative, and divides by their sum ``c_t``. Every entry of the unnormalised path so gains a
    relative error of at most ``gamma_S + 3u ~ (S + 3) u`` per step, which ``log p`` inherits
    absolutely; ``log p = sum_t log c_t`` adds ``u |log c_t|`` per logarithm and ``gamma_T
    sum_t |log c_t|`` for the sum, where ``sum_t |log c_t| = |log p|`` (every ``c_t <= 1``).
    Log space: a step is a log-sum-exp of S terms, within ``(S + 3) u`` of the exact one plus u
    times the magnitudes of the log-probabilities it adds, at most about ``|log p|`` each.
    Two implementations then differ by at most twice the bound.
    """
    return length * (num_states + 3) * unit_roundoff() + 3 * gamma(length) * abs(log_likelihood)
