"""Learning curves on fresh HMMs: how a run's in-context competence grows with the tokens it has seen.

``hmmtf curve`` trains like ``hmmtf train`` and, every ``--every`` steps, scores the network on a
fixed set of prompts of HMMs it never saw (the competence result's fresh HMMs and prompts,
:mod:`empirical.yardsticks.competence`), beside the in-context 1/2/3-grams, the variable-order
predictor (``variable order``, in baselines made from issue 65 on), the prior-predictive ceiling and
the oracle on the same prompts. Each point is a line of ``curve.jsonl`` in the run folder:

* the model's mean loss per scope (test sequence, all positions);
* ``model - ngram n`` and ``model - variable order`` (where the baselines have it): the paired
  per-prompt difference, mean and 95% interval (the competence rule's statistic: the model beats
  the predictor where the interval lies below 0);
* the fraction of the in-context-unigram-to-ceiling gap closed, with its delta-method interval
  (absent from a run without a ceiling, ``--ceiling-particles 0``: at 128 states the SMC's ceiling
  costs more than the run and has not converged, ``docs/empirical.md``, "Competence numbers").

Training runs in chunks of ``--every`` steps, each a call of :func:`empirical.training.train.train` with
``stop_at``; a chunk resumes the previous one's checkpoint bit-exactly (``train``'s guarantee), so
the network is the one an uninterrupted run trains, and a stopped curve resumes where its last
point was written. The n-grams' and the ceiling's per-prompt losses are computed once per run and
kept in ``curve_baselines.json`` beside the log.

A run can branch from another's checkpoint (:func:`empirical.training.train.branch_run`), typically a
constant-rate run into its final decay: the branch starts with the source's points up to the
branch's step and its baselines, and trains on from there.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

import hmm
from empirical.training.checkpoint import CONFIG_FILE, has_checkpoint
from empirical.yardsticks.competence import (CEILING_SETTINGS, VARIABLE_ORDER, ceiling_estimates, fitted_in_context,
                                             gap_closed, paired, per_prompt_loss, scope_rows)
from empirical.yardsticks.evaluate import model_predictor
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.presets import ExperimentPreset
from empirical.yardsticks.regime import fresh_prompts, oracle_predictor
from empirical.training.streams import training_stream
from empirical.training.train import CHECKPOINT_DIR, branch_run, train
from hmm.prior_predictive import SMCSettings

CURVE_FILE = "curve.jsonl"
BASELINES_FILE = "curve_baselines.json"


@dataclasses.dataclass(frozen=True)
class CurveProbe:
    """The fixed fresh-HMM prompts of a curve and every baseline's per-prompt loss on them:
    ``losses[scope][name]`` is a float64 tensor over prompts (``name`` in ``ngram 1..3``,
    ``variable order`` (absent from baselines made before it), ``ceiling``, ``oracle``)."""

    tokens: torch.Tensor
    num_tokens: int
    prompt_format: hmm.PromptFormat
    losses: dict[str, dict[str, torch.Tensor]]


PROBE_KEYS = ("num_prompts", "fresh_tasks", "ceiling_settings")
"""What a curve's probe is scored on, as :func:`probe_settings` records it in the baselines."""


def probe_settings(num_prompts: int, fresh_tasks: int, settings: SMCSettings | None) -> dict:
    """The :data:`PROBE_KEYS` of a probe of ``num_prompts`` prompts of ``fresh_tasks`` fresh HMMs, its
    ceiling by the SMC ``settings`` (None: no ceiling)."""
    return dict(zip(PROBE_KEYS, (num_prompts, fresh_tasks, None if settings is None else dataclasses.asdict(settings))))


