"""Belief-state probes (issue 35, item 2; Shai et al. 2024, arXiv 2405.15943): how much of the
Bayesian belief, and of the prior-predictive next-token distribution, a linear map reads from the
residual stream of each layer, on prompts of HMMs the network never saw.

**Rows.** Prompts of fresh HMMs (:func:`empirical.yardsticks.curves.fresh_prompts`, the prompts of ``hmmtf
curve``'s probe and of ``hmmtf heads``). A row is a position t whose next token is an HMM token
(:func:`empirical.yardsticks.ngram.scored_rows`, the rows every loss is taken over) and whose own token is one
too (:func:`probe_rows`): a delimiter holds no hidden state, so its belief is undefined. The
features of a row are the residual stream at t after a layer: ``embedding`` (``hook_embed``) and
``layer l`` (``blocks.{l-1}.hook_resid_post``), :func:`empirical.analysis.networks.roformer_streams`.

**Targets**, each a vector per row:

* The exact belief of the prompt's own HMM ``(pi, A, B)`` (:func:`filtered_beliefs`): the filtering
  distribution ``b_t(s) = P(s_t = s | o_<=t)`` of :func:`hmm.filter_beliefs`, run on the tokens of
  t's segment only, since every segment restarts the chain from ``pi`` (``hmm.prompts``). For fresh
  HMMs "state s" names nothing shared between two HMMs: a raw belief vector of one prompt and one
  of another are in different coordinates, and no linear read-out of a network can be right for
  both. Two coordinates that mean the same thing in every HMM stand in for it:

  - ``belief next-token``: the next-token distribution the belief implies, ``b_t A B``
    (:func:`implied_next_token`), the oracle's prediction (:func:`empirical.yardsticks.regime.oracle_predictor`).
    Tokens are shared by every HMM, so this is one simplex for all prompts. It keeps all of the
    belief when ``b -> b A B`` is injective, that is when ``A B`` has rank S (needs ``p >= S``: the
    observable family's 4 states and 8 tokens; not the paper family's 16 states and 8 tokens,
    where beliefs with the same next-token distribution differ in what they say of later tokens).
  - ``belief sorted`` and ``belief entropy``: the belief's geometry up to a relabelling of the
    states, its probabilities in decreasing order (a point of the sorted simplex) and its entropy
    ``H(b_t) = -sum_s b_t(s) log b_t(s)`` in nats (how certain the state is). Both are nonlinear in
    ``b_t``: that a network represents ``b_t`` linearly within one HMM (Shai et al.'s finding) does
    not imply they are linear in its stream, so they measure the geometry, not Shai et al.'s claim.

* The prior-predictive next-token distribution ``ceiling``: the posterior predictive under the
  generator's prior, the best any predictor of the prompt alone can do, the mean of
  :func:`empirical.yardsticks.competence.ceiling_estimates` (SMC; optional, costly). For comparison the
  in-context n-grams ``ngram 1..3`` (:func:`empirical.yardsticks.competence.fitted_ngrams`), which a network
  that counts tokens represents.

**Fit.** Prompts are split by prompt, never by position (:func:`prompt_split`): the last
:data:`HELD_OUT_FRACTION` are held out; of the others (*train*) the last :data:`VALIDATION_FRACTION`
validate the penalty, the rest (*fit*) fit it. Features are standardised with the statistics of
the set a probe is fitted on (:func:`empirical.analysis.probes.standardise`, constant columns
dropped). The probe is ridge regression with an unpenalised intercept, closed form in float64
(:func:`ridge_path`). The penalty is ``lambda = alpha n`` for n fitted rows (standardised columns
have squared norm n, so ``alpha`` is the penalty relative to the data's own scale), with ``alpha``
the value of :data:`RIDGE_PENALTIES` whose probe fitted on *fit* has the largest R^2 on
*validation*, per target; the probe is then refitted on all of *train* with that ``alpha`` and
scored on the held-out prompts.

**Metrics** on the held-out rows (:func:`held_out_metrics`):

* ``R^2 = 1 - sum_{i,k} (y_ik - yhat_ik)^2 / sum_{i,k} (y_ik - ybar_k)^2``, the variance-weighted
  R^2 over a target's output dimensions, with ``ybar`` the mean of the rows the probe was fitted
  on: 1 is a perfect read-out, 0 the constant predictor ``ybar`` (the limit of a large penalty),
  below 0 worse than it. Not the held-out mean: a prompt's rows share its HMM, so the mean of a few
  dozen held-out prompts is itself noisy, and subtracting it would credit the baseline with
  held-out information (the control of a constant predictor would score below 0 by that noise);
* for the distribution targets, the mean ``KL(y || q)`` in nats, with the probe's output made a
  distribution by :func:`as_distribution`: clipped below at :data:`PROBABILITY_FLOOR` and
  renormalised; beside it the KL of the training mean target, a constant predictor, for scale;
* 95% percentile intervals from a bootstrap over held-out prompts
  (:func:`empirical.analysis.probes.bootstrap_ratio_interval`): a prompt's rows share its HMM and
  are not independent (for R^2 the ratio of the two sums of squares is resampled).

**Controls.** *Shuffled targets*: the same fit and test with every row's target replaced by the
target of another prompt at the same position (:func:`deranged_within_position`: a random
derangement of the prompts per position, within train and within held-out). It keeps each
position's distribution of targets and breaks their link to the prompt, so it measures what the
position alone (and fitting noise) gives. *Random-init*: the same probes on a RoFormer of the same
config freshly initialised with ``seed`` (:func:`empirical.analysis.report.random_init_like`, as
``hmmtf heads``): what the input and a random mixing of the context give for free.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

import hmm
from empirical.analysis.networks import roformer_streams
from empirical.analysis.probes import CONFIDENCE, bootstrap_ratio_interval, standardise
from empirical.analysis.report import random_init_like
from empirical.analysis.shuffle import random_derangements
from empirical.yardsticks.competence import CEILING_SETTINGS, ceiling_estimates, fitted_ngrams
from empirical.training.configs import check_integers, option
from empirical.yardsticks.curves import fresh_prompts
from empirical.yardsticks.hand_built import segments
from empirical.training.model import RoFormer
from empirical.yardsticks.ngram import scored_rows
from empirical.training.presets import ExperimentPreset
from empirical.yardsticks.regime import FRESH_PROMPT_STREAM

HELD_OUT_FRACTION = 0.25
"""Fraction of the prompts (the last ones) on which the probes are scored."""
VALIDATION_FRACTION = 0.25
"""Fraction of the training prompts (the last ones) on which the ridge penalty is chosen."""
MIN_PROMPTS = 8
"""Fewest prompts: two held out and six to train (two of them validating), so that every split
can be deranged (:func:`deranged_within_position` needs two prompts in each)."""
RIDGE_PENALTIES = tuple(10.0 ** k for k in range(-6, 3))
"""Candidate ``alpha`` of the penalty ``lambda = alpha n`` (module docstring), 1e-6 to 1e2: from
nearly least squares to a probe shrunk almost to its intercept."""
PROBABILITY_FLOOR = 1e-4
"""Entries of a probe's output below this are raised to it before renormalising
(:func:`as_distribution`): a KL term then costs at most ``y log(y / floor)``, about 9 nats for
``y = 1``, where a negative output would make it infinite."""
BELIEF_NEXT_TOKEN = "belief next-token"
BELIEF_SORTED = "belief sorted"
BELIEF_ENTROPY = "belief entropy"
CEILING = "ceiling"


def probe_rows(tokens: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``(N,)`` bool: the positions whose own token and next token are HMM tokens (module
    docstring), the same in every prompt of one format; ``ValueError`` if the prompts differ."""
    scored, _ = scored_rows(tokens, num_tokens)
    rows = scored & (tokens != num_tokens)
    if not bool((rows == rows[:1]).all()):
        raise ValueError("tokens: delimiters at different positions in different prompts; expected prompts of one "
                         "format")
    return rows[0]


