"""Prompt streams: determinism by (seed, step), target alignment, held-out streams, the unigram
estimate against the exact token marginal."""
import pytest
import torch

import hmm
from empirical.training.data import (
    EVAL_STREAM,
    TRAIN_STREAM,
    UNIGRAM_STREAM,
    PromptStream,
    held_out_prompts,
    prompt_batch,
    stream_seed,
    unigram_distribution,
)
from empirical.training.train import IGNORE_INDEX
from rounding import gamma

MIXTURE = hmm.mixture_preset("tiny")
FORMAT = hmm.PROMPT_FORMATS["tiny"]


def test_stream_is_a_function_of_seed_and_step():
    stream = PromptStream(MIXTURE, FORMAT, batch_size=16, seed=3)
    again = PromptStream(MIXTURE, FORMAT, batch_size=16, seed=3)
    assert torch.equal(stream(5).inputs, again(5).inputs)
    assert torch.equal(stream(5).targets, again(5).targets)
    assert not torch.equal(stream(5).inputs, stream(6).inputs)
    assert not torch.equal(stream(5).inputs, PromptStream(MIXTURE, FORMAT, 16, seed=4)(5).inputs)


def test_targets_are_the_next_hmm_token():
    prompts = PromptStream(MIXTURE, FORMAT, batch_size=8, seed=0).prompts(0)
    batch = prompt_batch(prompts, MIXTURE.delimiter)
    tokens, targets = batch.inputs, batch.targets
    assert torch.equal(tokens, prompts.tokens)
    delimiter_next = FORMAT.is_delimiter[1:]
    assert torch.equal(targets[:, :-1][:, ~delimiter_next], tokens[:, 1:][:, ~delimiter_next])
    assert (targets[:, :-1][:, delimiter_next] == IGNORE_INDEX).all()
    assert (targets[:, -1] == IGNORE_INDEX).all()
    # Every HMM token but the first of the prompt is a target.
    assert int((targets[0] != IGNORE_INDEX).sum()) == FORMAT.length - FORMAT.num_demos - 1


def test_held_out_prompts_come_from_their_own_stream():
    # Prompts of a sparse tiny mixture can coincide by chance; the draws must not.
    held_out = held_out_prompts(MIXTURE, FORMAT, 64, seed=0)
    expected = hmm.sample_prompts(MIXTURE, 64, FORMAT, seed=stream_seed(0, EVAL_STREAM, 0))
    assert torch.equal(held_out.tokens, expected.tokens)
    training_seeds = {stream_seed(0, TRAIN_STREAM, step) for step in range(10_000)}
    assert stream_seed(0, EVAL_STREAM, 0) not in training_seeds
    assert stream_seed(0, UNIGRAM_STREAM, 0) not in training_seeds


def test_stream_seeds_differ_across_streams_and_indices_and_reject_negatives():
    seeds = {stream_seed(0, stream, index) for stream in range(3) for index in range(100)}
    assert len(seeds) == 300
    with pytest.raises(ValueError, match="index: -1; expected an integer >= 0"):
        stream_seed(0, 0, -1)


def test_unigram_matches_the_exact_token_marginal():
    # Chains start in their stationary law pi_k, so every token has marginal sum_k w_k pi_k O_k.
    model = MIXTURE.hmm
    stationary = hmm.stationary_distribution(model.transition)
    exact = torch.einsum("k,ks,ksp->p", MIXTURE.weights, stationary, model.emission)
    estimate = unigram_distribution(MIXTURE, FORMAT, 4000, seed=0)
    # (count + 1) and (total + p) are exact integers, so the p quotients are the exact ones times
    # 1 + d with |d| <= u, and their sum adds gamma_{p-1}: within gamma_p of 1 (Higham, Lemma 3.1).
    assert float(estimate.sum()) == pytest.approx(1.0, rel=0, abs=gamma(MIXTURE.num_tokens))
    # Prompts share a task, so tokens are correlated: 4000 prompts ~ 4000 task draws; the
    # standard error of a frequency is about sqrt(var over tasks / 4000) < 0.008; allow 4 s.e.
    torch.testing.assert_close(estimate, exact, atol=0.03, rtol=0)
