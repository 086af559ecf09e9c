"""Helpers shared by the tests/test_construction_*.py modules, and checks of the helpers."""
import numpy as np

import hmm


def hmm_prompt(p: int, demo_lengths: list[int], test_length: int, seed: int, num_states: int = 3) -> np.ndarray:
    """demo_1, p, ..., demo_n, p, test: every segment an independent run of one random HMM."""
    model = hmm.random_hmm(num_states, p, seed=seed)
    lengths = list(demo_lengths) + [test_length]
    runs, _ = hmm.sample_sequences(model, np.zeros(len(lengths), dtype=int), max(lengths), seed=seed + 1)
    pieces = []
    for run, length in zip(runs.numpy(), demo_lengths):
        pieces += [run[:length], [p]]
    pieces.append(runs.numpy()[-1][:test_length])
    return np.concatenate(pieces).astype(np.int64)


def test_hmm_prompt_follows_the_prompt_format():
    tokens = hmm_prompt(4, [5, 7, 3], 6, seed=0)
    assert tokens.shape == (5 + 1 + 7 + 1 + 3 + 1 + 6,)
    assert np.array_equal(np.flatnonzero(tokens == 4), [5, 13, 17])
    assert tokens.min() >= 0 and tokens.max() <= 4


def test_hmm_prompt_matches_hmm_sample_prompts_for_equal_lengths():
    """With equal demonstration lengths the delimiters sit where hmm.sample_prompts puts them."""
    fmt = hmm.PromptFormat(3, 6, 4)
    sampled = hmm.sample_prompts(hmm.Mixture.single(hmm.random_hmm(3, 4, seed=0)), 1, fmt, seed=0).tokens[0].numpy()
    ours = hmm_prompt(4, [6, 6, 6], 4, seed=0)
    assert np.array_equal(sampled == 4, ours == 4)
