"""In-context metrics of next-token predictors on held-out prompts, beside the Bayes-optimal
predictor and a unigram baseline.

Every predictor has one signature (as in Garg et al.'s baselines): ``predictor(tokens (B, N))
-> probabilities (B, N, p)`` float64 over the ``p`` HMM tokens, row t for the token after
position t. The model's row is its softmax restricted to the HMM tokens (the delimiter logit is
dropped: it is never a target). A predictor that cannot serve some rows (the L-history predictors
of :mod:`empirical.yardsticks.hand_built`) leaves them NaN, and the evaluation is then restricted to the rows
every predictor serves (``rows``). Definitions, on the positions where the next token is an HMM
token:

    loss      = -log q(o_{t+1})                        (nats/token)
    accuracy  = [argmax q = o_{t+1}]                   (top-1)
    agreement = [argmax q = argmax q_Bayes]
    excess    = loss(model) - loss(Bayes),   gap = loss(unigram) - loss(Bayes)

Curves (the paper's Figure 1): *vs number of demonstrations k* averages over the tokens
``1..demo_length-1`` of the segment that follows k demonstrations (for ``k < n`` that is the
(k+1)-th demonstration, distributed exactly like the first tokens of a test sequence after k
demonstrations); *vs position in the test sequence* is per test token ``i = 0..test_length-1``
after all n demonstrations. Error bars are standard errors over prompts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

import torch
from tqdm import tqdm

import hmm
from bounds.serialize import INLINE, OMIT_IF_NONE, json_key
from empirical.training.data import prompt_batch, unigram_distribution
from empirical.training.model import RoFormer
from empirical.training.presets import ExperimentPreset
from empirical.training.train import IGNORE_INDEX
from hmm.bayes import DEFAULT_CHUNK_BYTES

Predictor = Callable[[torch.Tensor], torch.Tensor]
"""``predictor(tokens (B, N)) -> (B, N, p)`` float64 next-token probabilities over HMM tokens."""

EVAL_BATCH = 256
"""Prompts per forward pass of the model (and per Bayes-optimal call) during evaluation."""
CUDA_BAYES_CHUNK_BYTES = 1 << 30
"""Per-chunk memory of the Bayes-optimal predictor on a GPU. The CPU default
(:data:`hmm.bayes.DEFAULT_CHUNK_BYTES`, 4 MiB, sized for a cache) holds 4 tasks of the paper's
mixture for :data:`EVAL_BATCH` prompts (about 1 MB of state per task), i.e. 2048 chunks of a few
small kernels per position; 1 GiB holds about 1000 tasks, a few GiB of temporaries."""


Value = TypeVar("Value")
"""A metric's value in :class:`Metrics`: a number over a scope, or a list over the points of a curve."""


@dataclass(frozen=True)
class Metrics(Generic[Value]):
    """One predictor's metrics (module docstring), each with its standard error over prompts: a
    number (``Metrics[float]``, over a scope) or a list (``Metrics[list[float]]``, over the points of
    a curve). ``agreement_with_bayes`` is with the evaluation's reference, Bayes or not."""

    loss: Value
    loss_stderr: Value
    accuracy: Value
    accuracy_stderr: Value
    agreement_with_bayes: Value
    agreement_with_bayes_stderr: Value


@dataclass(frozen=True)
class Excess:
    """A predictor's ``excess_loss = loss - loss(reference)`` and ``excess_over_gap = excess_loss / gap``."""

    excess_loss: float
    excess_over_gap: float


@dataclass(frozen=True)
class GapReport:
    """On one scope: the reference's and the baseline's losses, ``gap = baseline_loss -
    reference_loss``, and the :class:`Excess` of every other predictor, by name (written inline
    beside the losses). Written under the names of the usual reference and baseline, ``bayes_loss``
    and ``unigram_loss``, whatever they are."""

    reference_loss: float = field(metadata=json_key("bayes_loss"))
    baseline_loss: float = field(metadata=json_key("unigram_loss"))
    gap: float
    excess: dict[str, Excess] = field(metadata=INLINE)


