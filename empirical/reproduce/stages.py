"""The stages of ``hmmtf reproduce`` and the loop that runs them, resumably.

Each stage writes into its own folder ``OUT/<stage>/`` and returns what it measured; the loop
(:func:`run_stages`) times it, records it in ``record.json`` and skips it in a later invocation
once it is done. A stage cut off in the middle runs again from its start, except training,
which resumes from its last checkpoint (``empirical.training.train``: every ``checkpoint_every`` steps).

SIGINT and SIGTERM (:func:`empirical.training.run_control.stop_on_signals`, as ``hmmtf train``) stop the
run at a safe point: training at the end of its step, with a checkpoint; any other stage at its
end, done. The stage is recorded ``interrupted`` (training) or ``done``, ``progress.json`` says
where the run stopped (``interrupted``), and a later invocation resumes there, saying from where.

    mixture   the preset's K HMMs, generated on the host from the preset's seed (the generator is
              seeded numpy, so this is the mixture ``hmmtf evaluate`` rebuilds from a checkpoint;
              the stages that compute with it move it to the device), and their SHA-256
    train     ``empirical.training.train.train`` on fresh prompts every step (bf16 autocast on CUDA, fused
              attention, ``torch.compile`` as the preset says), checkpoints in ``train/checkpoint``
    evaluate  in-context loss / accuracy of the model, the exact Bayes-optimal predictor over all
              K HMMs (float64, on the device) and the unigram (``empirical.yardsticks.evaluate``)
    ngram-verdict  (the presets of ``config.VERDICT_SETTINGS`` only: ``paper-cpu``) the competence
              gate: ``hmmtf ngram-verdict``'s comparison of the checkpoint with the in-context
              n-grams and the variable-order predictor on fresh HMMs
              (``empirical.analysis.ngram_verdict``); recorded, it does not stop the run
    analyze   ``empirical.analysis``: shuffle test, probes with the random-init baseline, offset
              profiles, attention maps, hand-built vs trained
    patching  ``empirical.analysis.patching``: state forcing of the trained RoFormer (four
              controls) and history patching of it and of the hand-built network
    bundle    every JSON and figure in one archive (``empirical.reproduce.bundle``)

:data:`STAGES` is the one list of stages: a stage is a function writing into its folder, a
cost function for the plan (``empirical.reproduce.plan``) and the presets that run it (every
preset unless it names them; :func:`preset_stages`). A stage whose work grows with counts
of the analysis settings returns under ``ran`` the count of each that it ran; the record keeps it
beside the cap the plan costed it at (``counts``: ``{name: {"cap": ..., "ran": ...}}``).
"""
from __future__ import annotations

import dataclasses
import os
import resource
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import torch

import hmm
from bounds.serialize import to_json
from empirical.analysis.ngram_verdict import ngram_verdict_report, plot_ngram_verdict
from empirical.analysis.report import analyze, patching_report
from empirical.analysis.report_figures import write_figures, write_patching_figures
from empirical.training.checkpoint import CONFIG_FILE, load_checkpoint
from empirical.training.data import held_out_prompts
from empirical.yardsticks.evaluate import Predictor, evaluate_predictors, in_context_predictors
from empirical.training.model import training_flops_per_token
from empirical.reports.plots import plot_in_context, plot_training_loss
from empirical.reproduce import plan
from empirical.reproduce.bundle import write_bundle
from empirical.reproduce.config import VERDICT_SETTINGS, ReproduceConfig
from empirical.reproduce.record import (
    PROGRESS_FILE,
    RECORD_FILE,
    environment,
    git_state,
    metrics_records,
    read_json,
    write_json,
)
from empirical.measurement.roofline import synchronize, timed
from empirical.training.result_files import ANALYSIS_FILE, EVALUATION_FILE, NGRAM_VERDICT_FIGURE, NGRAM_VERDICT_FILE
from empirical.training.run_control import StopRequest
from empirical.training.streams import step_lengths, training_stream
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE, train

MIXTURE_FILE = "mixture.json"
PATCHING_FILE = "patching.json"