def filtered_beliefs(mixture: hmm.Mixture, prompts: hmm.Prompts) -> torch.Tensor:
    """``(B, N, S)`` float64: ``P(s_t = . | o_<=t)`` under prompt b's own HMM (``mixture`` task
    ``prompts.task_ids[b]``), each segment filtered from the HMM's initial law; NaN at delimiters."""
    model = mixture.hmm[prompts.task_ids.to(mixture.hmm.device)]
    tokens = prompts.tokens
    beliefs = torch.full((*tokens.shape, model.num_states), math.nan, dtype=torch.float64)
    for start, stop in segments(prompts.format):
        beliefs[:, start:stop] = hmm.filter_beliefs(model, tokens[:, start:stop].to(model.device)).filtered.double().cpu()
    return beliefs


def implied_next_token(mixture: hmm.Mixture, task_ids: torch.Tensor, beliefs: torch.Tensor) -> torch.Tensor:
    """``(B, N, p)`` float64: ``b_t A B``, the next-token distribution that the beliefs ``(B, N, S)``
    imply under each prompt's HMM (task ``task_ids[b]``)."""
    model = mixture.hmm[task_ids.to(mixture.hmm.device)]
    step = (model.transition @ model.emission).double().cpu()
    return beliefs @ step


def belief_targets(mixture: hmm.Mixture, prompts: hmm.Prompts) -> dict[str, torch.Tensor]:
    """``{belief next-token (B, N, p), belief sorted (B, N, S), belief entropy (B, N, 1)}``, the
    targets of the module docstring made from :func:`filtered_beliefs`."""
    beliefs = filtered_beliefs(mixture, prompts)
    return {
        BELIEF_NEXT_TOKEN: implied_next_token(mixture, prompts.task_ids, beliefs),
        BELIEF_SORTED: beliefs.sort(-1, descending=True).values,
        BELIEF_ENTROPY: -torch.xlogy(beliefs, beliefs).sum(-1, keepdim=True),
    }


