"""Which Dirichlet family the paper-scale preset trains on: ``hmmtf family-calibration``.

The paper (arXiv 2506.01919) trains on 8192 HMMs of 128 states and 16 tokens and does not say how
their matrices are drawn. The Dirichlet(0.1) rows the ``paper`` preset first used leave almost no
signal at that size (the true HMM's top-1 accuracy on the test sequence about 0.10, chance 1/16),
so no network can reach the high in-context accuracy the paper reports. This module measures, on
prompts of fresh HMMs of each family of a grid of transition and emission concentrations (128
states, 16 tokens, the ``paper`` prompt format of 263 tokens):

* the **oracle**: each prompt's own HMM, filtered exactly (:func:`empirical.yardsticks.regime.oracle_predictor`);
* the **in-context 1/2/3-grams** (:mod:`empirical.yardsticks.ngram`), their concentrations fitted on prompts of
  other fresh HMMs of the same family, as the competence result fits them
  (:func:`empirical.yardsticks.signal.fresh_prompts_and_ngrams` with the fitting streams of :mod:`empirical.yardsticks.competence`);
* the **uniform** guess: loss ``log p`` and expected top-1 accuracy ``1 / p`` exactly.

Loss (nats/token) and top-1 accuracy (``argmax q = o_{t+1}``, ties to the lowest token), per
prompt over the scope's rows (test sequence, all positions), then the mean with its standard error
and the paired differences with their 95% intervals over prompts (:func:`empirical.yardsticks.competence.paired`).
The prior-predictive ceiling of ``hmmtf signal`` is not computed: its SMC over 128-state HMMs
would take hours a family on a CPU core, and the oracle bounds it from below. With
``ceiling_replicates`` R > 0 (``--ceiling-replicates``), an upper bound on it is measured beside the
others: the average of R runs of the collapsed-path SMC (``ceiling bound``; :data:`CEILING_BOUND`,
:func:`empirical.yardsticks.competence.ceiling_estimates`), so that each family's window from the
best n-gram to the oracle is split at a point the ceiling lies below. The rule does not read it
(it was fixed before the bound existed).

**The rule** (:data:`RULE`, written and committed before any cell of the grid was measured; the
seven cells of ``/work/shared/design/GPU.md``'s oracle table, 128 prompts each, were known). A
family *qualifies* when, on the test sequence, with the 95% intervals' lower ends:

1. the oracle's top-1 accuracy is at least :data:`MIN_ORACLE_ACCURACY` = 0.4. The paper's claims are
   about trained transformers that reach high in-context accuracy; a network cannot beat the
   true HMM, so the family must let the true HMM be right often. 0.4 is 6.4 times chance and the
   Bayes-optimal accuracy of the 16-state family on which the project's CPU networks did learn in
   context (0.405 with six demonstrations, ``figures/calibration/cpu-small.json``).
2. the in-context bigram beats the in-context unigram by at least :data:`MIN_BIGRAM_GAIN` = 0.1
   nats. The first in-context step a network takes after counting tokens is the bigram (Edelman
   et al. 2024); the competence rule's verdicts are steps of this ladder, so the step must be
   large against the paired intervals of 512 prompts. 0.1 nats is twice the whole in-context
   signal of the 16-state paper stand-in (about 0.05 nats, :mod:`empirical.analysis.ngram_verdict`), on
   which the ladder's verdicts could not be told apart.
3. the oracle beats the best in-context n-gram (the order with the lowest mean loss) by at least
   :data:`MIN_ORACLE_MARGIN` = 0.5 nats: room for a network to show that it learned more than a
   counter. The prompt-only optimum lies between the two, so a network that closes a fifth of
   this margin is still 0.1 nats (one bigram step) beyond every counter.

Among the families that qualify, the rule chooses the **densest**: the one whose rows have the
largest expected entropy, transition plus emission (:func:`expected_row_entropy`), i.e. the
least sparse, closest to generic random HMMs and furthest from the near-deterministic automata on
which counting and filtering agree. The entropy grows with each concentration, so this is the
"largest concentrations" in both coordinates, with a closed-form order where the two disagree.

Low-rank transitions (``MixtureSpec.rank``) are not in the grid: with Dirichlet factors they left
almost no sequential structure at 4 states (:mod:`hmm.families`), and the paper's HMMs are not
said to be low-rank.
"""
from __future__ import annotations

import dataclasses
import math
import time