@dataclass(frozen=True)
class DemonstrationCurve:
    """Every predictor's metrics vs the number of demonstrations k (module docstring): one entry per
    k of ``num_demonstrations``; the predictors written inline, by name."""

    num_demonstrations: list[int]
    predictors: dict[str, Metrics[list[float]]] = field(metadata=INLINE)


@dataclass(frozen=True)
class PositionCurve:
    """Every predictor's metrics vs the position i in the test sequence (module docstring): one entry
    per i of ``position``; the predictors written inline, by name."""

    position: list[int]
    predictors: dict[str, Metrics[list[float]]] = field(metadata=INLINE)


@dataclass(frozen=True)
class LossDifference:
    """The mean over prompts of ``loss_a - loss_b`` (each prompt's loss averaged over the scope) and its
    standard error over prompts."""

    loss_difference: float
    loss_difference_stderr: float


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate_predictors` measures: ``num_prompts`` prompts of ``prompt_format``,
    ``evaluated_rows`` rows of each, every predictor's :class:`Metrics` by name in the test sequence
    and over all positions, the excess over the ``reference`` with its fraction of the gap to the
    ``baseline`` on both scopes, the two curves, and the ``paired`` loss differences (by ``"a - b"``,
    then scope; None, and not written, when no pair was asked for)."""

    num_prompts: int
    prompt_format: hmm.PromptFormat
    reference: str
    baseline: str
    evaluated_rows: int
    test_sequence: dict[str, Metrics[float]]
    all_positions: dict[str, Metrics[float]]
    excess_test_sequence: GapReport
    excess_all_positions: GapReport
    by_demonstrations: DemonstrationCurve
    by_test_position: PositionCurve
    paired: dict[str, dict[str, LossDifference]] | None = field(default=None, metadata=OMIT_IF_NONE)


def _chunks(tokens: torch.Tensor, name: str):
    """``tokens`` in blocks of :data:`EVAL_BATCH` prompts, with a progress bar."""
    return tqdm(tokens.split(EVAL_BATCH), desc=f"evaluate {name}", unit="batch", leave=False)


def hmm_token_probs(logits: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``softmax(logits[..., :p])`` in float64: the network's distribution over the p HMM tokens
    (the delimiter's logit dropped: a delimiter is never the token to predict)."""
    return logits[..., :num_tokens].double().softmax(-1)


def model_predictor(model: RoFormer, num_tokens: int, device: torch.device | str = "cpu") -> Predictor:
    """The model as a :data:`Predictor`: :func:`hmm_token_probs` of its logits."""

    @torch.no_grad()
    def predict(tokens: torch.Tensor) -> torch.Tensor:
        model.eval()
        return torch.cat([hmm_token_probs(model(chunk.to(device)), num_tokens).cpu()
                          for chunk in _chunks(tokens, "model")])

    return predict


def bayes_predictor(mixture: hmm.Mixture) -> Predictor:
    """The exact posterior predictive of the mixture (:func:`hmm.bayes_predictive`), computed on
    the mixture's device in its dtype (chunks of :data:`CUDA_BAYES_CHUNK_BYTES` on a GPU)."""
    chunk_bytes = CUDA_BAYES_CHUNK_BYTES if mixture.hmm.device.type == "cuda" else DEFAULT_CHUNK_BYTES

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            hmm.bayes_predictive(mixture, chunk, chunk_bytes=chunk_bytes).next_token.double().cpu()
            for chunk in _chunks(tokens, "Bayes")
        ])

    return predict


def unigram_predictor(distribution: torch.Tensor) -> Predictor:
    """The same distribution ``(p,)`` at every position, whatever the context."""

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        return distribution.double().expand(*tokens.shape, -1)

    return predict


def in_context_predictors(model: RoFormer, mixture: hmm.Mixture, preset: ExperimentPreset, num_prompts: int,
                          device: torch.device) -> dict[str, Predictor]:
    """The predictors ``hmmtf evaluate`` compares: ``model`` (on ``device``), ``bayes`` (the
    mixture moved to ``device``, float64 kept) and ``unigram`` (from ``num_prompts`` prompts of
    the preset's unigram stream)."""
    on_device = hmm.Mixture(mixture.hmm.to(device), mixture.weights.to(device))
    unigram = unigram_distribution(mixture, preset.prompt_format, num_prompts, preset.data_seed)
    return {
        "model": model_predictor(model, mixture.num_tokens, device),
        "bayes": bayes_predictor(on_device),
        "unigram": unigram_predictor(unigram),
    }


def _check_mask(mask: torch.Tensor, where: str) -> None:
    """``ValueError`` naming ``where`` (the prompts' format and the curve point) if ``mask`` is empty."""
    if not bool(mask.any()):
        raise ValueError(f"{where}: selects no position; expected at least one predicted HMM token to average over")


def _mean_and_stderr(values: torch.Tensor, mask: torch.Tensor, where: str) -> tuple[float, float]:
    """Mean of ``values (B, N)`` over ``mask (N,)`` and its standard error over the B prompts;
    ``ValueError`` naming ``where`` when ``mask`` selects no position (the mean would be NaN)."""
    _check_mask(mask, where)
    per_prompt = values[:, mask].double().mean(-1)
    count = per_prompt.numel()
    stderr = per_prompt.std().item() / count**0.5 if count > 1 else float("nan")
    return per_prompt.mean().item(), stderr


def evaluate_predictors(predictors: dict[str, Predictor], prompts: hmm.Prompts, num_tokens: int, *,
                        reference: str = "bayes", baseline: str = "unigram", rows: torch.Tensor | None = None,
                        pairs: tuple[tuple[str, str], ...] = ()) -> Evaluation:
    """All metrics of the module docstring for every predictor, as an :class:`Evaluation`.

    ``num_tokens`` is p (the delimiter token). ``reference`` (the Bayes-optimal predictor) and
    ``baseline`` (the unigram) name entries of ``predictors``; excess loss and its fraction of the
    unigram-to-Bayes gap are reported for every other predictor. ``rows (N,) bool`` restricts
    every average to those rows (row t predicts token t + 1); a curve point left without a row is
    then left out of its curve (its k or position is not listed), while without ``rows`` an empty
    point is refused. Every predictor must give a distribution on every evaluated row.

    ``pairs``: ``(a, b)`` names of predictors whose loss difference is also reported per prompt
    (``paired["a - b"]``, test sequence and all positions): the mean of ``loss_a - loss_b`` and its
    standard error over prompts, which is far smaller than the two losses' errors combined when
    both follow the same prompt's difficulty.
    """
    for role, name in (("reference", reference), ("baseline", baseline), *(("pairs", n) for pair in pairs for n in pair)):
        if name not in predictors:
            raise ValueError(f"{role}: {name!r} is not among the predictors {sorted(predictors)}; expected one of them")
    fmt = prompts.format
    restricted = rows is not None
    if restricted and (rows.shape != (fmt.length,) or rows.dtype != torch.bool):
        raise ValueError(f"rows: shape {tuple(rows.shape)}, dtype {rows.dtype}; expected ({fmt.length},) bool")
    rows = rows if restricted else torch.ones(fmt.length, dtype=torch.bool)
    targets = prompt_batch(prompts, num_tokens).targets
    counted = targets != IGNORE_INDEX
    safe_targets = targets.clamp_min(0)
    # Row t predicts position t + 1: describe every row by the segment and offset of its target.
    target_segment = torch.cat([fmt.segment_index[1:], torch.tensor([-1])])
    target_offset = torch.cat([fmt.position_in_segment[1:], torch.tensor([-1])])
    all_rows = counted.all(0) & rows
    test_rows = (target_segment == fmt.num_demos) & all_rows
    demo_masks = {
        k: (target_segment == k) & (target_offset >= 1) & (target_offset < fmt.demo_length) & all_rows
        for k in range(fmt.num_demos + 1)
    }
    position_masks = {i: (target_segment == fmt.num_demos) & (target_offset == i) & all_rows
                      for i in range(fmt.test_length)}
    if restricted:
        demo_masks = {k: mask for k, mask in demo_masks.items() if bool(mask.any())}
        position_masks = {i: mask for i, mask in position_masks.items() if bool(mask.any())}
    described = (f"prompts (format num_demos={fmt.num_demos}, demo_length={fmt.demo_length}, "
                 f"test_length={fmt.test_length})")
    scopes = {
        "test_sequence": test_rows,
        "all_positions": all_rows,
        **{f"by_demonstrations point k={k}": mask for k, mask in demo_masks.items()},
        **{f"by_test_position point i={i}": mask for i, mask in position_masks.items()},
    }
    for scope, mask in scopes.items():  # before the (costly) predictors run
        _check_mask(mask, f"{described}, {scope}")

    probabilities = {name: predictor(prompts.tokens) for name, predictor in predictors.items()}
    for name, probs in probabilities.items():
        evaluated = probs[:, all_rows]
        invalid = int((~torch.isfinite(evaluated).all(-1) | (evaluated < 0).any(-1)).sum())
        if invalid:
            raise ValueError(f"predictor {name!r}: {invalid} evaluated rows are not distributions (NaN, infinite or "
                             f"negative entries); expected a distribution on every row it is evaluated on (pass rows "
                             f"to leave out rows it cannot serve)")
    argmax_reference = probabilities[reference].argmax(-1)
    per_position = {}
    for name, probs in probabilities.items():
        picked = probs.gather(-1, safe_targets[..., None]).squeeze(-1)
        per_position[name] = {
            "loss": -picked.log(),
            "accuracy": (probs.argmax(-1) == targets).double(),
            "agreement_with_bayes": (probs.argmax(-1) == argmax_reference).double(),
        }

    def summary(scope: str) -> dict[str, Metrics[float]]:
        result = {}
        for name, metrics in per_position.items():
            values = {}
            for metric, per_row in metrics.items():
                values[metric], values[f"{metric}_stderr"] = _mean_and_stderr(per_row, scopes[scope],
                                                                              f"{described}, {scope}")
            result[name] = Metrics(**values)
        return result

    def curve(point_scopes: list[str]) -> dict[str, Metrics[list[float]]]:
        points = [summary(scope) for scope in point_scopes]
        return {name: Metrics(**{metric.name: [getattr(point[name], metric.name) for point in points]
                                 for metric in dataclasses.fields(Metrics)})
                for name in per_position}

    test, everywhere = summary("test_sequence"), summary("all_positions")
    others = [name for name in predictors if name not in (reference, baseline)]

    def gap_report(scope: dict[str, Metrics[float]]) -> GapReport:
        reference_loss, baseline_loss = scope[reference].loss, scope[baseline].loss
        gap = baseline_loss - reference_loss
        excess = {name: scope[name].loss - reference_loss for name in others}
        return GapReport(reference_loss, baseline_loss, gap,
                         {name: Excess(value, value / gap) for name, value in excess.items()})

    paired = {}
    for first, second in pairs:
        difference = per_position[first]["loss"] - per_position[second]["loss"]
        paired[f"{first} - {second}"] = {
            scope: LossDifference(*_mean_and_stderr(difference, scopes[scope], f"{described}, {scope}"))
            for scope in ("test_sequence", "all_positions")}

    return Evaluation(
        num_prompts=int(prompts.tokens.shape[0]),
        prompt_format=fmt,
        reference=reference,
        baseline=baseline,
        evaluated_rows=int(all_rows.sum()),
        test_sequence=test,
        all_positions=everywhere,
        excess_test_sequence=gap_report(test),
        excess_all_positions=gap_report(everywhere),
        by_demonstrations=DemonstrationCurve(list(demo_masks),
                                             curve([f"by_demonstrations point k={k}" for k in demo_masks])),
        by_test_position=PositionCurve(list(position_masks),
                                       curve([f"by_test_position point i={i}" for i in position_masks])),
        paired=paired if pairs else None,
    )
