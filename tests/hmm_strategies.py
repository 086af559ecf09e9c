"""Hypothesis strategies and small oracles shared by the hmm tests."""
import itertools
import math

import torch
from hypothesis import strategies as st

import hmm


@st.composite
def small_hmms(draw, max_states: int = 4, max_tokens: int = 4, batch: tuple[int, ...] = ()):
    """Random HMMs with random concentrations (sparse to flat), dense enough to emit anything."""
    num_states = draw(st.integers(1, max_states))
    num_tokens = draw(st.integers(2, max_tokens))
    concentration = draw(st.sampled_from([0.3, 1.0, 5.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    model = hmm.random_hmm(
        num_states, num_tokens, batch=batch, transition_concentration=concentration,
        emission_concentration=concentration, initial="dirichlet", seed=seed,
    )
    # Keep every emission > 0 so any token sequence has positive probability.
    emission = 0.9 * model.emission + 0.1 / num_tokens
    return hmm.HMM(model.initial, model.transition, emission)


def token_sequences(num_tokens: int, min_length: int = 1, max_length: int = 6):
    return st.lists(st.integers(0, num_tokens - 1), min_size=min_length, max_size=max_length)


def enumerate_joint(model: hmm.HMM, tokens: list[int]) -> torch.Tensor:
    """``(S,)``: ``P(o_1..o_T, s_T = s)`` by summing over all S^T hidden paths (single HMM)."""
    S = model.num_states
    # Python floats (the same float64 values): scalar arithmetic on tensors would cost ~100x more.
    initial, transition, emission = (parameter.double().tolist()
                                     for parameter in (model.initial, model.transition, model.emission))
    joint = [0.0] * S
    for path in itertools.product(range(S), repeat=len(tokens)):
        probability = initial[path[0]] * emission[path[0]][tokens[0]]
        for previous, current, token in zip(path, path[1:], tokens[1:]):
            probability = probability * transition[previous][current] * emission[current][token]
        joint[path[-1]] += probability
    return torch.tensor(joint, dtype=torch.float64)


def enumerate_sequence_probability(model: hmm.HMM, tokens: list[int]) -> float:
    return float(enumerate_joint(model, tokens).sum())


def sampling_tolerance(probability: float, count: int, sigmas: float = 5.0) -> float:
    """``sigmas`` binomial standard errors of an empirical frequency of ``count`` draws."""
    return sigmas * math.sqrt(max(probability * (1 - probability), 1e-12) / count)
