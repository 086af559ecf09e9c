"""Which regime a trained RoFormer is in: does it infer the task in context, or has it memorised
its training HMMs? (``hmmtf evaluate``'s ``regime`` section; docs/empirical.md, "Regimes".)

The same metrics on two prompt sets, each against the true HMM of every prompt (the *oracle*,
which knows the task's parameters; no predictor of the prompt alone has a lower expected loss):

* **training HMMs**: the held-out prompts of ``hmmtf evaluate`` (new prompts, the training mixture);
* **fresh HMMs**: prompts from ``fresh_tasks`` HMMs never seen in training: the same generator
  (the preset's :class:`hmm.MixtureSpec`), a new seed ``stream_seed(mixture_seed, FRESH_MIXTURE_STREAM, 0)``.

A network that learned to infer in context does equally well on both; one that memorised its
training HMMs does better on them. The statistic, in nats per token, with the excess over the
oracle taken per prompt (so that the two sets' intrinsic difficulty cancels)::

    memorisation = E_fresh[loss(model) - loss(oracle)] - E_train[loss(model) - loss(oracle)]

standard error ``sqrt(se_fresh^2 + se_train^2)`` (independent prompt sets), reported as a
fraction of the training mixture's unigram-to-Bayes gap. Decision rule (stated before any
result): **in context** when the 95% interval lies below :data:`MEMORISATION_TOLERANCE` of the
gap, **memorising** when it lies above, **undetermined** otherwise.

The in-context ceiling for fresh HMMs is the posterior predictive under the generator's prior
(Dirichlet rows), which has no closed form. It is bracketed: the oracle's loss is below it, and
every valid predictor's loss is above it, in particular the Bayes predictor of a finite mixture of
other HMMs from the same prior (a Monte-Carlo approximation of the prior that converges to the
ceiling as the mixture grows): the training mixture itself (K_train HMMs) and a held-out
*reference* mixture of ``reference_tasks`` HMMs (``REFERENCE_MIXTURE_STREAM``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

import hmm
from empirical.training.data import stream_seed
from empirical.yardsticks.evaluate import Evaluation, Predictor, bayes_predictor, evaluate_predictors
from empirical.yardsticks.hand_built import task_memory_predictor
from empirical.training.presets import ExperimentPreset

FRESH_MIXTURE_STREAM = 8
"""Seed stream of the fresh HMMs (``stream_seed(mixture_seed, FRESH_MIXTURE_STREAM, 0)``)."""
REFERENCE_MIXTURE_STREAM = 9
"""Seed stream of the reference mixture of the fresh-HMM ceiling."""
FRESH_PROMPT_STREAM = 10
"""Seed stream of the prompts drawn from the fresh HMMs (``stream_seed(data_seed, ., 0)``)."""
MEMORISATION_TOLERANCE = 0.1
"""A model is 'in context' when its extra excess on fresh HMMs is below this fraction of the
training mixture's unigram-to-Bayes gap (95% interval), 'memorising' when above."""
Z_95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


@dataclass(frozen=True)
class Memorisation:
    """The module docstring's statistic on one scope: ``memorisation`` (nats/token), its ``stderr`` and
    95% interval, the training mixture's unigram-to-Bayes gap, ``fraction_of_gap = memorisation /
    training_gap``, and the :func:`memorisation_verdict`."""

    memorisation: float
    stderr: float
    interval_95: tuple[float, float]
    training_gap: float
    fraction_of_gap: float
    verdict: str


@dataclass(frozen=True)
class RegimeSection:
    """The ``regime`` section of ``evaluation.json`` (:func:`regime_section`): the rule in words, the
    HMM counts (training, fresh, reference) and how many HMMs the fresh set shares with the training
    mixture and the reference mixture with the fresh set (0: the sets are disjoint), the
    :class:`Memorisation` by scope (``test_sequence``, ``all_positions``), and the evaluation on the
    fresh HMMs' prompts."""

    definition: str
    training_tasks: int
    fresh_tasks: int
    reference_tasks: int
    fresh_shared_with_training: int
    reference_shared_with_fresh: int
    memorisation: dict[str, Memorisation]
    fresh_hmms: Evaluation


