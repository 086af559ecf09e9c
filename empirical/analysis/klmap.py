"""The hand-built network against the trained one, made precise: the map of pairwise KL divergences
between every predictor of the next token on the same prompts of fresh HMMs (issue 35, item 4).

**Predictors** (each ``(B, N, p)`` next-token distributions over the HMM tokens, in the order of
the map):

* ``model``: the trained RoFormer (:func:`empirical.yardsticks.evaluate.model_predictor`);
* ``hand-built L=l``, l in :data:`HISTORY_LENGTHS`: the paper's construction with history length
  l and T gradient-descent layers (:func:`empirical.yardsticks.hand_built.hand_built_predictor`; T is the
  competence ladder's, :data:`empirical.yardsticks.competence.HAND_BUILT_NETWORK`, unless given);
* ``P_L L=l``: the exact l-memory predictor of each prompt's own HMM
  (:func:`empirical.yardsticks.hand_built.task_memory_predictor`), the target of Theorem 1's guarantee: in
  the theory's (observable) family ``KL(P_L || hand-built)`` is what the theorem bounds;
* ``ngram 1..3``: the in-context n-grams (:func:`empirical.yardsticks.competence.fitted_ngrams`);
* ``ceiling``: the prior-predictive ceiling, :data:`empirical.yardsticks.competence.CEILING_REPLICATES` SMC
  runs averaged (:func:`empirical.yardsticks.competence.ceiling_estimates`), unless skipped;
* ``oracle``: each prompt's own HMM, exactly filtered (:func:`empirical.yardsticks.regime.oracle_predictor`).

**Rows.** Row t of prompt b predicts token t + 1. A row is *common* when its next token is an HMM
token (:func:`empirical.yardsticks.ngram.scored_rows`) and every predictor serves it: the hand-built network
serves only the rows of segments ``k >= 1`` at offset ``>= L - 1`` of their segment
(:func:`empirical.yardsticks.hand_built.served_rows`), the largest L the fewest, and every other predictor
serves every row, so the common rows are the scored rows within ``served_rows(format, max L)``.
Each scope of :func:`empirical.yardsticks.competence.scope_rows` (test sequence, all positions) intersects
them with its own rows: ``R_b`` below.

**The map.** For a row predictor r and a column predictor q, per prompt b::

    KL_b(r || q) = (1 / |R_b|) sum_{t in R_b} sum_o r_t(o) log(r_t(o) / q_t(o))      (0 log 0 = 0)

(:func:`empirical.analysis.heads.kl_per_prompt`), and the cell is its mean over prompts with the
standard error and 95% interval of :func:`empirical.yardsticks.competence.paired`. The diagonal is 0
exactly. Beside the map, each predictor's loss ``mean_{t in R_b} -log q_t(o_{t+1})`` per prompt
(:func:`empirical.yardsticks.competence.per_prompt_loss`), paired likewise, so the map reads beside the
competence result (whose hand-built table uses the rows of L = 2, not 3).

**Placing the model** (:func:`nearest`), in both directions of the divergence: the predictor q
with the smallest mean ``KL(model || q)`` (the model's row) and the one with the smallest mean
``KL(q || model)`` (the model's column), each with the second nearest and the per-prompt paired
difference ``KL_b(second) - KL_b(nearest)``: its 95% interval above 0 says the nearest is nearer
than the second on these prompts, not only in the mean.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

import hmm
from empirical.analysis.heads import kl_per_prompt
from empirical.yardsticks.competence import (CEILING_SETTINGS, HAND_BUILT_NETWORK, ceiling_estimates, fitted_ngrams, paired,
                                  per_prompt_loss, scope_rows)
from empirical.training.configs import check_integers, option
from empirical.yardsticks.curves import fresh_prompts
from empirical.yardsticks.evaluate import model_predictor
from empirical.yardsticks.hand_built import SMOOTHING, hand_built_predictor, served_rows, task_memory_predictor
from empirical.training.model import RoFormer
from empirical.yardsticks.ngram import scored_rows
from empirical.training.presets import ExperimentPreset
from empirical.yardsticks.regime import FRESH_MIXTURE_STREAM, FRESH_PROMPT_STREAM, oracle_predictor

HISTORY_LENGTHS = (1, 2, 3)
"""History lengths L of the hand-built network and of ``P_L`` on the map."""
MODEL = "model"
"""The trained network's name on the map."""
ROWS_RULE = ("rows whose next token is an HMM token and that every predictor serves: those of segments k >= 1 at "
             "offset >= L - 1 of their segment for the largest L (empirical.yardsticks.hand_built.served_rows), within the "
             "scope's rows (empirical.yardsticks.competence.scope_rows)")
"""The module docstring's common rows, recorded in every result."""
KL_DEFINITION = ("kl[row][column]: per prompt, the mean over its common rows of KL(row || column) = sum_o row(o) "
                 "log(row(o) / column(o)); mean over prompts with its standard error and 95% interval")


def hand_built_name(history_length: int) -> str:
    """The hand-built network's name on the map."""
    return f"hand-built L={history_length}"


