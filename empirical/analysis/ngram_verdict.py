"""``hmmtf ngram-verdict CHECKPOINT --out DIR``: the competence rule's comparison with the in-context
n-grams and the variable-order predictor, decided on many more prompts than the competence result,
without its SMC ceiling (an upper bound on it can be scored beside them).

**Why.** On the paper's family the whole in-context signal is about 0.05 nats per token and the
in-context trigram already takes about 0.81 of it, so a network that infers more than the trigram
does is ahead of it by about 0.001 nats over all positions. The competence result's 512 prompts
resolve differences of about 0.0013 nats (two standard errors); most of its cost is the ceiling's
SMC, which the n-gram comparison does not need. So the comparison is made again here on
:data:`NgramVerdictSettings.prompts` prompts, fresh and independent of the competence result's.

**Decision rule** (fixed before any result; the competence rule of :mod:`empirical.yardsticks.competence`
with a standard error clustered by HMM). Per prompt b, ``d_b = loss_model(b) - loss_n(b)`` (mean
over the scope's rows), and the same for the variable-order predictor (context-tree weighting of
depth 6, :mod:`empirical.yardsticks.variable_order`; in the results made from issue 65 on). Prompts
that share an HMM are not independent, so the standard error of ``mean(d)`` is the cluster-robust
one over the HMMs g::

    se^2 = sum_g (sum_{b in g} (d_b - mean(d)))^2 / B^2

The model beats order n (or the variable-order predictor) in a scope when ``mean(d) + 1.96 se < 0``;
the scopes (test sequence, all positions), the verdict and competence are
:func:`empirical.yardsticks.competence.competence_verdict`'s and
:func:`~empirical.yardsticks.competence.is_competent`'s: ``beats every in-context predictor`` needs
orders 1-3 and the variable-order predictor beaten in both scopes, and a network is competent when
it beats the bigram and the variable-order predictor.

**Power** (from the learning curves' 256-prompt probe, where model minus trigram has a standard
error of about 0.0011 nats over all positions and 0.003 on the test sequence): 4096 prompts shrink
them to about 0.0003 and 0.0008, so a true margin of 0.001 and 0.003 nats is detected with power
above 0.9.

**The ceiling's bound** (optional, ``ceiling_replicates`` > 0). The SMC ceiling of the competence
result does not converge at 128 states, where this verdict is the gate; the collapsed-path SMC's
average over runs is an upper bound on it (:data:`CEILING_BOUND`), cheap enough for these prompts
(about 360 prompts a CPU minute a run on the paper family). Scored on the same prompts, it places
the model in the window from the in-context unigram to the ceiling: ``model - ceiling bound`` and
``ceiling bound - ngram n`` with the same clustered intervals (``ceiling bound - ngram 3`` below 0:
the ceiling lies below the trigram).

**Data.** :data:`VERDICT_MIXTURE_STREAM` draws the fresh HMMs (the preset's generator, another
seed stream than the training, competence and fitting HMMs), :data:`VERDICT_PROMPT_STREAM` the
prompts. The n-grams and the variable-order predictor are
:func:`empirical.yardsticks.competence.fitted_in_context`, fitted on the competence result's fitting
prompts of as many other fresh HMMs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

import hmm
from empirical.plotting import plt
from empirical.yardsticks.competence import (
    CEILING_BOUND, COLLAPSED_CEILING_SETTINGS, RULE, VARIABLE_ORDER, VARIABLE_ORDER_RULE, ceiling_bound_record, ceiling_estimates,
    competence_verdict, fitted_in_context, is_competent, paired, per_prompt_loss, scope_rows)
from empirical.training.configs import check_integers, option
from empirical.training.data import stream_seed
from empirical.yardsticks.evaluate import model_predictor
from empirical.yardsticks.ngram import scored_rows
from empirical.training.model import RoFormer
from empirical.training.presets import ExperimentPreset
from empirical.yardsticks.regime import Z_95, oracle_predictor, unseen_mixture

VERDICT_MIXTURE_STREAM = 13
"""Seed stream of the fresh HMMs of the verdict's prompts."""
VERDICT_PROMPT_STREAM = 14
"""Seed stream of the verdict's prompts."""
CLUSTERED_RULE = RULE + ("; the standard error of mean(d) is clustered by HMM "
                         "(se^2 = sum_g (sum_{b in g} (d_b - mean d))^2 / B^2)")