class Reproduction:
    """What every stage of one invocation reads: the config, the run folder, the command line,
    the rates measured at the start, the stop request of SIGINT and SIGTERM (training asks it
    after every step); the mixture is built once per process."""

    def __init__(self, config: ReproduceConfig, out: Path, command: str, rates: plan.Rates,
                 stop: StopRequest) -> None:
        self.config = config
        self.out = out
        self.command = command
        self.rates = rates
        self.stop = stop

    def folder(self, stage: str) -> Path:
        """``OUT/<stage>/``, created."""
        path = self.out / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def checkpoint(self) -> Path:
        return self.out / "train" / CHECKPOINT_DIR

    @cached_property
    def mixture(self) -> hmm.Mixture:
        """The preset's mixture (host, float64). Refused if its fingerprint differs from the one
        the mixture stage recorded: another numpy could draw other HMMs from the same seed, and
        the checkpoint would then be evaluated on a mixture it was not trained on."""
        mixture = self.config.preset.build_mixture()
        recorded = read_json(self.out / "mixture" / MIXTURE_FILE)
        if recorded is not None:
            fingerprint = plan.mixture_fingerprint(mixture)
            if fingerprint != recorded["fingerprint"]:
                raise ValueError(
                    f"mixture: this machine generates preset {self.config.preset.name!r} (seed "
                    f"{self.config.preset.mixture_seed}) with fingerprint {fingerprint}; expected "
                    f"{recorded['fingerprint']}, recorded by the mixture stage in {str(self.out)!r}")
        return mixture


def mixture_stage(run: Reproduction) -> dict:
    """Generate the mixture and record its spec, seed and fingerprint."""
    mixture = run.mixture
    fingerprint = plan.mixture_fingerprint(mixture)
    parameters = [mixture.hmm.initial, mixture.hmm.transition, mixture.hmm.emission]
    description = {
        "preset": run.config.preset.mixture,
        "spec": dataclasses.asdict(run.config.preset.mixture_spec),
        "seed": run.config.preset.mixture_seed,
        "dtype": str(mixture.hmm.dtype),
        "bytes": sum(tensor.numel() * tensor.element_size() for tensor in parameters),
        "fingerprint": fingerprint,
    }
    write_json(run.folder("mixture") / MIXTURE_FILE, description)
    return {"tasks": mixture.num_tasks, "bytes": description["bytes"]}


def steady_tokens_per_s(records: list[dict], after_step: int) -> float | None:
    """Median tokens/s of the log windows that end after ``after_step`` (the windows of this
    attempt but its first, which holds compilation and warm-up), None if there are none."""
    rates = [record["tokens_per_s"] for record in records if record["step"] > after_step]
    return statistics.median(rates) if rates else None


def checkpoint_step(run: Reproduction) -> int | None:
    """The step of the training checkpoint in the run folder, None if there is none."""
    saved = read_json(run.checkpoint / CONFIG_FILE)
    return saved["step"] if saved else None


def train_stage(run: Reproduction) -> dict:
    """Train (or resume) the preset's RoFormer, stopping at the end of a step once a signal asks
    (``interrupted``); measure this attempt's steps, tokens and FLOPs."""
    preset = run.config.preset
    folder = run.folder("train")
    start = checkpoint_step(run) or 0
    stream = training_stream(run.mixture, preset)
    model_config = preset.model_config(preset.mixture_spec.num_tokens)
    result = train(model_config, preset.train, stream, folder, task=preset.task(), command=run.command,
                   stop_requested=run.stop, device=run.config.device)
    # a context curriculum's first steps train on shorter prompts: tokens and FLOPs per length
    lengths = step_lengths(preset, start, result.step)
    tokens = sum(preset.train.batch_size * length * steps for length, steps in lengths.items())
    flops = sum(preset.train.batch_size * length * steps * training_flops_per_token(model_config, length)
                for length, steps in lengths.items())
    flops_per_token = training_flops_per_token(model_config, preset.prompt_format.length)
    windows = [record for record in metrics_records(folder / METRICS_FILE) if record["step"] > start]
    steady = steady_tokens_per_s(windows, start + preset.train.log_every)
    return {
        "interrupted": result.interrupted,
        "steps": result.step - start,
        "tokens": tokens,
        "flops": {str(run.config.train_dtype).removeprefix("torch."): float(flops)},
        "last_loss": result.last_loss,
        "steady_tokens_per_s": steady,
        "steady_mfu": steady * flops_per_token / run.rates.train if steady else None,
        "first_window_s": windows[0]["elapsed_s"] if windows else None,
    }


