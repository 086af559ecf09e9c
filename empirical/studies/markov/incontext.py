"""In-context Markov chains: a fresh random kernel per sequence, the setting of the companion's
claim M7 ("two or more layers estimate an in-context kernel with an induction head"; Edelman et
al. 2024, "The evolution of statistical induction heads", and Akyurek et al. 2024, arXiv
2401.12973, use it to find the induction-head circuit).

**Data.** Each sequence has its own kernel ``P`` over ``K`` tokens, every row drawn from
``Dirichlet(alpha, ..., alpha)``; the first token is uniform and each next one follows
``P[x_t]``. Nothing in the weights can know ``P``: a model can only estimate it from the
sequence itself.

**The Bayes-optimal predictor** under this prior has a closed form. Rows of ``P`` are independent
a priori and a transition out of state i is a draw from row i, so the posterior of row i given
``x_1 .. x_t`` is ``Dirichlet(alpha + N_i1, ..., alpha + N_iK)`` with ``N_ij`` the number of
transitions ``i -> j`` among ``x_1 .. x_t``, and (the first token is uniform, so it carries no
information about P)::

    p(x_{t+1} = j | x_1..x_t) = (N_{x_t j} + alpha) / (N_{x_t .} + K alpha)

This is the in-context bigram of :mod:`empirical.yardsticks.ngram` (order 2, no delimiter) with the fixed
concentration ``alpha_2 = K alpha`` and the uniform distribution in place of the unigram level
(:func:`bayes_predictive`). Below it are the in-context unigram counter ``(n_j + alpha) / (t +
K alpha)``, the trap of the companion paper (:func:`unigram_counter`), and above it the oracle
that knows ``P`` (:func:`oracle_predictive`).

**What is measured** (:func:`measure_model`) on held-out sequences: the model's loss against the
three predictors, paired per sequence (:func:`empirical.yardsticks.competence.paired`), the fraction of the
unigram-to-Bayes gap it closes (:func:`empirical.yardsticks.competence.gap_closed`); every head's
previous-token and induction scores with the random-init control and chance levels
(:func:`empirical.analysis.heads.head_scores`); and the causal test: mean-ablating the heads with
the largest induction excess against as many random heads
(:func:`empirical.analysis.heads.ablation_effects`), in KL to the Bayes predictor, the unigram
counter and the unablated model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import hmm
from empirical.analysis.heads import (ablation_effects, excess_over_chance, head_scores, mean_head_outputs,
                                      select_heads)
from empirical.analysis.report import random_init_like
from empirical.yardsticks.competence import gap_closed, paired, per_prompt_loss
from empirical.training.configs import JSONConfig, check_integers, option
from empirical.training.data import EVAL_STREAM, TRAIN_STREAM, stream_seed
from empirical.yardsticks.evaluate import model_predictor
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.yardsticks.ngram import context_counts, interpolate
from empirical.training.train import Batch, TrainConfig, TrainResult, train

PREDICTORS = ("unigram counter", "bayes", "oracle")
"""The reference predictors of a measurement, from the least to the most informed."""

SCOPE = "all_positions"
"""The rows the ablation is reported on (:func:`empirical.yardsticks.competence.scope_rows`)."""

RANDOM_INIT_SEED = 1234
"""Seed of the random-init control's weights (:func:`empirical.analysis.report.random_init_like`)."""


