"""The prompt stream a run trains on (:func:`training_stream`): the plain stream of
:mod:`empirical.training.data`, or, with the plateau study's options of :class:`TrainConfig`
(issue 51; ``docs/empirical.md``, "The plateau study"), a stream whose targets or prompts differ:

- **soft targets** (``soft_targets``): every batch carries each prompt's own HMM's next-token
  distribution (:func:`filtered_targets`), which the training loop's loss puts in place of the
  sampled token. The loss is linear in the target and ``E[one_hot(x_{t+1}) | x_{<=t}, task]`` is
  that distribution, so the expected gradient is unchanged and the target's sampling noise is gone.
- **a curriculum** (``curriculum_mixture``, ``curriculum_steps``, ``curriculum_share``): a share
  of each batch, falling linearly to none, comes from an easier mixture of the same tokens
  (:class:`Curriculum`).
- **a curriculum on context length** (``context_curriculum_steps``, ``context_curriculum_demos``):
  the prompts of the first steps hold fewer demonstrations, their count growing linearly to the
  prompt format's (:class:`ContextCurriculum`). Every prompt of a step has the same length, and a
  step's prompts are those of the plain stream's seed at that step's format.

The held-out and evaluation streams never change: they are :mod:`empirical.training.data`'s.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import NamedTuple

import torch

import hmm
from empirical.training.data import TRAIN_STREAM, PromptStream, prompt_batch, stream_seed
from empirical.training.presets import ExperimentPreset
from empirical.training.train import Batch

CURRICULUM_STREAM = 3
"""Stream of a curriculum's prompts (index = step); :mod:`empirical.training.data` uses 0-2."""