def _timed_predictor(predictor: Predictor, device: torch.device, seconds: dict[str, float], name: str) -> Predictor:
    """``predictor``, its wall time (device synchronised) added to ``seconds[name]``."""

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        result, spent = timed(lambda: predictor(tokens), 1, device)
        seconds[name] = seconds.get(name, 0.0) + spent
        return result

    return predict


def evaluate_stage(run: Reproduction) -> dict:
    """``evaluation.json`` (the checkpoint's step, where the Bayes-optimal predictor ran, then the
    :class:`~empirical.yardsticks.evaluate.Evaluation`), ``in_context.png`` and ``training_loss.png``
    of the checkpoint, the figures drawn from the JSON written."""
    preset, device = run.config.preset, run.config.device
    folder = run.folder("evaluate")
    saved = load_checkpoint(run.checkpoint, device)
    num_prompts = preset.eval_prompts
    prompts = held_out_prompts(run.mixture, preset.prompt_format, num_prompts, preset.data_seed)
    seconds: dict[str, float] = {}
    predictors = {name: _timed_predictor(predictor, device, seconds, name)
                  for name, predictor in in_context_predictors(saved.model, run.mixture, preset, num_prompts,
                                                               device).items()}
    evaluation = evaluate_predictors(predictors, prompts, run.mixture.num_tokens)
    written = {"checkpoint_step": saved.config["step"],
               "bayes": {"dtype": str(run.mixture.hmm.dtype), "device": str(device), "tasks": run.mixture.num_tasks},
               **to_json(evaluation)}
    write_json(folder / EVALUATION_FILE, written)
    plot_in_context(written, folder / "in_context.png")
    plot_training_loss(run.out / "train" / METRICS_FILE, written, folder / "training_loss.png")
    flops, filter_bytes = plan.evaluate_work(run.config)
    return {
        "tokens": num_prompts * preset.prompt_format.length,
        "flops": flops,
        "predictor_seconds": seconds,
        "bayes_flops_per_s": flops["float64"] / seconds["bayes"],
        "bayes_bytes_per_s": filter_bytes / seconds["bayes"],
        "excess_over_gap_test_sequence": evaluation.excess_test_sequence.excess["model"].excess_over_gap,
    }


def ngram_verdict_stage(run: Reproduction) -> dict:
    """``ngram-verdict.json`` (the checkpoint's step, then ``hmmtf ngram-verdict``'s report) and its
    figure for the checkpoint, at the config's ``verdict`` settings; the verdict, whether the
    network is competent, the FLOPs of the model's pass (:func:`plan.ngram_verdict_work`) and the
    prompts and fresh HMMs it ran."""
    config = run.config
    settings = config.verdict_settings
    folder = run.folder("ngram-verdict")
    saved = load_checkpoint(run.checkpoint, config.device)
    report = ngram_verdict_report(saved.model, config.preset, settings, config.device)
    written = {"checkpoint_step": saved.config["step"], **report}
    write_json(folder / NGRAM_VERDICT_FILE, written)
    plot_ngram_verdict(written, folder / NGRAM_VERDICT_FIGURE)
    print(f"stage ngram-verdict: {report['verdict']} (competent: {report['competent']})", file=sys.stderr, flush=True)
    return {"verdict": report["verdict"], "competent": report["competent"],
            "flops": {"float32": plan.ngram_verdict_work(config)},
            "ran": {"verdict_prompts": settings.prompts, "fresh_tasks": report["settings"]["fresh_tasks"]}}