def prompt_split(num_prompts: int) -> dict[str, torch.Tensor]:
    """``{fit, validation, train, held_out}``: ``(num_prompts,)`` bool masks of the module
    docstring's split (``train`` = ``fit`` or ``validation``)."""
    if isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts < MIN_PROMPTS:
        raise ValueError(f"num_prompts: {num_prompts!r}; expected an integer >= {MIN_PROMPTS}")
    held_out = max(2, round(num_prompts * HELD_OUT_FRACTION))
    train = num_prompts - held_out
    validation = max(1, round(train * VALIDATION_FRACTION))
    index = torch.arange(num_prompts)
    return {"fit": index < train - validation, "validation": (index >= train - validation) & (index < train),
            "train": index < train, "held_out": index >= train}


def ridge_path(features: torch.Tensor, targets: torch.Tensor, penalties) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[(W (d, k), b (k,))]``, one ridge regression of ``targets (n, k)`` on ``features (n, d)``
    per penalty ``lambda``, in float64, the intercept unpenalised::

        W = (X_c^T X_c + lambda I)^-1 X_c^T Y_c,     b = mean(Y) - mean(X) W

    ``X_c``, ``Y_c`` centred. From one eigendecomposition ``X_c^T X_c = V diag(e) V^T``:
    ``W = V diag(1 / (e + lambda)) V^T X_c^T Y_c``. Each output column is its own regression. With
    ``lambda = 0`` this is least squares and needs ``X_c`` of full column rank."""
    if features.dim() != 2 or targets.dim() != 2 or len(features) != len(targets):
        raise ValueError(f"features, targets: shapes {tuple(features.shape)}, {tuple(targets.shape)}; expected (n, d) "
                         f"and (n, k) with the same n")
    penalties = [float(value) for value in penalties]
    if not penalties or not all(math.isfinite(value) and value >= 0 for value in penalties):
        raise ValueError(f"penalties: {penalties}; expected finite numbers >= 0")
    x, y = features.double(), targets.double()
    x_mean, y_mean = x.mean(0), y.mean(0)
    centred = x - x_mean
    eigenvalues, vectors = torch.linalg.eigh(centred.T @ centred)
    projected = vectors.T @ (centred.T @ (y - y_mean))
    path = []
    for penalty in penalties:
        weight = vectors @ (projected / (eigenvalues + penalty)[:, None])
        path.append((weight, y_mean - x_mean @ weight))
    return path


def squared_errors(targets: torch.Tensor, predictions: torch.Tensor,
                   mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(residual (n,), total (n,))``: per row of ``targets (n, k)``, ``sum_k (y_ik - yhat_ik)^2``
    and ``sum_k (y_ik - ybar_k)^2`` for the baseline ``mean (k,)`` = ``ybar``; R^2 (module
    docstring) is ``1 - sum(residual) / sum(total)``."""
    targets = targets.double()
    return (targets - predictions.double()).pow(2).sum(-1), (targets - mean.double()).pow(2).sum(-1)