class ContextCurriculum(NamedTuple):
    """Prompts of ``d(s) = min(D, demos + floor((D - demos + 1) s / steps))`` demonstrations at
    step ``s < steps``, of the full format's ``D`` after (``TrainConfig.context_curriculum_steps``)."""

    steps: int
    demos: int

    def format_at(self, full: hmm.PromptFormat, step: int) -> hmm.PromptFormat:
        """The prompt format of ``step`` in a curriculum towards ``full``."""
        total = full.num_demos
        if step >= self.steps:
            return full
        return replace(full, num_demos=min(total, self.demos + (total - self.demos + 1) * step // self.steps))


class Curriculum(NamedTuple):
    """Prompts of an easier ``mixture`` (the same tokens) in the first ``steps`` steps: a share
    ``share * max(0, 1 - step / steps)`` of each batch, rounded to prompts."""

    mixture: hmm.Mixture
    steps: int
    share: float

    def prompts_at(self, step: int, batch_size: int) -> int:
        """How many of the ``batch_size`` prompts of ``step`` come from the curriculum's mixture."""
        return round(batch_size * self.share * max(0.0, 1.0 - step / self.steps))


def filtered_targets(mixture: hmm.Mixture, prompts: hmm.Prompts) -> torch.Tensor:
    """``(B, N, p + 1)`` float32: each prompt's own HMM's next-token distribution
    (:func:`hmm.own_task_predictive`) in ``mixture``'s precision, with a zero column for the
    delimiter (never a target). :class:`StudyStream` filters in float32: on a batch of the
    ``paper`` mixture that differs from float64 by at most 3e-7 and is 5x faster (0.035 s against
    0.17 s for 32 prompts on one core)."""
    return torch.nn.functional.pad(hmm.own_task_predictive(mixture, prompts).float(), (0, 1))


class StudyStream(PromptStream):
    """A :class:`PromptStream` with the plateau study's options: the last
    :meth:`Curriculum.prompts_at` prompts of a batch drawn from the ``curriculum``'s mixture with
    ``stream_seed(seed, CURRICULUM_STREAM, step)`` (the others from the training mixture's stream,
    as a plain stream draws them), with ``soft_targets`` the batch's :func:`filtered_targets`, and
    with a ``context`` curriculum every prompt of the step in its :meth:`ContextCurriculum.format_at`."""

    def __init__(self, mixture: hmm.Mixture, prompt_format: hmm.PromptFormat, batch_size: int, seed: int, *,
                 soft_targets: bool, curriculum: Curriculum | None, context: ContextCurriculum | None = None) -> None:
        if curriculum is not None and curriculum.mixture.num_tokens != mixture.num_tokens:
            raise ValueError(f"curriculum_mixture: {curriculum.mixture.num_tokens} tokens; expected the training "
                             f"mixture's {mixture.num_tokens} (the same vocabulary)")
        super().__init__(mixture, prompt_format, batch_size, seed)
        self.soft_targets = soft_targets
        self.curriculum = curriculum
        self.context = context
        # float32 copies of the mixtures for the filtered targets, made once (the paper mixture's is 0.5 GB)
        sources = (mixture,) if curriculum is None else (mixture, curriculum.mixture)
        self._filtering = {id(source): hmm.Mixture(source.hmm.to(dtype=torch.float32), source.weights.float())
                           for source in sources} if soft_targets else {}

    def curriculum_prompts(self, step: int) -> int:
        """How many prompts of ``step`` come from the curriculum (0 without one)."""
        return 0 if self.curriculum is None else self.curriculum.prompts_at(step, self.batch_size)

    def format_at(self, step: int) -> hmm.PromptFormat:
        """The prompt format of ``step``'s prompts (the stream's, but in a context curriculum)."""
        return self.prompt_format if self.context is None else self.context.format_at(self.prompt_format, step)

    def prompts(self, step: int) -> hmm.Prompts:
        """The prompts of ``step`` from the training mixture (with task ids and hidden states)."""
        return hmm.sample_prompts(self.mixture, self.batch_size - self.curriculum_prompts(step), self.format_at(step),
                                  seed=stream_seed(self.seed, TRAIN_STREAM, step))

    def _parts(self, step: int) -> list[tuple[hmm.Mixture, hmm.Prompts]]:
        """``(mixture, prompts)`` of the training mixture's prompts, then the curriculum's."""
        easy = self.curriculum_prompts(step)
        parts = [(self.mixture, self.prompts(step))] if easy < self.batch_size else []
        if easy:
            parts.append((self.curriculum.mixture, hmm.sample_prompts(
                self.curriculum.mixture, easy, self.format_at(step), seed=stream_seed(self.seed, CURRICULUM_STREAM, step))))
        return parts

    def __call__(self, step: int) -> Batch:
        parts = self._parts(step)
        batches = [prompt_batch(prompts, self.mixture.delimiter) for _, prompts in parts]
        inputs, targets = (torch.cat([getattr(batch, name) for batch in batches]) for name in ("inputs", "targets"))
        if not self.soft_targets:
            return Batch(inputs, targets)
        soft = [filtered_targets(self._filtering[id(source)], prompts) for source, prompts in parts]
        return Batch(inputs, targets, torch.cat(soft))


def context_curriculum(preset: ExperimentPreset) -> ContextCurriculum | None:
    """The :class:`ContextCurriculum` of ``preset``'s training config (None without one);
    ``ValueError`` when it starts from as many demonstrations as the prompt format has, or more."""
    train, full = preset.train, preset.prompt_format
    if not train.context_curriculum_steps:
        return None
    if not train.context_curriculum_demos < full.num_demos:
        raise ValueError(f"context_curriculum_demos: {train.context_curriculum_demos}; expected fewer than the prompt "
                         f"format's {full.num_demos} demonstrations")
    return ContextCurriculum(train.context_curriculum_steps, train.context_curriculum_demos)


def step_lengths(preset: ExperimentPreset, start: int, stop: int) -> Counter:
    """``{prompt length: steps}`` of the steps ``start..stop-1`` of ``preset``'s training stream
    (one length, the format's, without a context curriculum)."""
    context = context_curriculum(preset)
    if context is None:
        return Counter({preset.prompt_format.length: stop - start})
    return Counter(context.format_at(preset.prompt_format, step).length for step in range(start, stop))


def training_stream(mixture: hmm.Mixture, preset: ExperimentPreset) -> PromptStream:
    """The prompt stream ``preset`` trains on: ``preset.train.batch_size`` prompts a step of
    ``mixture`` (the preset's, built) from the preset's data seed; a plain :class:`PromptStream`,
    or a :class:`StudyStream` with the training config's soft targets, curriculum (whose
    mixture is generated from the preset's mixture seed) and context curriculum."""
    train = preset.train
    context = context_curriculum(preset)
    if not train.soft_targets and not train.curriculum_mixture and context is None:
        return PromptStream(mixture, preset.prompt_format, train.batch_size, preset.data_seed)
    curriculum = None
    if train.curriculum_mixture:
        if train.curriculum_mixture not in hmm.MIXTURE_SPECS:
            raise ValueError(f"curriculum_mixture: {train.curriculum_mixture!r}; expected one of "
                             f"{sorted(hmm.MIXTURE_SPECS)}")
        easy = hmm.MIXTURE_SPECS[train.curriculum_mixture].build(preset.mixture_seed)
        curriculum = Curriculum(easy, train.curriculum_steps, train.curriculum_share)
    return StudyStream(mixture, preset.prompt_format, train.batch_size, preset.data_seed,
                       soft_targets=train.soft_targets, curriculum=curriculum, context=context)