import torch

import hmm
from empirical.yardsticks.competence import (CEILING_BOUND, COLLAPSED_CEILING_SETTINGS, FIT_PROMPTS, NGRAM_ORDERS,
                                             ceiling_bound_record, ceiling_estimates, paired, per_prompt_loss,
                                             scope_rows)
from empirical.yardsticks.ngram import scored_rows
from empirical.yardsticks.regime import oracle_predictor
from empirical.yardsticks.signal import fresh_prompts_and_ngrams

PAPER_SCALE_STATES = 128
PAPER_SCALE_TOKENS = 16
"""The paper's HMM sizes (Section 2.1 and Appendix B)."""
GRID = (0.005, 0.01, 0.02, 0.05, 0.1)
"""Concentrations of the grid, for transition and emission rows alike: 0.1 (the first ``paper``
family) down to 0.005, where rows are nearly one-hot at 128 states."""
MIN_ORACLE_ACCURACY = 0.4
MIN_BIGRAM_GAIN = 0.1
MIN_ORACLE_MARGIN = 0.5
RULE = (f"on the test sequence of fresh-HMM prompts, with the lower ends of the 95% intervals over prompts: the "
        f"oracle's top-1 accuracy >= {MIN_ORACLE_ACCURACY}, loss(in-context unigram) - loss(in-context bigram) >= "
        f"{MIN_BIGRAM_GAIN} nats (paired), loss(best in-context n-gram) - loss(oracle) >= {MIN_ORACLE_MARGIN} nats "
        f"(paired; best: the order with the lowest mean loss); of the families that qualify, the one with the "
        f"largest expected row entropy, transition plus emission (the densest)")
"""The module docstring's rule, recorded in the result."""


def expected_row_entropy(concentration: float, size: int) -> float:
    """``E[H(x)]`` in nats for ``x ~ Dirichlet(concentration * ones(size))``:
    ``psi(size * a + 1) - psi(a + 1)`` (the entropy's expectation under a symmetric Dirichlet)."""
    a = torch.tensor(float(concentration), dtype=torch.float64)
    return (torch.special.digamma(size * a + 1) - torch.special.digamma(a + 1)).item()


def family_density(spec: hmm.MixtureSpec) -> float:
    """The rule's density: expected entropy of a transition row plus that of an emission row."""
    return (expected_row_entropy(spec.transition_concentration, spec.num_states)
            + expected_row_entropy(spec.emission_concentration, spec.num_tokens))


def per_prompt_accuracy(probabilities: torch.Tensor, tokens: torch.Tensor, num_tokens: int,
                        rows: torch.Tensor) -> torch.Tensor:
    """``(B,)``: each prompt's top-1 accuracy over the scored rows selected by ``rows (N,)``
    (:func:`empirical.yardsticks.competence.per_prompt_loss`'s rows; ``argmax`` takes the lowest token of a tie)."""
    mask, targets = scored_rows(tokens, num_tokens)
    mask = mask & rows
    hits = (probabilities.argmax(-1) == targets).double()
    return (hits * mask).sum(-1) / mask.sum(-1)