def family_mixture(spec: hmm.MixtureSpec, num_tasks: int, seed: int) -> hmm.Mixture:
    """``num_tasks`` HMMs from the generator of ``spec`` (its task count replaced), seeded by ``seed``."""
    if not isinstance(num_tasks, int) or num_tasks < 1:
        raise ValueError(f"num_tasks: {num_tasks!r}; expected an integer >= 1")
    return dataclasses.replace(spec, num_tasks=num_tasks).build(seed)


def family_prompts(spec: hmm.MixtureSpec, prompt_format: hmm.PromptFormat, num_prompts: int, num_tasks: int,
                   mixture_seed: int, prompt_seed: int) -> tuple[hmm.Mixture, hmm.Prompts]:
    """:func:`family_mixture` of ``mixture_seed`` and ``num_prompts`` of its prompts, drawn with ``prompt_seed``."""
    mixture = family_mixture(spec, num_tasks, mixture_seed)
    return mixture, hmm.sample_prompts(mixture, num_prompts, prompt_format, seed=prompt_seed)


def unseen_mixture(preset: ExperimentPreset, num_tasks: int, stream: int) -> hmm.Mixture:
    """``num_tasks`` HMMs from the generator of ``preset``'s mixture (its spec with another task
    count), seeded by ``stream_seed(preset.mixture_seed, stream, 0)``: none of them is a training HMM."""
    return family_mixture(preset.mixture_spec, num_tasks, stream_seed(preset.mixture_seed, stream, 0))


def fresh_prompts(preset: ExperimentPreset, num_prompts: int, num_tasks: int, mixture_stream: int = FRESH_MIXTURE_STREAM,
                  prompt_stream: int = FRESH_PROMPT_STREAM) -> tuple[hmm.Mixture, hmm.Prompts]:
    """:func:`unseen_mixture` of ``mixture_stream`` and the first ``num_prompts`` prompts of draw 0 of
    ``prompt_stream`` (``stream_seed(preset.data_seed, prompt_stream, 0)``); by default the competence
    result's fresh HMMs and prompts."""
    return family_prompts(preset.mixture_spec, preset.prompt_format, num_prompts, num_tasks,
                          stream_seed(preset.mixture_seed, mixture_stream, 0),
                          stream_seed(preset.data_seed, prompt_stream, 0))


def shared_hmms(mixture: hmm.Mixture, other: hmm.Mixture) -> int:
    """How many HMMs of ``mixture`` equal (every parameter, bit for bit) an HMM of ``other``."""
    def parameter_bytes(source: hmm.Mixture) -> list[bytes]:
        model = source.hmm
        flat = torch.cat([model.initial, model.transition.flatten(1), model.emission.flatten(1)], dim=1)
        return [row.tobytes() for row in flat.double().cpu().numpy()]

    theirs = set(parameter_bytes(other))
    return sum(row in theirs for row in parameter_bytes(mixture))


def oracle_predictor(mixture: hmm.Mixture, prompts: hmm.Prompts) -> Predictor:
    """Each prompt's own HMM (``mixture`` task ``prompts.task_ids[b]``) as its predictor: the exact
    next-token distribution given the task (:func:`empirical.yardsticks.hand_built.task_memory_predictor` with
    whole segments as the history). Only for ``prompts.tokens``."""
    own_filters = task_memory_predictor(mixture, prompts.task_ids, prompts.format, history_length=None)

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape != prompts.tokens.shape or not torch.equal(tokens, prompts.tokens):
            raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected the {len(prompts.tokens)} prompts the "
                             f"oracle was built for (it needs each prompt's task)")
        return own_filters(tokens)

    return predict