def build_probe(preset: ExperimentPreset, num_prompts: int, fresh_tasks: int, settings: SMCSettings | None) -> dict:
    """The baselines of a curve as a JSON-ready dict (:class:`CurveProbe`'s ``losses`` with the
    settings that made them): in-context n-grams and the variable-order predictor fitted as the
    competence result fits them, the ceiling averaged over its SMC replicates (none where ``settings`` is None), and the oracle."""
    fresh, prompts = fresh_prompts(preset, num_prompts, fresh_tasks)
    tokens, p = prompts.tokens, fresh.num_tokens
    started = time.perf_counter()
    probabilities = {name: predictor(tokens) for name, predictor in fitted_in_context(preset, fresh_tasks).items()}
    if settings is not None:
        probabilities["ceiling"] = ceiling_estimates(tokens, preset.prompt_format, preset.mixture_spec,
                                                     settings).probabilities
    probabilities["oracle"] = oracle_predictor(fresh, prompts)(tokens)
    losses = {scope: {name: per_prompt_loss(probs, tokens, p, rows).tolist() for name, probs in probabilities.items()}
              for scope, rows in scope_rows(preset.prompt_format).items()}
    return {**probe_settings(num_prompts, fresh_tasks, settings), "seconds": time.perf_counter() - started,
            "losses": losses}


def load_probe(preset: ExperimentPreset, baselines: dict) -> CurveProbe:
    """The :class:`CurveProbe` of a :func:`build_probe` record (its prompts drawn again from their seeds)."""
    fresh, prompts = fresh_prompts(preset, baselines["num_prompts"], baselines["fresh_tasks"])
    losses = {scope: {name: torch.tensor(values, dtype=torch.float64) for name, values in by_name.items()}
              for scope, by_name in baselines["losses"].items()}
    return CurveProbe(prompts.tokens, fresh.num_tokens, preset.prompt_format, losses)


def curve_point(model: RoFormer, probe: CurveProbe, step: int, tokens_seen: int) -> dict:
    """One point of the curve (module docstring) for ``model`` after ``step`` steps."""
    probabilities = model_predictor(model, probe.num_tokens)(probe.tokens)
    point = {"step": step, "tokens": tokens_seen}
    for scope, rows in scope_rows(probe.prompt_format).items():
        model_loss = per_prompt_loss(probabilities, probe.tokens, probe.num_tokens, rows)
        baselines = probe.losses[scope]
        point[scope] = {
            "model_loss": model_loss.mean().item(),
            "model_minus": {name: paired(model_loss - baselines[name])
                            for name in baselines if name.startswith("ngram") or name == VARIABLE_ORDER},
        }
        if "ceiling" in baselines:
            point[scope]["gap_closed"] = gap_closed(baselines["ngram 1"], model_loss, baselines["ceiling"])
    return point


def written_points(run_dir: Path) -> list[dict]:
    """The points already in ``run_dir``'s curve log."""
    path = run_dir / CURVE_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def branch_curve(source_dir: Path, run_dir: Path, preset: ExperimentPreset, model_config: RoFormerConfig,
                 every: int, probe: dict, command: str | None = None) -> int:
    """Start the curve run ``run_dir`` as a branch of the curve run ``source_dir`` at its checkpoint's
    step ``k`` (:func:`empirical.training.train.branch_run`), with the source's baselines and its points up
    to ``k``; returns ``k``. ``ValueError`` when the source's probe is not ``probe``
    (:func:`probe_settings`) or
    ``k`` is not a multiple of ``every``."""
    baselines = json.loads((source_dir / BASELINES_FILE).read_text())
    source_probe = {key: baselines[key] for key in PROBE_KEYS}
    if source_probe != probe:
        raise ValueError(f"branch_from: {str(source_dir)!r} was scored on the probe {source_probe}; expected "
                         f"{probe}, this run's")
    source_step = json.loads((source_dir / CHECKPOINT_DIR / CONFIG_FILE).read_text())["step"]
    if source_step % every:
        raise ValueError(f"every: {every}; expected a divisor of the step {source_step} of branch_from "
                         f"{str(source_dir)!r}, so that the branch's points fall where the source's do")
    branched_at = branch_run(source_dir, run_dir, model_config, preset.train, preset.task(), command)
    (run_dir / BASELINES_FILE).write_text(json.dumps(baselines, allow_nan=False) + "\n")
    (run_dir / CURVE_FILE).write_text("".join(json.dumps(point, allow_nan=False) + "\n" for point in written_points(source_dir)
                                              if point["step"] <= branched_at))
    return branched_at


