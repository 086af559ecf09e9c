"""How much a data family rewards learning in context: ``hmmtf signal``.

A network trained on thousands of HMMs must infer each prompt's HMM from the prompt. Counting the
prompt's tokens (the in-context unigram) is the first thing it learns; what it can gain beyond
that is bounded by the **prior-predictive ceiling**, the posterior predictive under the family's
generator (:mod:`hmm.prior_predictive`). So before training on a family we measure, on prompts of
fresh HMMs of the family (the competence result's seed streams, :mod:`empirical.yardsticks.competence`):

* the in-context 1/2/3-grams (:mod:`empirical.yardsticks.ngram`), concentrations fitted on prompts of other
  fresh HMMs;
* the ceiling (:data:`empirical.yardsticks.competence.CEILING_REPLICATES` independent SMC runs averaged, their
  spread its Monte-Carlo error);
* the oracle (each prompt's own HMM; no prompt-only predictor reaches it);
* the observability coefficient gamma of the fresh HMMs' emissions (:func:`hmm.observability.observability_exact`).

The family's **in-context signal** is ``loss(ngram 1) - loss(ceiling)`` in nats per token (paired
over prompts, 95% interval), and the **bigram share** ``(loss(ngram 1) - loss(ngram 2)) / signal``
says how much of it an in-context bigram already takes. A family is worth training on for
mechanism questions when its signal is large against the n-grams' steps: a network that closes
half of it is then far from every counting baseline, and a verdict on its circuit is not decided
by noise.

Only families with independent Dirichlet rows (``MixtureSpec.rank`` None) have a ceiling here:
the SMC's prior is :class:`hmm.prior_predictive.DirichletHMMPrior`.
"""
from __future__ import annotations

import dataclasses

import torch

import hmm
from empirical.yardsticks.competence import (CEILING_REPLICATES, FIT_MIXTURE_STREAM, FIT_PROMPT_STREAM, FIT_PROMPTS,
                                  NGRAM_ORDERS, ceiling_error, ceiling_estimates, paired, per_prompt_loss, scope_rows)
from empirical.training.data import stream_seed
from empirical.yardsticks.ngram import InContextNGram
from empirical.yardsticks.regime import FRESH_MIXTURE_STREAM, FRESH_PROMPT_STREAM, family_prompts, oracle_predictor
from hmm.observability import observability_exact
from hmm.prior_predictive import SMCSettings

CANDIDATES: dict[str, hmm.MixtureSpec] = {
    "paper family (S 16, T 0.1, O 0.1)": hmm.MIXTURE_SPECS["tasks-8192"],
    "S 4, T 0.1, O 0.1": hmm.MixtureSpec(8192, 4, 8, 0.1, 0.1),
    "S 4, T 0.1, O 0.05 (observable)": hmm.MIXTURE_SPECS["observable-8192"],
    "S 4, T 0.05, O 0.05": hmm.MixtureSpec(8192, 4, 8, 0.05, 0.05),
    "S 4, T 0.3, O 0.1": hmm.MixtureSpec(8192, 4, 8, 0.3, 0.1),
    "S 8, T 0.1, O 0.1": hmm.MixtureSpec(8192, 8, 8, 0.1, 0.1),
}
"""The families ``hmmtf signal`` compares by default: the paper's, and full-rank Dirichlet
families with no more states than tokens (gamma > 0), 8 tokens each (the paper family's
vocabulary). Only the generator matters here (fresh HMMs are drawn from it); the task count is
the one a regime preset would train on."""
GAMMA_HMMS = 64
"""Fresh HMMs whose emissions' gamma is computed (an LP each)."""


def emission_gamma(emission: torch.Tensor) -> float:
    """gamma of an ``(S, p)`` emission: 0 when ``S > p`` (``O^T`` maps the ``S - 1`` dimensions of
    differences of beliefs into the ``p - 1`` of differences of token laws, so some difference
    is lost), else :func:`hmm.observability.observability_exact`."""
    num_states, num_tokens = emission.shape
    return 0.0 if num_states > num_tokens else observability_exact(emission)


def streams_of_seed_zero(spec: hmm.MixtureSpec, prompt_format: hmm.PromptFormat, num_prompts: int, fresh_tasks: int,
                         mixture_stream: int, prompt_stream: int) -> tuple[hmm.Mixture, hmm.Prompts]:
    """:func:`~empirical.yardsticks.regime.family_prompts` of ``stream_seed(0, mixture_stream, 0)`` and
    ``stream_seed(0, prompt_stream, 0)``: for the paper family, whose seeds are 0, the competence
    result's fresh HMMs and prompts, or its fitting ones."""
    return family_prompts(spec, prompt_format, num_prompts, fresh_tasks, stream_seed(0, mixture_stream, 0),
                          stream_seed(0, prompt_stream, 0))