@dataclass(frozen=True)
class InContextConfig(JSONConfig):
    """Everything an in-context Markov study depends on; validated on construction."""

    num_tokens: int = option(3, "states (= tokens) of every chain")
    concentration: float = option(1.0, "Dirichlet concentration of every kernel row (1: uniform on the simplex)")
    sequence_length: int = option(128, "tokens per training and held-out sequence")
    depths: tuple[int, ...] = option((1, 2), "numbers of layers, one model each", metavar="LAYERS")
    width: int = option(64, "residual-stream width of the RoFormer")
    num_heads: int = option(4, "attention heads per layer")
    batch_size: int = option(32, "sequences per training step")
    steps: int = option(8000, "training steps per model")
    learning_rate: float = option(1e-3, "peak AdamW learning rate (cosine decay to a tenth after the warm-up)")
    warmup_steps: int = option(200, "linear warm-up steps")
    weight_decay: float = option(0.01, "AdamW weight decay of the weight matrices")
    seed: int = option(0, "seed of the initial weights and of the training sequences")
    eval_sequences: int = option(1024, "held-out sequences the models are measured on")
    data_seed: int = option(0, "seed of the held-out sequences")
    top_heads: int = option(1, "heads with the largest induction excess that are ablated together")
    ablation_draws: int = option(8, "random head sets of the same size ablated as the control")
    checkpoint_every: int = option(500, "steps between checkpoints (a run resumes from the last)")

    def __post_init__(self) -> None:
        check_integers(self, ("num_tokens",), minimum=2)
        check_integers(self, ("sequence_length", "width", "num_heads", "batch_size", "steps", "eval_sequences",
                              "top_heads", "ablation_draws", "checkpoint_every"), minimum=1)
        check_integers(self, ("warmup_steps", "seed", "data_seed"), minimum=0)
        if not (isinstance(self.concentration, (int, float)) and math.isfinite(self.concentration)
                and self.concentration > 0):
            raise ValueError(f"concentration: {self.concentration!r}; expected a finite number > 0")
        if not self.depths or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in self.depths):
            raise ValueError(f"depths: {list(self.depths)!r}; expected one or more integers >= 1")
        if len(set(self.depths)) != len(self.depths):
            raise ValueError(f"depths: {list(self.depths)!r}; expected distinct numbers of layers")
        if self.top_heads >= min(self.depths) * self.num_heads:
            raise ValueError(f"top_heads: {self.top_heads}; expected fewer than the {min(self.depths) * self.num_heads} "
                             f"heads of the shallowest model, so that random heads outside the group remain")
        for depth in self.depths:  # the remaining fields are validated by the configs they go to
            self.model_config(depth)
        self.train_config()

    def model_config(self, depth: int) -> RoFormerConfig:
        """The RoFormer with ``depth`` layers."""
        return RoFormerConfig(vocab_size=self.num_tokens, num_layers=depth, num_heads=self.num_heads,
                              width=self.width)

    def train_config(self) -> TrainConfig:
        """Training hyper-parameters (the same for every depth)."""
        return TrainConfig(steps=self.steps, batch_size=self.batch_size, learning_rate=self.learning_rate,
                           warmup_steps=self.warmup_steps, weight_decay=self.weight_decay, seed=self.seed,
                           checkpoint_every=self.checkpoint_every, precision="fp32")

    def task(self) -> dict:
        """The data description stored in each checkpoint (resuming requires the same)."""
        return {"incontext_markov": {"num_tokens": self.num_tokens, "concentration": self.concentration,
                                     "sequence_length": self.sequence_length}}


def sample_chains(num_sequences: int, length: int, num_tokens: int, concentration: float,
                  seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (B, length) int64, kernels (B, K, K) float64)``: per sequence a kernel with
    ``Dirichlet(concentration)`` rows, a uniform first token, then ``x_{t+1} ~ P[x_t]``
    (inverse CDF of one uniform per step). Vectorised over sequences; the loop is over time."""
    rng = np.random.default_rng(seed)
    kernels = rng.dirichlet(np.full(num_tokens, float(concentration)), size=(num_sequences, num_tokens))
    cumulative = kernels.cumsum(-1)
    tokens = np.empty((num_sequences, length), dtype=np.int64)
    tokens[:, 0] = rng.integers(num_tokens, size=num_sequences)
    rows = np.arange(num_sequences)
    for t in range(1, length):
        uniform = rng.random(num_sequences)
        drawn = (cumulative[rows, tokens[:, t - 1]] <= uniform[:, None]).sum(-1)
        tokens[:, t] = np.minimum(drawn, num_tokens - 1)  # a CDF that rounds to just below 1
    return torch.from_numpy(tokens), torch.from_numpy(kernels)


class ChainStream:
    """Batch function for :func:`empirical.training.train.train`: step s's batch is ``batch_size`` fresh
    chains of ``sequence_length + 1`` tokens drawn with ``stream_seed(seed, TRAIN_STREAM, s)``;
    inputs are the first ``sequence_length`` tokens and each position's target the next one."""

    def __init__(self, config: InContextConfig) -> None:
        self.config = config

    def __call__(self, step: int) -> Batch:
        c = self.config
        tokens, _ = sample_chains(c.batch_size, c.sequence_length + 1, c.num_tokens, c.concentration,
                                  stream_seed(c.seed, TRAIN_STREAM, step))
        return Batch(tokens[:, :-1], tokens[:, 1:])