def task_memory_name(history_length: int) -> str:
    """``P_L``'s name on the map (as in :func:`empirical.yardsticks.hand_built.side_by_side_predictors`)."""
    return f"P_L L={history_length}"


COUNTS_FROM_ZERO = ("ceiling_particles",)
"""The fields of :class:`KLMapSettings` that may be 0; the others are counts >= 1."""


@dataclass(frozen=True)
class KLMapSettings:
    """What :func:`klmap_report` measures on (the options of ``hmmtf klmap``); validated on construction."""

    prompts: int = option(256, "fresh-HMM prompts of the map (empirical.yardsticks.curves.fresh_prompts, the prompts of hmmtf "
                               "heads and of hmmtf curve's probe); the hand-built network costs about 1 s per prompt "
                               "and history length on a core")
    fresh_tasks: int = option(1024, "fresh HMMs the prompts come from (as many, of other streams, fit the n-grams)")
    gd_steps: int = option(HAND_BUILT_NETWORK["gd_steps"], "gradient-descent layers T of the hand-built network")
    ceiling_particles: int = option(CEILING_SETTINGS.particles, "SMC particles per replicate of the prior-predictive "
                                                                "ceiling (minutes on the paper's 16-state family); 0 "
                                                                "leaves the ceiling off the map")

    def __post_init__(self) -> None:
        check_integers(self, ("prompts", "fresh_tasks", "gd_steps"), minimum=1)
        check_integers(self, COUNTS_FROM_ZERO, minimum=0)