def train_with_curve(preset: ExperimentPreset, model_config: RoFormerConfig, run_dir: Path, every: int,
                     num_prompts: int, fresh_tasks: int, settings: SMCSettings | None = CEILING_SETTINGS,
                     command: str | None = None, branch_from: Path | None = None,
                     stop_requested: Callable[[], bool] | None = None) -> list[dict]:
    """Train ``model_config`` on ``preset``'s data and schedule in ``run_dir`` in chunks of
    ``every`` steps, a curve point after each (module docstring); returns every point of the log.
    Resumes a stopped run; a new one starts as a branch of the curve run ``branch_from`` when
    given (:func:`branch_curve`), which a resumed one no longer needs. When ``stop_requested()``
    turns true, training stops at the next step with a checkpoint (``train``) and no point is
    written for the unfinished chunk."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1 or preset.train.steps % every:
        raise ValueError(f"every: {every!r}; expected a positive divisor of the run's steps ({preset.train.steps})")
    if every % preset.train.log_every:
        raise ValueError(f"every: {every}; expected a multiple of log_every = {preset.train.log_every} (each chunk "
                         f"ends on a boundary of the training log's windows)")
    run_dir.mkdir(parents=True, exist_ok=True)
    if branch_from is not None and not has_checkpoint(run_dir / CHECKPOINT_DIR):
        step = branch_curve(Path(branch_from), run_dir, preset, model_config, every,
                            probe_settings(num_prompts, fresh_tasks, settings), command)
        print(f"branched from {branch_from} at step {step}", flush=True)
    baselines_path = run_dir / BASELINES_FILE
    if not baselines_path.is_file():
        baselines_path.write_text(json.dumps(build_probe(preset, num_prompts, fresh_tasks, settings), allow_nan=False) + "\n")
    probe = load_probe(preset, json.loads(baselines_path.read_text()))
    mixture = preset.build_mixture()
    stream = training_stream(mixture, preset)
    done = {point["step"] for point in written_points(run_dir)}
    tokens_per_step = preset.train.batch_size * preset.prompt_format.length
    for stop in range(every, preset.train.steps + 1, every):
        if stop in done:
            continue
        result = train(model_config, preset.train, stream, run_dir, task=preset.task(),
                       command=command, stop_at=stop, progress=False, stop_requested=stop_requested)
        if result.interrupted:
            break
        point = curve_point(result.model, probe, stop, stop * tokens_per_step)
        point["train_loss"] = result.last_loss
        with open(run_dir / CURVE_FILE, "a") as log:
            log.write(json.dumps(point, allow_nan=False) + "\n")
        summary = point["all_positions"]
        closed = f", gap closed {summary['gap_closed']['fraction']:.2f}" if "gap_closed" in summary else ""
        print(f"step {stop}: fresh-HMM loss {summary['model_loss']:.4f}, model - bigram "
              f"{summary['model_minus']['ngram 2']['mean']:+.4f}{closed}", flush=True)
    return written_points(run_dir)


def baseline_means(baselines: dict) -> dict[str, dict[str, float]]:
    """``{scope: {name: mean loss}}`` of a :func:`build_probe` record."""
    return {scope: {name: math.fsum(values) / len(values) for name, values in losses.items()}
            for scope, losses in baselines["losses"].items()}


def run_summary(run_dir: Path) -> dict:
    """One run of a study: its model and training (from its checkpoint's ``config.json``, with the
    run and step it branched from, or None), its curve's points and its baselines' mean losses."""
    config = json.loads((run_dir / CHECKPOINT_DIR / CONFIG_FILE).read_text())
    baselines = json.loads((run_dir / BASELINES_FILE).read_text())
    return {"run": run_dir.name, "command": config["command"], "model": config["model"], "train": config["train"],
            "mixture": config["task"]["mixture"], "branched_from": config.get("branched_from"),
            "points": written_points(run_dir),
            "baselines": baseline_means(baselines), "probe": {key: baselines[key] for key in PROBE_KEYS}}