def analyze_stage(run: Reproduction) -> dict:
    """``analysis.json`` and the six figures of ``empirical.analysis`` for the checkpoint; the
    prompts, probe tasks and hand-built runs it ran (the report's ``sizes`` and ``hand_built``)."""
    preset, analysis_config = run.config.preset, run.config.analysis
    folder = run.folder("analyze")
    saved = load_checkpoint(run.checkpoint, run.config.device)
    analysis = analyze(saved.model, preset, analysis_config, run.config.device, run.mixture)
    write_figures(analysis, preset.prompt_format, analysis_config.max_distance, folder)
    write_json(folder / ANALYSIS_FILE, {"analysis_config": dataclasses.asdict(analysis_config), **analysis.report})
    sizes, hand = analysis.report["sizes"], analysis.report["hand_built"]
    return {"ran": {**sizes, "hand_built_runs": plan.hand_built_runs(hand["probe_train_prompts"],
                                                                     hand["probe_test_prompts"])}}


def patching_stage(run: Reproduction) -> dict:
    """``patching.json`` and the two patching figures of the checkpoint
    (:func:`empirical.analysis.report.patching_report`); the FLOPs of its RoFormer passes
    (:func:`plan.patching_work` of the items state forcing found)."""
    config = run.config
    folder = run.folder("patching")
    saved = load_checkpoint(run.checkpoint, config.device)
    patching = patching_report(saved.model, config.preset, run.mixture, config.analysis, config.device)
    write_patching_figures(patching, folder)
    write_json(folder / PATCHING_FILE, {"analysis_config": dataclasses.asdict(config.analysis), "patching": patching})
    forcing, history = patching["state_forcing"], patching["history"]
    flops, attention_bytes = plan.patching_work(config, forcing["items_by_test_position"])
    return {"flops": {"float32": flops}, "attention_bytes": attention_bytes, "forcing_items_found": forcing["items_found"],
            "ran": {"forcing_items": forcing["items"], "history_prompts": history["trained"]["prompts"],
                    "hand_built_prompts": history["hand-built"]["prompts"],
                    "centroid_prompts": forcing["centroid_prompts"]}}


def bundle_stage(run: Reproduction) -> dict:
    """The archive of every JSON and figure written so far (``record.json`` as of this stage)."""
    return write_bundle(run.out, run.folder("bundle") / f"{run.config.preset.name}-results.tar.gz")


@dataclass(frozen=True)
class Stage:
    """A stage: its name (also its folder), what it does, its cost for the plan, and the presets
    that run it (None: every preset)."""

    name: str
    run: Callable[[Reproduction], dict]
    cost: Callable[[ReproduceConfig, plan.Rates, plan.HostTimings], plan.StageCost]
    presets: tuple[str, ...] | None = None


STAGES: tuple[Stage, ...] = (
    Stage("mixture", mixture_stage, plan.mixture_cost),
    Stage("train", train_stage, plan.train_cost),
    Stage("evaluate", evaluate_stage, plan.evaluate_cost),
    Stage("ngram-verdict", ngram_verdict_stage, plan.ngram_verdict_cost, presets=tuple(VERDICT_SETTINGS)),
    Stage("analyze", analyze_stage, plan.analysis_cost),
    Stage("patching", patching_stage, plan.patching_cost),
    Stage("bundle", bundle_stage, plan.bundle_cost),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)
"""Every stage's name, whichever presets run it (``--stop-after``'s choices)."""


def preset_stages(preset: str) -> tuple[Stage, ...]:
    """The stages of :data:`STAGES` that ``preset`` runs, in order."""
    return tuple(stage for stage in STAGES if stage.presets is None or preset in stage.presets)


def plan_costs(config: ReproduceConfig, rates: plan.Rates, host: plan.HostTimings) -> list[plan.StageCost]:
    """The planned cost of every stage the config's preset runs."""
    return [stage.cost(config, rates, host) for stage in preset_stages(config.preset.name)]


def done_stages(record: dict | None) -> set[str]:
    """Names of the stages the record marks done."""
    return {name for name, entry in (record or {}).get("stages", {}).items() if entry["status"] == "done"}