"""The module docstring's decision rule, recorded in every result."""


@dataclasses.dataclass(frozen=True)
class NgramVerdictSettings:
    """What :func:`ngram_verdict_report` measures on (the options of ``hmmtf ngram-verdict``)."""

    prompts: int = option(4096, "fresh-HMM prompts (streams independent of the competence result's)")
    fresh_tasks: int = option(8192, "fresh HMMs the prompts come from (as many, of other streams, fit the n-grams)")
    ceiling_replicates: int = option(0, "runs of the collapsed-path SMC averaged into an upper bound on the ceiling, "
                                        "scored beside the n-grams (0: none; on the paper family a run over 4096 "
                                        "prompts takes about 11 minutes of a core)")
    ceiling_particles: int = option(COLLAPSED_CEILING_SETTINGS.particles, "hidden paths of each run of the bound")

    def __post_init__(self) -> None:
        check_integers(self, ("prompts", "fresh_tasks", "ceiling_particles"), minimum=1)
        check_integers(self, ("ceiling_replicates",), minimum=0)


def clustered_interval(differences: torch.Tensor, clusters: torch.Tensor) -> dict:
    """Mean of per-prompt ``differences``, its standard error clustered by ``clusters`` (the
    module docstring's ``se``), the 95% interval, and beside it the naive standard error that
    :func:`empirical.yardsticks.competence.paired` gives (prompts independent)."""
    mean = differences.mean()
    centred = differences - mean
    _, cluster_index = torch.unique(clusters, return_inverse=True)
    sums = torch.zeros(int(cluster_index.max()) + 1, dtype=differences.dtype).index_add_(0, cluster_index, centred)
    stderr = (sums.square().sum().sqrt() / differences.numel()).item()
    return {"mean": mean.item(), "stderr": stderr,
            "interval_95": [mean.item() - Z_95 * stderr, mean.item() + Z_95 * stderr],
            "naive_stderr": paired(differences)["stderr"]}