def r_squared(targets: torch.Tensor, predictions: torch.Tensor, mean: torch.Tensor) -> float:
    """The variance-weighted R^2 of ``predictions`` of ``targets (n, k)`` against the constant
    predictor ``mean (k,)`` (:func:`squared_errors`); NaN when every target equals ``mean``."""
    residual, total = squared_errors(targets, predictions, mean)
    return 1.0 - float(residual.sum() / total.sum()) if float(total.sum()) > 0 else math.nan


def as_distribution(outputs: torch.Tensor) -> torch.Tensor:
    """``max(outputs, floor) / sum_k max(outputs, floor)`` along the last axis (floor
    :data:`PROBABILITY_FLOOR`): a probe's output made a distribution."""
    clipped = outputs.double().clamp_min(PROBABILITY_FLOOR)
    return clipped / clipped.sum(-1, keepdim=True)


def kl_rows(targets: torch.Tensor, distributions: torch.Tensor) -> torch.Tensor:
    """``(n,)``: ``KL(y || q) = sum_k y_k log(y_k / q_k)`` per row (``0 log 0 = 0``)."""
    targets = targets.double()
    return (torch.xlogy(targets, targets) - torch.xlogy(targets, distributions.double())).sum(-1)


def deranged_within_position(targets: torch.Tensor, split: dict[str, torch.Tensor],
                             generator: torch.Generator) -> torch.Tensor:
    """``targets (B, R, k)`` with the prompts deranged within each position (module docstring):
    at every position r, the training prompts receive one another's targets by a uniformly drawn
    derangement, and so do the held-out prompts; no prompt keeps its own."""
    shuffled = targets.clone()
    for part in ("train", "held_out"):
        prompts = torch.nonzero(split[part]).squeeze(1)
        orders = random_derangements(targets.shape[1], len(prompts), generator)  # (R, prompts)
        for position, order in enumerate(orders):
            shuffled[prompts, position] = targets[prompts[order], position]
    return shuffled


def held_out_metrics(targets: torch.Tensor, predictions: torch.Tensor, mean: torch.Tensor, groups: torch.Tensor,
                     distribution: bool) -> dict:
    """R^2 of ``predictions`` of ``targets (n, k)`` against the training ``mean (k,)`` with its
    bootstrap interval over the prompts ``groups (n,)``, and for a ``distribution`` target the mean
    KL to :func:`as_distribution` of the predictions with its interval (module docstring)."""
    residual, total = squared_errors(targets, predictions, mean)
    low, high = bootstrap_ratio_interval(residual, total, groups)
    metrics = {"r2": r_squared(targets, predictions, mean), "r2_interval_95": [1.0 - high, 1.0 - low]}
    if distribution:
        divergence = kl_rows(targets, as_distribution(predictions))
        metrics["kl"] = float(divergence.mean())
        metrics["kl_interval_95"] = list(bootstrap_ratio_interval(divergence, torch.ones_like(divergence), groups))
    return metrics


def _columns(targets: dict[str, torch.Tensor]) -> dict[str, slice]:
    """Where each target's outputs sit in the targets concatenated along the last axis."""
    bounds, start = {}, 0
    for name, values in targets.items():
        bounds[name] = slice(start, start + values.shape[-1])
        start += values.shape[-1]
    return bounds