def held_out_chains(config: InContextConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The evaluation chains, from :data:`EVAL_STREAM` (never a training stream)."""
    return sample_chains(config.eval_sequences, config.sequence_length, config.num_tokens, config.concentration,
                         stream_seed(config.data_seed, EVAL_STREAM, 0))


def bayes_predictive(tokens: torch.Tensor, num_tokens: int, concentration: float) -> torch.Tensor:
    """``(B, N, K)``: the posterior predictive of the module docstring, row t for ``x_{t+1}``."""
    return interpolate(context_counts(tokens, num_tokens, 2)[1:], (num_tokens * concentration,))


def unigram_counter(tokens: torch.Tensor, num_tokens: int, concentration: float) -> torch.Tensor:
    """``(B, N, K)``: ``(n_j + alpha) / (t + K alpha)`` with ``n_j`` the count of token j among
    ``x_1 .. x_t``: the posterior predictive had the tokens been i.i.d. with a Dirichlet(alpha) law."""
    return interpolate(context_counts(tokens, num_tokens, 1), (num_tokens * concentration,))


def oracle_predictive(tokens: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """``(B, N, K)``: ``P[x_t]``, the next-token law of the sequence's own kernel."""
    return kernels[torch.arange(len(tokens))[:, None], tokens]


def reference_predictions(tokens: torch.Tensor, kernels: torch.Tensor, config: InContextConfig) -> dict:
    """``{name: (B, N, K)}`` for the names of :data:`PREDICTORS`."""
    return {"unigram counter": unigram_counter(tokens, config.num_tokens, config.concentration),
            "bayes": bayes_predictive(tokens, config.num_tokens, config.concentration),
            "oracle": oracle_predictive(tokens, kernels)}


def train_depth(config: InContextConfig, depth: int, run_dir: Path, *, progress: bool = False) -> TrainResult:
    """Train (or resume, from ``run_dir/checkpoint``) the model with ``depth`` layers on fresh chains."""
    return train(config.model_config(depth), config.train_config(), ChainStream(config), Path(run_dir),
                 task=config.task(), device="cpu", progress=progress)


def _scores_summary(scores: dict) -> dict:
    """JSON-ready head scores with each score's excess over chance per head."""
    return {name: {**sums.summary(), "excess": (sums.score - sums.chance_level).tolist()}
            for name, sums in scores.items()}


@torch.no_grad()
def measure_model(model: RoFormer, tokens: torch.Tensor, kernels: torch.Tensor, config: InContextConfig,
                  batch_size: int = 128) -> dict:
    """The measurements of the module docstring for one trained model, JSON-ready.

    ``losses``: mean loss (nats/token) of the model and of every reference predictor over all
    positions; ``model_minus``: per reference, the paired per-sequence difference of losses;
    ``gap_closed``: of the unigram counter's excess over the Bayes predictor; ``scores`` and
    ``random_init_scores``: previous-token (offsets 1, 2) and induction (orders 1, 2) scores, and
    ``largest_excess`` over chance of each kind; ablated groups: the ``top_heads`` heads with the
    largest excess of each kind; ``ablation``: the causal test for both groups, over all positions (a
    sequence is one segment, so :func:`ablation_effects`' test-sequence scope is the same rows).
    """
    num_tokens = config.num_tokens
    rows = torch.ones(tokens.shape[1], dtype=torch.bool)
    references = reference_predictions(tokens, kernels, config)
    model_probabilities = model_predictor(model, num_tokens)(tokens)
    losses = {name: per_prompt_loss(probabilities, tokens, num_tokens, rows)
              for name, probabilities in {"model": model_probabilities, **references}.items()}
    scores = head_scores(model, tokens, num_tokens, "cpu", batch_size)
    control = head_scores(random_init_like(model, RANDOM_INIT_SEED), tokens, num_tokens, "cpu", batch_size)
    groups = {group: select_heads(scores, group, config.top_heads) for group in ("induction", "previous-token")}
    means = mean_head_outputs(model, tokens, "cpu", batch_size)
    single_sequence = hmm.PromptFormat(num_demos=0, demo_length=1, test_length=tokens.shape[1])
    ablation = ablation_effects(model, tokens, single_sequence, num_tokens, references, groups, means,
                                config.ablation_draws, config.seed)
    return {
        "losses": {name: values.mean().item() for name, values in losses.items()},
        "model_minus": {name: paired(losses["model"] - losses[name]) for name in PREDICTORS},
        "gap_closed": gap_closed(losses["unigram counter"], losses["model"], losses["bayes"]),
        "scores": _scores_summary(scores),
        "random_init_scores": _scores_summary(control),
        "largest_excess": {group: excess_over_chance(scores, group).max().item() for group in groups},
        "random_init_largest_excess": {group: excess_over_chance(control, group).max().item() for group in groups},
        "ablation_before": ablation["before"][SCOPE],
        "ablation": {group: {"heads": entry["heads"], "random_heads": entry["random_heads"], **entry[SCOPE]}
                     for group, entry in ablation["groups"].items()},
    }