def ngram_verdict_report(model: RoFormer, preset: ExperimentPreset, settings: NgramVerdictSettings,
                         device: torch.device | str = "cpu") -> dict:
    """The module docstring's comparison as a JSON-ready dict: each predictor's mean loss and
    top-1 accuracy (over the scope's scored rows) per scope, the clustered intervals of model
    minus each in-context predictor (and minus the oracle), which of them the model beats, the
    verdict and whether it is competent."""
    fresh = unseen_mixture(preset, settings.fresh_tasks, VERDICT_MIXTURE_STREAM)
    prompts = hmm.sample_prompts(fresh, settings.prompts, preset.prompt_format,
                                 seed=stream_seed(preset.data_seed, VERDICT_PROMPT_STREAM, 0))
    tokens, p = prompts.tokens, fresh.num_tokens
    in_context = fitted_in_context(preset, settings.fresh_tasks)
    predictors = {**in_context, "model": model_predictor(model, p, device), "oracle": oracle_predictor(fresh, prompts)}
    probabilities = {name: predictor(tokens) for name, predictor in predictors.items()}
    bound = None
    if settings.ceiling_replicates:
        bound = ceiling_estimates(tokens, preset.prompt_format, preset.mixture_spec,
                                  dataclasses.replace(COLLAPSED_CEILING_SETTINGS, particles=settings.ceiling_particles),
                                  settings.ceiling_replicates, "collapsed")
        probabilities[CEILING_BOUND] = bound.probabilities
    scored, targets = scored_rows(tokens, p)
    losses, accuracy, comparisons, beats = {}, {}, {}, {}
    for scope, rows in scope_rows(preset.prompt_format).items():
        per_prompt = {name: per_prompt_loss(probs, tokens, p, rows) for name, probs in probabilities.items()}
        losses[scope] = {name: values.mean().item() for name, values in per_prompt.items()}
        in_scope = scored & rows
        accuracy[scope] = {name: ((probs.argmax(-1) == targets) & in_scope).sum().item() / in_scope.sum().item()
                           for name, probs in probabilities.items()}
        comparisons[scope] = {f"model - {name}": clustered_interval(per_prompt["model"] - per_prompt[name],
                                                                    prompts.task_ids)
                              for name in (*in_context, "oracle", *([CEILING_BOUND] if bound is not None else []))}
        if bound is not None:
            comparisons[scope].update({f"{CEILING_BOUND} - {name}": clustered_interval(
                per_prompt[CEILING_BOUND] - per_prompt[name], prompts.task_ids) for name in (*in_context, "oracle")})
        beats[scope] = {name: comparisons[scope][f"model - {name}"]["interval_95"][1] < 0 for name in in_context}
    return {
        "rule": CLUSTERED_RULE,
        "variable_order_rule": VARIABLE_ORDER_RULE,
        "settings": dataclasses.asdict(settings),
        "streams": {"mixture": VERDICT_MIXTURE_STREAM, "prompts": VERDICT_PROMPT_STREAM},
        "distinct_hmms": int(torch.unique(prompts.task_ids).numel()),
        "losses": losses,
        "accuracy": accuracy,
        "comparisons": comparisons,
        "beats": beats,
        "verdict": competence_verdict(beats),
        "competent": is_competent(beats),
        "variable_order_concentrations": list(in_context[VARIABLE_ORDER].concentrations),
        **({"ceiling_bound": ceiling_bound_record(bound, len(tokens))} if bound is not None else {}),
    }


def plot_ngram_verdict(report: dict, path: Path) -> None:
    """Model minus each in-context n-gram (and the variable-order predictor, where the report has it)
    with its 95% clustered interval: one panel per scope (rows) and predictor (columns), each on its
    own scale with 0 marked, so that the trigram's margin of a thousandth of a nat is as readable as
    the unigram's tenth; the title gives the verdict."""
    scopes = list(report["comparisons"])
    names = [name for name in report["comparisons"][scopes[0]]
             if name.startswith("model - ngram") or name == f"model - {VARIABLE_ORDER}"]
    figure, axes = plt.subplots(len(scopes), len(names), figsize=(3.6 * len(names), 1.9 * len(scopes)),
                                constrained_layout=True, squeeze=False)
    for row, scope in enumerate(scopes):
        for column, name in enumerate(names):
            axis, interval = axes[row, column], report["comparisons"][scope][name]
            low, high = interval["interval_95"]
            axis.errorbar(interval["mean"], 0, xerr=[[interval["mean"] - low], [high - interval["mean"]]], fmt="o",
                          color="tab:green" if high < 0 else "tab:gray", capsize=5)
            axis.axvline(0, color="black", linewidth=0.8)
            margin = 0.15 * (max(high, 0) - min(low, 0))
            axis.set_xlim(min(low, 0) - margin, max(high, 0) + margin)
            axis.set_yticks([])
            axis.xaxis.set_major_locator(plt.MaxNLocator(4))
            axis.set_title(f"{scope.replace('_', ' ')}: {name}\n{interval['mean']:+.4f} [{low:+.4f}, {high:+.4f}]",
                           fontsize=9)
            axis.grid(alpha=0.3)
        axes[row, 0].set_ylabel(scope.replace("_", " "))
    for axis in axes[-1]:
        axis.set_xlabel("loss difference (nats/token)")
    settings = report["settings"]
    # Two lines: a long checkpoint path on one line with the rest ran past the figure's edges.
    figure.suptitle(f"{report.get('checkpoint', '')}: {report['verdict']}\n({settings['prompts']} prompts of "
                    f"{report['distinct_hmms']} distinct fresh HMMs; 95% intervals clustered by HMM, green: below 0)",
                    fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)
