"""hmmlearn's ``CategoricalHMM`` holding one of our HMMs: an independent implementation of the
forward algorithm, the oracle of the filtering and memory tests.

hmmlearn imports scikit-learn and pandas (2.4 s on 2 cores), so it is imported when the first
oracle is built, not when the test modules are collected, and the tests that build one are marked
:data:`on_the_hmmlearn_worker` (one xdist group): one worker pays the import, not both."""
import numpy as np
import pytest

on_the_hmmlearn_worker = pytest.mark.xdist_group("hmmlearn")


def hmmlearn_model(model, initial: np.ndarray | None = None):
    """A ``CategoricalHMM`` with the transition and emission probabilities of our ``hmm.HMM``
    ``model`` and its initial distribution, or ``initial`` (none of them refit)."""
    from hmmlearn.hmm import CategoricalHMM

    reference = CategoricalHMM(n_components=model.num_states, n_features=model.num_tokens, init_params="", params="")
    reference.startprob_ = model.initial.numpy() if initial is None else initial
    reference.transmat_, reference.emissionprob_ = model.transition.numpy(), model.emission.numpy()
    return reference