def calibrate_family(spec: hmm.MixtureSpec, prompt_format: hmm.PromptFormat, num_prompts: int,
                     fresh_tasks: int, ceiling_replicates: int = 0) -> dict:
    """The module docstring's measurements for one family, as a JSON-ready dict: per scope each
    predictor's loss and accuracy (mean, s.e., 95% interval), the paired differences the rule
    reads, and the n-grams' fitted concentrations; with ``ceiling_replicates`` > 0 the collapsed
    SMC's upper bound on the ceiling beside them (its record under ``ceiling_bound``)."""
    fresh, prompts, ngrams = fresh_prompts_and_ngrams(spec, prompt_format, num_prompts, fresh_tasks)
    tokens, p = prompts.tokens, spec.num_tokens
    probabilities = {name: ngram(tokens) for name, ngram in ngrams.items()}
    probabilities["oracle"] = oracle_predictor(fresh, prompts)(tokens)
    bound = None
    if ceiling_replicates:
        bound = ceiling_estimates(tokens, prompt_format, spec, COLLAPSED_CEILING_SETTINGS, ceiling_replicates,
                                  "collapsed")
        probabilities[CEILING_BOUND] = bound.probabilities
    scopes = {}
    for scope, rows in scope_rows(prompt_format).items():
        losses = {name: per_prompt_loss(probs, tokens, p, rows) for name, probs in probabilities.items()}
        accuracies = {name: per_prompt_accuracy(probs, tokens, p, rows) for name, probs in probabilities.items()}
        best = min(ngrams, key=lambda name: losses[name].mean().item())
        scopes[scope] = {
            "loss": {name: paired(value) for name, value in losses.items()},
            "accuracy": {name: paired(value) for name, value in accuracies.items()},
            "uniform": {"loss": math.log(p), "accuracy": 1 / p},
            "best_ngram": best,
            "differences": {
                **{f"ngram {n - 1} - ngram {n}": paired(losses[f"ngram {n - 1}"] - losses[f"ngram {n}"])
                   for n in NGRAM_ORDERS[1:]},
                "best ngram - oracle": paired(losses[best] - losses["oracle"]),
                "uniform - oracle": paired(math.log(p) - losses["oracle"]),
                **({f"best ngram - {CEILING_BOUND}": paired(losses[best] - losses[CEILING_BOUND]),
                    f"{CEILING_BOUND} - oracle": paired(losses[CEILING_BOUND] - losses["oracle"])}
                   if bound is not None else {}),
            },
        }
    return {"spec": dataclasses.asdict(spec), "fresh_tasks": fresh_tasks, "num_prompts": num_prompts,
            "density_nats": family_density(spec),
            "ngram_concentrations": {name: list(ngram.concentrations) for name, ngram in ngrams.items()},
            "scopes": scopes,
            **({"ceiling_bound": ceiling_bound_record(bound, num_prompts)} if bound is not None else {})}


def rule_checks(family: dict) -> dict[str, bool]:
    """The rule's three conditions (module docstring) on one :func:`calibrate_family` result."""
    test = family["scopes"]["test_sequence"]
    return {
        "oracle_accuracy": test["accuracy"]["oracle"]["interval_95"][0] >= MIN_ORACLE_ACCURACY,
        "bigram_gain": test["differences"]["ngram 1 - ngram 2"]["interval_95"][0] >= MIN_BIGRAM_GAIN,
        "oracle_margin": test["differences"]["best ngram - oracle"]["interval_95"][0] >= MIN_ORACLE_MARGIN,
    }


def choose_family(families: dict[str, dict]) -> str | None:
    """The rule's choice: of the families whose :func:`rule_checks` all hold, the name of the one
    with the largest ``density_nats``; None when none qualifies."""
    qualifying = [name for name, family in families.items() if all(rule_checks(family).values())]
    return max(qualifying, key=lambda name: families[name]["density_nats"], default=None)


def grid_specs(concentrations=GRID, num_tasks: int = 8192) -> dict[str, hmm.MixtureSpec]:
    """``{"T a, O b": spec}`` for every pair of the grid: paper-scale sizes, full-rank Dirichlet rows."""
    for value in concentrations:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"concentrations: {value!r}; expected finite numbers > 0")
    return {f"T {t:g}, O {o:g}": hmm.MixtureSpec(num_tasks, PAPER_SCALE_STATES, PAPER_SCALE_TOKENS, t, o)
            for t in concentrations for o in concentrations}


def calibration_report(specs: dict[str, hmm.MixtureSpec], prompt_format: hmm.PromptFormat, num_prompts: int,
                       fresh_tasks: int, progress=None, ceiling_replicates: int = 0) -> dict:
    """:func:`calibrate_family` of every family (with ``ceiling_replicates`` runs of the ceiling's
    bound), each with its :func:`rule_checks`, and the rule's choice. ``progress(name, seconds)`` is
    called after each family."""
    families = {}
    for name, spec in specs.items():
        started = time.perf_counter()
        families[name] = calibrate_family(spec, prompt_format, num_prompts, fresh_tasks, ceiling_replicates)
        families[name]["seconds"] = time.perf_counter() - started
        families[name]["rule_checks"] = rule_checks(families[name])
        if progress is not None:
            progress(name, families[name]["seconds"])
    return {"rule": RULE, "thresholds": {"min_oracle_accuracy": MIN_ORACLE_ACCURACY, "min_bigram_gain": MIN_BIGRAM_GAIN,
                                         "min_oracle_margin": MIN_ORACLE_MARGIN},
            "prompt_format": dataclasses.asdict(prompt_format), "ngram_fit_prompts": FIT_PROMPTS,
            "families": families, "choice": choose_family(families)}
