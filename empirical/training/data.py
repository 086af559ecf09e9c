"""Prompts from a mixture of HMMs as training batches: a fresh batch every step, held-out prompts
for evaluation.

Every random draw comes from its own seed ``stream_seed(seed, stream, index)``: the training batch
of step ``s`` is ``stream_seed(seed, TRAIN_STREAM, s)``, so it depends on nothing but the seed and
``s`` (a resumed run and every DDP rank see the same global batch), and evaluation prompts come
from other streams, never from training's.

Objective (see ``docs/empirical.md``): causal next-token prediction of every HMM token after
the first; the delimiter is never a target (its place is fixed by the prompt format).
"""
from __future__ import annotations

import numpy as np
import torch

import hmm
from empirical.training.train import IGNORE_INDEX, Batch

TRAIN_STREAM = 0
"""Stream of the training batches (index = step)."""
EVAL_STREAM = 1
"""Stream of the held-out evaluation prompts (index 0)."""
UNIGRAM_STREAM = 2
"""Stream of the prompts whose token counts give the unigram baseline (index 0)."""


def stream_seed(seed: int, stream: int, index: int) -> int:
    """A 64-bit seed for draw ``index`` of ``stream``, from ``numpy.random.SeedSequence`` of the
    three integers (statistically independent streams, not ``seed + index``)."""
    for name, value in (("seed", seed), ("stream", stream), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name}: {value!r}; expected an integer >= 0")
    words = np.random.SeedSequence([int(seed), int(stream), int(index)]).generate_state(2, dtype=np.uint32)
    return int(words[0]) << 32 | int(words[1])


def prompt_batch(prompts: hmm.Prompts, delimiter: int) -> Batch:
    """Inputs = the prompt tokens; ``targets[:, t] = tokens[:, t + 1]`` where that token is an HMM
    token, :data:`IGNORE_INDEX` where it is the delimiter and at the last position."""
    tokens = prompts.tokens
    targets = torch.full_like(tokens, IGNORE_INDEX)
    following = tokens[:, 1:]
    targets[:, :-1] = following.masked_fill(following == delimiter, IGNORE_INDEX)
    return Batch(tokens, targets)


class PromptStream:
    """Batch function for :func:`empirical.training.train.train`: ``stream(step)`` is a batch of
    ``batch_size`` fresh prompts drawn with ``stream_seed(seed, TRAIN_STREAM, step)``."""

    def __init__(self, mixture: hmm.Mixture, prompt_format: hmm.PromptFormat, batch_size: int, seed: int) -> None:
        self.mixture = mixture
        self.prompt_format = prompt_format
        self.batch_size = batch_size
        self.seed = seed

    def prompts(self, step: int) -> hmm.Prompts:
        """The prompts of ``step`` (with task ids and hidden states)."""
        return hmm.sample_prompts(
            self.mixture, self.batch_size, self.prompt_format, seed=stream_seed(self.seed, TRAIN_STREAM, step)
        )

    def __call__(self, step: int) -> Batch:
        return prompt_batch(self.prompts(step), self.mixture.delimiter)


def held_out_prompts(mixture: hmm.Mixture, prompt_format: hmm.PromptFormat, num_prompts: int, seed: int) -> hmm.Prompts:
    """Evaluation prompts: the same distribution as training, drawn from :data:`EVAL_STREAM`."""
    return hmm.sample_prompts(mixture, num_prompts, prompt_format, seed=stream_seed(seed, EVAL_STREAM, 0))


def unigram_distribution(mixture: hmm.Mixture, prompt_format: hmm.PromptFormat, num_prompts: int, seed: int) -> torch.Tensor:
    """``(p,)`` float64: frequencies of the HMM tokens in ``num_prompts`` prompts of
    :data:`UNIGRAM_STREAM` with one pseudo-count per token,
    ``u(o) = (count(o) + 1) / (total + p)`` -- the best context-free predictor, estimated."""
    tokens = hmm.sample_prompts(mixture, num_prompts, prompt_format, seed=stream_seed(seed, UNIGRAM_STREAM, 0)).tokens
    counts = torch.bincount(tokens[tokens != mixture.delimiter], minlength=mixture.num_tokens).double()
    return (counts + 1) / (counts.sum() + mixture.num_tokens)