def fit_probes(features: torch.Tensor, targets: dict[str, torch.Tensor], groups: torch.Tensor,
               split: dict[str, torch.Tensor], distributions: set[str]) -> dict[str, dict]:
    """The fit and the metrics of the module docstring for every target: ``features (n, d)`` and
    ``targets {name: (n, k)}`` of the rows of every prompt, ``groups (n,)`` the prompt of each row,
    ``split`` of :func:`prompt_split`. Per target: ``alpha``, ``validation_r2`` (per candidate of
    :data:`RIDGE_PENALTIES`) and :func:`held_out_metrics` (``distributions``: the targets that
    are distributions)."""
    rows = {part: mask[groups] for part, mask in split.items()}
    columns = _columns(targets)
    stacked = torch.cat([values.double() for values in targets.values()], dim=-1)
    fit_x, validation_x = standardise(features[rows["fit"]], features[rows["validation"]])
    path = ridge_path(fit_x, stacked[rows["fit"]], [alpha * len(fit_x) for alpha in RIDGE_PENALTIES])
    train_x, held_out_x = standardise(features[rows["train"]], features[rows["held_out"]])
    final = ridge_path(train_x, stacked[rows["train"]], [alpha * len(train_x) for alpha in RIDGE_PENALTIES])
    validation_x, held_out_x = validation_x.double(), held_out_x.double()
    fit_mean, train_mean = stacked[rows["fit"]].mean(0), stacked[rows["train"]].mean(0)
    results = {}
    for name, where in columns.items():
        validation = [r_squared(stacked[rows["validation"], where], validation_x @ weight[:, where] + bias[where],
                                fit_mean[where]) for weight, bias in path]
        best = max(range(len(RIDGE_PENALTIES)), key=lambda k: validation[k])
        weight, bias = final[best]
        predictions = held_out_x @ weight[:, where] + bias[where]
        results[name] = {"alpha": RIDGE_PENALTIES[best], "validation_r2": validation,
                         **held_out_metrics(stacked[rows["held_out"], where], predictions, train_mean[where],
                                            groups[rows["held_out"]], name in distributions)}
    return results


def kl_of_training_mean(targets: torch.Tensor, groups: torch.Tensor, split: dict[str, torch.Tensor]) -> dict:
    """Mean KL from the held-out rows of a distribution target ``(n, k)`` to its training mean (a
    constant predictor), with its bootstrap interval: the scale of a probe's KL."""
    rows = {part: mask[groups] for part, mask in split.items()}
    constant = targets[rows["train"]].double().mean(0).expand_as(targets[rows["held_out"]])
    divergence = kl_rows(targets[rows["held_out"]], constant)
    return {"kl": float(divergence.mean()),
            "kl_interval_95": list(bootstrap_ratio_interval(divergence, torch.ones_like(divergence),
                                                            groups[rows["held_out"]]))}


MINIMUMS = {"prompts": MIN_PROMPTS, "fresh_tasks": 1, "seed": 0, "batch_size": 1, "ceiling_particles": 0}
"""The smallest value of each field of :class:`BeliefSettings`."""
COUNTS_FROM_ZERO = tuple(name for name, minimum in MINIMUMS.items() if minimum == 0)
"""The fields of :class:`BeliefSettings` that may be 0 (a seed, and 0 particles: no ceiling)."""


@dataclass(frozen=True)
class BeliefSettings:
    """What :func:`beliefs_report` measures on (the options of ``hmmtf beliefs``); each field at
    least its :data:`MINIMUMS` entry, checked on construction."""

    prompts: int = option(256, f"fresh-HMM prompts (empirical.yardsticks.curves.fresh_prompts), at least {MIN_PROMPTS}; the last "
                               f"quarter is held out, and the last quarter of the others chooses the ridge penalty")
    fresh_tasks: int = option(1024, "fresh HMMs of the prompts; as many others, of other seed streams, fit the "
                                    "in-context n-grams' concentrations")
    seed: int = option(0, "seed of the random-init RoFormer and of the shuffled-target derangements")
    batch_size: int = option(64, "prompts per forward pass that records the residual streams")
    ceiling_particles: int = option(CEILING_SETTINGS.particles, "SMC particles per replicate of the prior-predictive "
                                                                "ceiling, a probe target (minutes on the paper's "
                                                                "16-state family); 0 skips that target")

    def __post_init__(self) -> None:
        for name, minimum in MINIMUMS.items():
            check_integers(self, (name,), minimum)