def _peak_memory(device: torch.device) -> dict:
    """Peak device memory of the stage (CUDA: allocated by torch since the stage began) or of
    the process so far (CPU: maximum resident set)."""
    if device.type == "cuda":
        return {"peak_device_memory_bytes": torch.cuda.max_memory_allocated(device)}
    return {"peak_process_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _utilisation(flops: dict[str, float], seconds: float, rates: plan.Rates, train_dtype: str) -> dict[str, float]:
    """Achieved FLOP/s of each dtype's matrix work over its matmul peak measured in this invocation."""
    peaks = {"float32": rates.float32, "float64": rates.float64, train_dtype: rates.train}
    return {dtype: value / seconds / peaks[dtype] for dtype, value in flops.items()}


def _new_record(config: ReproduceConfig) -> dict:
    return {"settings": config.settings(), "invocations": [], "stages": {}}


def check_settings(record: dict, config: ReproduceConfig, out: Path) -> None:
    """``ValueError`` naming the settings that differ when ``out`` holds another run."""
    differ = sorted(key for key, value in config.settings().items() if record["settings"].get(key) != value)
    if differ:
        raise ValueError(
            f"--out: {str(out)!r} holds a run with other settings ({', '.join(differ)} differ); expected the same "
            f"preset, options and device type to resume it, or another --out")


class Progress:
    """Writes ``progress.json`` (see :mod:`empirical.reproduce.record`)."""

    def __init__(self, out: Path, command: str, costs: list[plan.StageCost], done: set[str]) -> None:
        self.path = out / PROGRESS_FILE
        self.state = {
            "pid": os.getpid(), "host": socket.gethostname(), "command": command, "started": time.time(),
            "stage": None, "stage_started": None,
            "stages": {cost.stage: "done" if cost.stage in done else "pending" for cost in costs},
            "planned_s": {cost.stage: cost.expected_s for cost in costs},
            "finished": False, "stopped_after": None, "interrupted": None, "error": None,
        }

    def update(self, **changes) -> None:
        self.state.update(changes, updated=time.time())
        write_json(self.path, self.state)

    def stage(self, name: str, status: str) -> None:
        self.state["stages"][name] = status
        self.update(**({"stage": name, "stage_started": time.time()} if status == "running" else {}))


def resume_line(run: Reproduction, done: set[str]) -> str:
    """``hmmtf reproduce: resuming OUT: STAGES done; from stage NAME`` (training: from its
    checkpoint's step), the line a run that resumes a folder prints before its first stage."""
    names = [stage.name for stage in preset_stages(run.config.preset.name)]
    to_run = [name for name in names if name not in done]
    done_text = ", ".join(name for name in names if name in done) or "no stage"
    if not to_run:
        return f"hmmtf reproduce: resuming {run.out}: {done_text} done; nothing left to run"
    line = f"hmmtf reproduce: resuming {run.out}: {done_text} done; from stage {to_run[0]}"
    step = checkpoint_step(run)
    if to_run[0] == "train" and step is not None:
        line += f" at step {step} of {run.config.preset.train.steps} ({run.checkpoint})"
    return line


def run_stages(config: ReproduceConfig, out: Path, command: str, rates: plan.Rates, host: plan.HostTimings,
               budget: plan.Budget, stop_after: str | None = None,
               stop: StopRequest | None = None) -> tuple[dict, str | None]:
    """Run every stage not yet done in ``out`` (all of them, or through ``stop_after``), after
    checking the plan of those stages, and only those, against ``budget``, until ``stop`` (the
    request of SIGINT or SIGTERM) asks to stop at a safe point (module docstring). Returns the record and,
    when stopped by ``stop``, where (``at step 20 of 64 of stage train; ...``, ``after stage
    analyze``), else None. A folder that holds an earlier invocation prints :func:`resume_line`."""
    stop = stop or StopRequest()
    record = read_json(out / RECORD_FILE) or _new_record(config)
    check_settings(record, config, out)
    done = done_stages(record)
    costs = plan_costs(config, rates, host)
    to_run = plan.stages_to_run(costs, done, stop_after)
    plan.check_budget(to_run, budget)
    out.mkdir(parents=True, exist_ok=True)
    run = Reproduction(config, out, command, rates, stop)
    if record["invocations"]:
        print(resume_line(run, done), file=sys.stderr, flush=True)
    record["invocations"].append({
        "command": command, "started": time.time(), "environment": environment(config.device), "git": git_state(),
        "rates": rates._asdict(), "host": host._asdict(), "plan": [cost._asdict() for cost in costs],
        "budget": dataclasses.asdict(budget), "to_run": [cost.stage for cost in to_run],
        "calls": [[cost.stage for cost in call] for call in plan.split_into_calls(to_run, budget.call_minutes)],
    })
    invocation = len(record["invocations"]) - 1
    write_json(out / RECORD_FILE, record)
    progress = Progress(out, command, costs, done)
    progress.update()
    last_done = None
    for stage, cost in zip(preset_stages(config.preset.name), costs):
        if stage.name not in done:
            if stop():
                where = f"after stage {last_done}" if last_done else f"before stage {stage.name}"
                return record, _interrupted(progress, stop, where)
            if _run_stage(stage, cost, run, record, invocation, progress) == "interrupted":
                where = (f"at step {checkpoint_step(run)} of {config.preset.train.steps} of stage {stage.name}; "
                         f"checkpoint written to {run.checkpoint}")
                return record, _interrupted(progress, stop, where)
            last_done = stage.name
        if stage.name == stop_after:
            progress.update(stopped_after=stage.name)
            break
    else:
        progress.update(finished=True)
    return record, None


def _interrupted(progress: Progress, stop: StopRequest, where: str) -> str:
    """Record in ``progress.json`` that ``stop``'s signal stopped the run ``where``; returns ``where``."""
    progress.update(interrupted={"signal": stop.signal.name, "where": where})
    return where


def _run_stage(stage: Stage, cost: plan.StageCost, run: Reproduction, record: dict, invocation: int,
               progress: Progress) -> str:
    """Run one stage; record its attempt: the measurements, or the error that stopped it. Returns
    its status: ``done``, or ``interrupted`` when a signal stopped it before its end (training)."""
    device, path = run.config.device, run.out / RECORD_FILE
    progress.stage(stage.name, "running")
    print(f"stage {stage.name}: started, planned {cost.expected_s:.1f} s", file=sys.stderr, flush=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    entry = record["stages"].setdefault(stage.name, {"status": "running", "attempts": []})
    started = time.perf_counter()
    try:
        measured = stage.run(run)
    except BaseException as error:
        entry["status"] = "failed"
        entry["attempts"].append({"invocation": invocation, "error": repr(error),
                                  "wall_s": time.perf_counter() - started})
        write_json(path, record)
        progress.stage(stage.name, "failed")
        progress.update(error=repr(error))
        raise
    synchronize(device)
    seconds = time.perf_counter() - started
    status = "interrupted" if measured.pop("interrupted", False) else "done"
    ran = measured.pop("ran", {})
    attempt = {"invocation": invocation, "wall_s": seconds, "planned_s": cost.expected_s, **measured,
               **_peak_memory(device)}
    if cost.caps:
        attempt["counts"] = {name: {"cap": cap, "ran": ran[name]} for name, cap in cost.caps.items()}
    if status == "interrupted":
        attempt["interrupted_by"] = run.stop.signal.name
    if "tokens" in measured:
        attempt["tokens_per_s"] = measured["tokens"] / seconds
    if "flops" in measured:
        train_dtype = str(run.config.train_dtype).removeprefix("torch.")
        attempt["utilisation"] = _utilisation(measured["flops"], seconds, run.rates, train_dtype)
    entry["status"] = status
    entry["attempts"].append(attempt)
    write_json(path, record)
    progress.stage(stage.name, status)
    print(f"stage {stage.name}: {status} in {seconds:.1f} s", file=sys.stderr, flush=True)
    return status