def common_rows(probabilities: dict[str, torch.Tensor], tokens: torch.Tensor, num_tokens: int,
                rows: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` bool: the scored rows of ``tokens`` within ``rows (N,)``. ``ValueError`` naming
    the first predictor of ``probabilities`` (``{name: (B, N, p)}``) that is not a finite
    distribution on one of them: a served row that a predictor leaves NaN is a bug, not a row to
    drop."""
    mask = scored_rows(tokens, num_tokens)[0] & rows
    for name, probs in probabilities.items():
        if probs.shape != (*tokens.shape, num_tokens):
            raise ValueError(f"probabilities[{name!r}]: shape {tuple(probs.shape)}; expected "
                             f"{(*tokens.shape, num_tokens)} (prompts, positions, HMM tokens)")
        bad = mask & ~probs.isfinite().all(-1)
        if bad.any():
            b, t = (int(index) for index in bad.nonzero()[0])
            raise ValueError(f"probabilities[{name!r}]: not finite at prompt {b}, row {t}; expected a distribution on "
                             f"every common row ({ROWS_RULE})")
    return mask


def outside_uniform(probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``probs (B, N, p)`` with the rows outside ``mask (B, N)`` set to the uniform distribution.
    Those rows are never averaged, but :func:`empirical.yardsticks.competence.per_prompt_loss` weights them
    by 0, and ``0 * NaN`` (the hand-built network's unserved rows) is NaN."""
    return torch.where(mask[..., None], probs, 1.0 / probs.shape[-1])


def kl_matrix(probabilities: dict[str, torch.Tensor], tokens: torch.Tensor, num_tokens: int,
              rows: torch.Tensor) -> torch.Tensor:
    """``(R, R, B)`` float64: entry ``[i, j, b]`` is ``KL_b(name_i || name_j)`` (module docstring)
    over prompt b's scored rows within ``rows (N,)``, the names in the order of ``probabilities``;
    the diagonal is 0 exactly."""
    common_rows(probabilities, tokens, num_tokens, rows)
    return torch.stack([torch.stack([kl_per_prompt(reference, probs, tokens, num_tokens, rows)
                                     for probs in probabilities.values()])
                        for reference in probabilities.values()])


def nearest(divergences: dict[str, torch.Tensor]) -> dict:
    """From ``{name: (B,)}`` per-prompt divergences of one predictor to each candidate (at least
    two): the candidate of the smallest mean, the second smallest and ``paired(second -
    nearest)`` (ties: the earlier name)."""
    if len(divergences) < 2:
        raise ValueError(f"divergences: {sorted(divergences)}; expected at least two candidates")
    names = list(divergences)
    means = torch.stack([divergences[name].mean() for name in names])
    first, second = (names[int(index)] for index in torch.argsort(means, stable=True)[:2])
    return {"nearest": first, "kl": paired(divergences[first]), "second": second,
            "second_kl": paired(divergences[second]),
            "second_minus_nearest": paired(divergences[second] - divergences[first])}


def placement(names: list[str], matrix: torch.Tensor, subject: str = MODEL) -> dict:
    """:func:`nearest` of ``subject`` in both directions of the ``matrix`` of :func:`kl_matrix`
    (``names`` its order): ``as_row`` over ``KL(subject || q)``, ``as_column`` over ``KL(q || subject)``."""
    if subject not in names:
        raise ValueError(f"subject: {subject!r}; expected one of the map's predictors {names}")
    own = names.index(subject)
    others = [index for index in range(len(names)) if index != own]
    return {"as_row": nearest({names[index]: matrix[own, index] for index in others}),
            "as_column": nearest({names[index]: matrix[index, own] for index in others})}


def scope_section(probabilities: dict[str, torch.Tensor], tokens: torch.Tensor, num_tokens: int,
                  rows: torch.Tensor) -> dict:
    """One scope of the report: the number of common rows per prompt (``rows (N,)``: the scope's
    within the served ones), every predictor's loss, the ``kl`` map (``kl[row][column]``) and the
    model's :func:`placement`, all :func:`empirical.yardsticks.competence.paired` over prompts."""
    mask = common_rows(probabilities, tokens, num_tokens, rows)
    probabilities = {name: outside_uniform(probs, mask) for name, probs in probabilities.items()}
    names = list(probabilities)
    matrix = kl_matrix(probabilities, tokens, num_tokens, rows)
    counts = mask.sum(-1).double()
    return {
        "rows_per_prompt": {"mean": counts.mean().item(), "min": int(counts.min()), "max": int(counts.max())},
        "loss": {name: paired(per_prompt_loss(probs, tokens, num_tokens, rows)) for name, probs in probabilities.items()},
        "kl": {row: {column: paired(matrix[i, j]) for j, column in enumerate(names)} for i, row in enumerate(names)},
        "placement": placement(names, matrix) if MODEL in names else None,
    }


def map_predictions(model: RoFormer, fresh: hmm.Mixture, prompts: hmm.Prompts, preset: ExperimentPreset,
                    settings: KLMapSettings, device: torch.device | str = "cpu") -> tuple[dict[str, torch.Tensor], dict]:
    """``{name: (B, N, p)}`` float64 of every predictor of the module docstring on ``prompts`` (of
    the fresh HMMs ``fresh``), in the map's order, and their costs: ``{"seconds": {name: seconds},
    "ceiling": the ceiling's record (:meth:`empirical.yardsticks.competence.Ceiling.record`), None when skipped}``."""
    fmt, p, tokens = preset.prompt_format, fresh.num_tokens, prompts.tokens
    predictors = {MODEL: model_predictor(model, p, device)}
    predictors.update({hand_built_name(L): hand_built_predictor(fmt, p, L, settings.gd_steps) for L in HISTORY_LENGTHS})
    predictors.update({task_memory_name(L): task_memory_predictor(fresh, prompts.task_ids, fmt, L)
                       for L in HISTORY_LENGTHS})
    predictors.update(fitted_ngrams(preset, settings.fresh_tasks))
    probabilities, seconds = {}, {}
    for name, predictor in predictors.items():
        started = time.perf_counter()
        probabilities[name] = predictor(tokens).double()
        seconds[name] = time.perf_counter() - started
    ceiling = None
    if settings.ceiling_particles:
        estimates = ceiling_estimates(tokens, preset.prompt_format, preset.mixture_spec,
                                      dataclasses.replace(CEILING_SETTINGS, particles=settings.ceiling_particles))
        probabilities["ceiling"], ceiling = estimates.probabilities, estimates.record()
        seconds["ceiling"] = ceiling["seconds"]
    started = time.perf_counter()
    probabilities["oracle"] = oracle_predictor(fresh, prompts)(tokens).double()
    seconds["oracle"] = time.perf_counter() - started
    return probabilities, {"seconds": seconds, "ceiling": ceiling}


def klmap_report(model: RoFormer, preset: ExperimentPreset, settings: KLMapSettings,
                 device: torch.device | str = "cpu") -> dict:
    """The KL map (module docstring) of ``model`` on fresh-HMM prompts of ``preset`` (the
    checkpoint's), JSON-ready: settings, prompts, predictors, the common rows' rule, per scope
    the losses, the map and the model's placement, and what each predictor cost."""
    fresh, prompts = fresh_prompts(preset, settings.prompts, settings.fresh_tasks)
    probabilities, costs = map_predictions(model, fresh, prompts, preset, settings, device)
    served = served_rows(preset.prompt_format, max(HISTORY_LENGTHS))
    return {
        "settings": dataclasses.asdict(settings),
        "prompts": {"evaluated": f"fresh_prompts(preset, {settings.prompts}, {settings.fresh_tasks}): fresh HMMs of "
                                 f"stream {FRESH_MIXTURE_STREAM}, prompts of draw 0 of stream {FRESH_PROMPT_STREAM}",
                    "length": preset.prompt_format.length},
        "predictors": list(probabilities),
        "hand_built": {"history_lengths": list(HISTORY_LENGTHS), "gd_steps": settings.gd_steps,
                       "smoothing": SMOOTHING},
        "ceiling": costs["ceiling"],
        "rows": {"rule": ROWS_RULE, "history_length": max(HISTORY_LENGTHS)},
        "definition": KL_DEFINITION,
        "seconds": costs["seconds"],
        "scopes": {scope: scope_section(probabilities, prompts.tokens, fresh.num_tokens, rows & served)
                   for scope, rows in scope_rows(preset.prompt_format).items()},
    }