def memorisation_verdict(memorisation: float, stderr: float, gap: float) -> str:
    """The module docstring's rule on ``memorisation`` (nats) with its standard error, against
    ``MEMORISATION_TOLERANCE * gap``."""
    for name, value in (("stderr", stderr), ("gap", gap)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: {value!r}; expected a positive finite number")
    bar = MEMORISATION_TOLERANCE * gap
    if memorisation + Z_95 * stderr < bar:
        return "in context"
    if memorisation - Z_95 * stderr > bar:
        return "memorising"
    return "undetermined"


def regime_section(predictors: dict[str, Predictor], mixture: hmm.Mixture, preset: ExperimentPreset,
                   training: Evaluation, num_prompts: int, fresh_tasks: int, reference_tasks: int,
                   device: torch.device) -> RegimeSection:
    """The ``regime`` section of ``evaluation.json``. ``predictors``: the ``model`` and the training
    mixture's ``unigram`` (:func:`empirical.yardsticks.evaluate.in_context_predictors`); ``training``: the
    evaluation on the training HMMs' held-out prompts, with an ``oracle`` predictor and the paired
    ``model - oracle`` loss (``hmmtf evaluate``'s main evaluation). Adds ``num_prompts`` prompts of
    fresh HMMs, evaluated against their oracle (:func:`evaluate_predictors`, reference = the
    oracle) beside the training mixture's and the reference mixture's Bayes predictors
    (``bayes_training``, ``bayes_reference``), and the memorisation statistic with its verdict."""
    if training.paired is None or "model - oracle" not in training.paired:
        raise ValueError("training: no paired 'model - oracle' loss difference; expected the evaluation with "
                         "pairs=(('model', 'oracle'),) (hmmtf evaluate's main evaluation)")
    fresh, prompts_of_fresh = fresh_prompts(preset, num_prompts, fresh_tasks)
    reference = unseen_mixture(preset, reference_tasks, REFERENCE_MIXTURE_STREAM)

    def on_device(source: hmm.Mixture) -> hmm.Mixture:
        return hmm.Mixture(source.hmm.to(device), source.weights.to(device))

    unseen = evaluate_predictors(
        {"model": predictors["model"], "oracle": oracle_predictor(fresh, prompts_of_fresh),
         "bayes_training": bayes_predictor(on_device(mixture)), "bayes_reference": bayes_predictor(on_device(reference)),
         "unigram": predictors["unigram"]},
        prompts_of_fresh, mixture.num_tokens, reference="oracle", pairs=(("model", "oracle"),))
    memorisation = {}
    for scope, training_metrics in (("test_sequence", training.test_sequence), ("all_positions", training.all_positions)):
        train_excess = training.paired["model - oracle"][scope]
        fresh_excess = unseen.paired["model - oracle"][scope]
        value = fresh_excess.loss_difference - train_excess.loss_difference
        stderr = math.hypot(fresh_excess.loss_difference_stderr, train_excess.loss_difference_stderr)
        gap = training_metrics["unigram"].loss - training_metrics["bayes"].loss
        memorisation[scope] = Memorisation(
            memorisation=value, stderr=stderr, interval_95=(value - Z_95 * stderr, value + Z_95 * stderr),
            training_gap=gap, fraction_of_gap=value / gap, verdict=memorisation_verdict(value, stderr, gap))
    return RegimeSection(
        definition="memorisation = E_fresh[loss(model) - loss(oracle)] - E_train[loss(model) - loss(oracle)] "
                   f"(nats/token); in context if its 95% interval is below {MEMORISATION_TOLERANCE} x the training "
                   "mixture's unigram-to-Bayes gap, memorising if above",
        training_tasks=mixture.num_tasks,
        fresh_tasks=fresh_tasks,
        reference_tasks=reference_tasks,
        fresh_shared_with_training=shared_hmms(fresh, mixture),
        reference_shared_with_fresh=shared_hmms(reference, fresh),
        memorisation=memorisation,
        fresh_hmms=unseen,
    )