def fresh_prompts_and_ngrams(spec: hmm.MixtureSpec, prompt_format: hmm.PromptFormat, num_prompts: int,
                             fresh_tasks: int) -> tuple[hmm.Mixture, hmm.Prompts, dict[str, InContextNGram]]:
    """A family's ``fresh_tasks`` fresh HMMs with ``num_prompts`` of their prompts, and the in-context
    n-grams fitted on :data:`FIT_PROMPTS` prompts of the fitting streams (:func:`streams_of_seed_zero`:
    for the paper family, the competence result's)."""
    if num_prompts < 2:
        raise ValueError(f"num_prompts: {num_prompts!r}; expected an integer >= 2 (paired intervals need two)")
    fresh, prompts = streams_of_seed_zero(spec, prompt_format, num_prompts, fresh_tasks, FRESH_MIXTURE_STREAM,
                                          FRESH_PROMPT_STREAM)
    _, fitting = streams_of_seed_zero(spec, prompt_format, FIT_PROMPTS, fresh_tasks, FIT_MIXTURE_STREAM,
                                      FIT_PROMPT_STREAM)
    return fresh, prompts, {f"ngram {n}": InContextNGram.fitted(n, spec.num_tokens, fitting.tokens)
                            for n in NGRAM_ORDERS}


def family_signal(spec: hmm.MixtureSpec, prompt_format: hmm.PromptFormat, num_prompts: int, fresh_tasks: int,
                  settings: SMCSettings) -> dict:
    """The module docstring's measurements for one family, as a JSON-ready dict: per scope (test
    sequence, all positions) each predictor's mean loss and standard error, the signal and the
    n-grams' steps as paired differences, the ceiling's Monte-Carlo error; gamma's quartiles."""
    fresh, prompts, ngrams = fresh_prompts_and_ngrams(spec, prompt_format, num_prompts, fresh_tasks)
    tokens, p = prompts.tokens, spec.num_tokens
    probabilities = {name: ngram(tokens) for name, ngram in ngrams.items()}
    estimates = ceiling_estimates(tokens, prompt_format, spec, settings)
    probabilities["ceiling"] = estimates.probabilities
    probabilities["oracle"] = oracle_predictor(fresh, prompts)(tokens)
    scopes = {}
    for scope, rows in scope_rows(prompt_format).items():
        losses = {name: per_prompt_loss(probs, tokens, p, rows) for name, probs in probabilities.items()}
        signal = paired(losses["ngram 1"] - losses["ceiling"])
        scopes[scope] = {
            "loss": {name: {"mean": value.mean().item(), "stderr": value.std().item() / num_prompts ** 0.5}
                     for name, value in losses.items()},
            "signal": signal,
            "steps": {f"ngram {n - 1} - ngram {n}": paired(losses[f"ngram {n - 1}"] - losses[f"ngram {n}"])
                      for n in NGRAM_ORDERS[1:]},
            "ceiling - oracle": paired(losses["ceiling"] - losses["oracle"]),
            "bigram_share": (losses["ngram 1"] - losses["ngram 2"]).mean().item() / signal["mean"],
            "ceiling_monte_carlo_stderr": ceiling_error(estimates.replicates, tokens, p, rows),
        }
    gammas = torch.tensor([emission_gamma(fresh.hmm.emission[k]) for k in range(min(GAMMA_HMMS, fresh_tasks))])
    return {"spec": dataclasses.asdict(spec), "fresh_tasks": fresh_tasks, "num_prompts": num_prompts,
            "ceiling_seconds": estimates.seconds, "ceiling_cached": estimates.cached,
            "gamma_quartiles": torch.quantile(gammas, torch.tensor([0.25, 0.5, 0.75], dtype=gammas.dtype)).tolist(),
            "scopes": scopes}


def signal_report(families: dict[str, hmm.MixtureSpec], prompt_format: hmm.PromptFormat, num_prompts: int,
                  fresh_tasks: int, settings: SMCSettings) -> dict:
    """:func:`family_signal` of every family, with the settings, under ``"families"``."""
    return {"prompt_format": dataclasses.asdict(prompt_format), "ceiling_settings": dataclasses.asdict(settings),
            "ceiling_replicates": CEILING_REPLICATES, "ngram_fit_prompts": FIT_PROMPTS,
            "families": {name: family_signal(spec, prompt_format, num_prompts, fresh_tasks, settings)
                         for name, spec in families.items()}}