def reference_targets(tokens: torch.Tensor, preset: ExperimentPreset, settings: BeliefSettings) -> tuple[dict, dict | None]:
    """``({ngram n: (B, N, p)}, ceiling settings)``: the in-context n-grams' predictions and, unless
    ``ceiling_particles`` is 0, the averaged ceiling (``ceiling``; its SMC settings, replicates and
    seconds come second, else None)."""
    references = {name: ngram(tokens) for name, ngram in fitted_ngrams(preset, settings.fresh_tasks).items()}
    if not settings.ceiling_particles:
        return references, None
    estimates = ceiling_estimates(tokens, preset.prompt_format, preset.mixture_spec,
                                  dataclasses.replace(CEILING_SETTINGS, particles=settings.ceiling_particles))
    references[CEILING] = estimates.probabilities
    return references, estimates.record()


def beliefs_report(model: RoFormer, preset: ExperimentPreset, settings: BeliefSettings,
                   device: torch.device | str = "cpu") -> dict:
    """Every probe of the module docstring on fresh-HMM prompts of ``preset`` (the checkpoint's):
    per feature set (``trained``, ``random-init``, ``shuffled targets``: the trained network's
    streams against the deranged targets), layer and target, the held-out metrics; JSON-ready."""
    fresh, prompts = fresh_prompts(preset, settings.prompts, settings.fresh_tasks)
    tokens, num_tokens = prompts.tokens, fresh.num_tokens
    rows = probe_rows(tokens, num_tokens)
    references, ceiling = reference_targets(tokens, preset, settings)
    full = {**belief_targets(fresh, prompts), **references}
    at_rows = {name: values[:, rows] for name, values in full.items()}  # (B, R, k)
    split = prompt_split(settings.prompts)
    # One derangement for every target: a row's shuffled targets all come from the same other prompt.
    shuffled = {name: deranged_within_position(values, split, torch.Generator().manual_seed(settings.seed))
                for name, values in at_rows.items()}
    flat = {name: values.flatten(0, 1) for name, values in at_rows.items()}
    groups = torch.arange(settings.prompts).repeat_interleave(int(rows.sum()))
    distributions = set(full) - {BELIEF_ENTROPY}
    networks = {"trained": model, "random-init": random_init_like(model, settings.seed).to(device)}
    streams = {name: roformer_streams(weights, tokens, rows, device, settings.batch_size, name)
               for name, weights in networks.items()}
    streams["shuffled targets"] = streams["trained"]
    probes = {}
    for network, by_layer in streams.items():
        targets = {name: values.flatten(0, 1) for name, values in shuffled.items()} if network == "shuffled targets" else flat
        probes[network] = {layer: fit_probes(features, targets, groups, split, distributions)
                           for layer, features in by_layer.items()}
    return {
        "settings": dataclasses.asdict(settings),
        "prompts": {"source": f"fresh_prompts(preset, {settings.prompts}, {settings.fresh_tasks}): draw 0 of stream "
                              f"{FRESH_PROMPT_STREAM}",
                    "length": preset.prompt_format.length, "rows_per_prompt": int(rows.sum()),
                    "split": {part: int(mask.sum()) for part, mask in split.items()}},
        "targets": {name: {"dimensions": values.shape[-1], "distribution": name in distributions,
                           **({"training_mean": kl_of_training_mean(flat[name], groups, split)}
                              if name in distributions else {})}
                    for name, values in full.items()},
        "ridge": {"alphas": list(RIDGE_PENALTIES), "penalty": "lambda = alpha * (fitted rows), standardised features",
                  "probability_floor": PROBABILITY_FLOOR, "confidence": CONFIDENCE},
        "ceiling": ceiling,
        "probes": probes,
    }
