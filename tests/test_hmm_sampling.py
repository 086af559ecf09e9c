"""Sampling: exact frequencies within stated binomial error, prompt layout, determinism."""
import itertools

import torch
from hmm_strategies import enumerate_sequence_probability, sampling_tolerance

import hmm


def test_pair_frequencies_match_exact_probabilities():
    """Empirical frequencies of (o_1, o_2) against enumeration, within 5 binomial standard errors."""
    model = hmm.random_hmm(3, 3, transition_concentration=0.7, emission_concentration=0.7, seed=0)
    count = 200_000
    tokens, _ = hmm.sample_sequences(model, torch.zeros(count, dtype=torch.long), 2, seed=1)
    codes = tokens[:, 0] * 3 + tokens[:, 1]
    frequencies = torch.bincount(codes, minlength=9).double() / count
    for first, second in itertools.product(range(3), repeat=2):
        exact = enumerate_sequence_probability(model, [first, second])
        assert abs(frequencies[first * 3 + second].item() - exact) <= sampling_tolerance(exact, count)


def test_zero_probability_transitions_and_emissions_never_occur():
    mixture = hmm.Mixture.uniform(hmm.random_hmm(6, 5, batch=(4,), transition_concentration=0.05, emission_concentration=0.05, seed=2))
    prompts = hmm.sample_prompts(mixture, 300, hmm.PromptFormat(3, 7, 5), seed=3)
    model = mixture.hmm
    real = prompts.states >= 0
    task = prompts.task_ids[:, None].expand_as(prompts.states)
    emitted = model.emission[task[real], prompts.states[real], prompts.tokens[real]]
    assert (emitted > 0).all()
    consecutive = real[:, 1:] & real[:, :-1]
    moved = model.transition[task[:, 1:][consecutive], prompts.states[:, :-1][consecutive], prompts.states[:, 1:][consecutive]]
    assert (moved > 0).all()


def test_prompt_layout_and_delimiters():
    fmt = hmm.PromptFormat(num_demos=2, demo_length=3, test_length=4)
    assert fmt.length == 12
    assert fmt.segment_index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert fmt.position_in_segment.tolist() == [0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, 3]
    mixture = hmm.mixture_preset("tiny")
    prompts = hmm.sample_prompts(mixture, 50, fmt, seed=0)
    assert prompts.tokens.shape == (50, 12) and prompts.states.shape == (50, 12)
    assert (prompts.tokens[:, fmt.is_delimiter] == mixture.delimiter).all()
    assert (prompts.tokens[:, ~fmt.is_delimiter] < mixture.delimiter).all()
    assert (prompts.states[:, fmt.is_delimiter] == -1).all()


def test_each_segment_restarts_from_the_initial_distribution():
    """The first state of every segment follows ``initial`` of the prompt's task (5 sigma)."""
    model = hmm.random_hmm(3, 2, initial="dirichlet", seed=4)
    prompts = hmm.sample_prompts(hmm.Mixture.single(model), 40_000, hmm.PromptFormat(2, 3, 3), seed=5)
    for start in (0, 4, 8):
        frequencies = torch.bincount(prompts.states[:, start], minlength=3).double() / 40_000
        for state in range(3):
            exact = model.initial[state].item()
            assert abs(frequencies[state].item() - exact) <= sampling_tolerance(exact, 40_000)


def test_task_frequencies_follow_weights():
    model = hmm.random_hmm(2, 2, batch=(3,), seed=6)
    weights = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    prompts = hmm.sample_prompts(hmm.Mixture(model, weights), 30_000, hmm.PromptFormat(0, 1, 2), seed=7)
    frequencies = torch.bincount(prompts.task_ids, minlength=3).double() / 30_000
    for task in range(3):
        assert abs(frequencies[task].item() - weights[task].item()) <= sampling_tolerance(weights[task].item(), 30_000)


def test_same_seed_same_prompts_and_different_seed_different_prompts():
    mixture = hmm.mixture_preset("tiny")
    fmt = hmm.PROMPT_FORMATS["tiny"]
    first = hmm.sample_prompts(mixture, 20, fmt, seed=11)
    second = hmm.sample_prompts(mixture, 20, fmt, seed=11)
    third = hmm.sample_prompts(mixture, 20, fmt, seed=12)
    assert torch.equal(first.tokens, second.tokens) and torch.equal(first.states, second.states)
    assert not torch.equal(first.tokens, third.tokens)
