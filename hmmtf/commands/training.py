"""The subcommands of training and the yardsticks:

``hmmtf train --preset PRESET [--config FILE] [--FIELD VALUE ...]`` trains a RoFormer (also under
``torchrun --nproc_per_node=G -m hmmtf train ...``; the overrides: :mod:`empirical.training.overrides`),
``hmmtf evaluate CHECKPOINT`` writes the in-context metrics (JSON) and figures, and ``hmmtf
calibrate --preset PRESET`` the Bayes-optimal in-context signal of the preset's mixture vs its
Dirichlet concentration.
"""
from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import torch

import hmm
from bounds.serialize import to_json
from empirical.reports.evaluation import CompetenceReport, EvaluationReport, Provenance, SideBySideReport
from empirical.yardsticks.calibrate import DEFAULT_CONCENTRATIONS, calibrate
from empirical.yardsticks.competence import (CEILING_REPLICATES, CEILING_SETTINGS, COLLAPSED_CEILING_REPLICATES,
                                             COLLAPSED_CEILING_SETTINGS, competence_section)
from empirical.training.prefetch import PrefetchedBatches
from empirical.yardsticks.evaluate import Predictor, evaluate_predictors, in_context_predictors
from empirical.yardsticks.hand_built import HAND_BUILT_BATCH, SMOOTHING, served_rows, side_by_side_predictors
from empirical.reports.plots import (plot_calibration, plot_competence, plot_in_context, plot_regime, plot_side_by_side,
                             plot_training_loss)
from empirical.training.overrides import training_run
from hmmtf.override_options import add_override_options, flag_overrides
from empirical.training.presets import PRESETS
from empirical.yardsticks.regime import oracle_predictor, regime_section
from empirical.training.runs import CHECKPOINT_EXPECTED, LoadedRun, check_run_folder, checkpoint_folder, load_run
from empirical.training.run_control import interrupted_line, run_folder_lock, stop_on_signals
from empirical.training.streams import training_stream
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE, distributed_context, init_distributed, shutdown_distributed, train
from hmm.collapsed_smc import CollapsedSMCSettings
from hmm.prior_predictive import SMCSettings
from empirical.training.result_files import (COMMAND_FILES, COMPETENCE_FIGURE, COMPETENCE_FILE, EVALUATION_FILE,
                                             IN_CONTEXT_FIGURE, REGIME_FIGURE, SIDE_BY_SIDE_FIGURE, SIDE_BY_SIDE_FILE,
                                             TRAIN_SUMMARY_FILE, TRAINING_LOSS_FIGURE, calibration_files)
from hmmtf.options import (add_overwrite_option, check_output_folder, check_results_owner, check_study_owner,
                           default_results_folder, device, non_negative_int, output_folder, positive_float,
                           positive_int, result_text)

COMPETENCE_OPTION_DEFAULTS = {"ceiling_particles": CEILING_SETTINGS.particles, "ceiling_moves": CEILING_SETTINGS.moves,
                              "ceiling_seed": CEILING_SETTINGS.seed, "competence_prompts": None,
                              "ceiling_backend": "numpy", "ceiling_replicates": None, "ceiling_burn_in_steps": None}
"""``hmmtf evaluate``'s options of the competence result (by ``dest``) and their defaults: the
result is computed on the regime section's fresh HMMs, so they mean nothing with ``--fresh-tasks 0``."""


def run_train(args) -> int:
    """``hmmtf train``: the resolved run (:mod:`empirical.training.overrides`) trained in its run folder,
    stopped by SIGINT or SIGTERM at a step boundary with a checkpoint (exit code 128 + the signal)."""
    run = training_run(args.preset, args.config, flag_overrides(args))
    preset = run.preset
    run_dir = check_run_folder(check_output_folder(args.run_dir if args.run_dir else run.default_run_dir(), "--run-dir"))
    if args.threads:
        torch.set_num_threads(args.threads)
    default_device = init_distributed()
    device = torch.device(args.device) if args.device else default_device
    mixture = preset.build_mixture()
    stream = training_stream(mixture, preset)
    checkpoint = run_dir / CHECKPOINT_DIR
    resumed_at: list[int] = []

    def on_resume(step: int) -> None:
        resumed_at.append(step)
        print(f"hmmtf train: {str(run_dir)!r} holds the finished run (step {step} of {preset.train.steps}); nothing left "
              f"to run" if step == preset.train.steps else f"resumed from step {step} of {preset.train.steps} "
              f"({checkpoint})", file=sys.stderr)

    started = time.perf_counter()
    with stop_on_signals() as stop, ExitStack() as stack:
        batches = stack.enter_context(PrefetchedBatches(stream, args.prefetch)) if args.prefetch else stream
        result = train(
            run.model,
            preset.train,
            batches,
            run_dir,
            task=preset.task(),
            command=args.command_line,
            stop_requested=stop,
            on_resume=on_resume,
            device=device,
            progress=not args.no_progress,
        )
    context = distributed_context()
    if result.interrupted:
        if context.rank == 0:
            signal_name = stop.signal.name if stop() else "a signal to another rank"
            print(interrupted_line("hmmtf train", signal_name, f"at step {result.step} of {preset.train.steps}; "
                                   f"checkpoint written to {checkpoint}"), file=sys.stderr)
        shutdown_distributed()
        return stop.exit_code
    if resumed_at == [preset.train.steps]:  # no step ran: its summary is the one the run wrote when it ended
        shutdown_distributed()
        return 0
    if context.rank == 0:
        summary = {
            "command": args.command_line,
            "preset": preset.name,
            "changed_from_preset": dict(run.changes),
            "run_dir": str(run_dir),
            "steps": result.step,
            "wall_time_s": time.perf_counter() - started,
            "last_logged_loss": result.last_loss,
            "world_size": context.world_size,
            "device": str(device),
            "torch": torch.__version__,
            "num_threads": torch.get_num_threads(),
            "parameters": result.model.num_parameters(),
        }
        (run_dir / TRAIN_SUMMARY_FILE).write_text(result_text(summary))
        print(json.dumps(summary, indent=2, allow_nan=False))
    shutdown_distributed()
    return 0


def run_evaluate(args) -> int:
    """``hmmtf evaluate CHECKPOINT``: the checkpoint (or run) folder, resolved as :func:`empirical.training.runs.load_run`
    resolves it, evaluated into ``--out`` (default ``runs/evaluate/INPUT``, one folder per input:
    :func:`hmmtf.options.default_results_folder`), which is checked for writing first, refused when
    it holds another input's results (unless ``--overwrite``) and locked while it is written."""
    torch.set_num_threads(args.threads)
    ceiling_settings(args)  # an option of the other backend is refused before anything is read or written
    checkpoint_dir = checkpoint_folder(args.checkpoint, "checkpoint")
    out = check_output_folder(args.out if args.out else default_results_folder("evaluate", checkpoint_dir))
    check_results_owner(out, checkpoint_dir, COMMAND_FILES["evaluate"], args.overwrite, args.command_line)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    run = load_run(checkpoint_dir, args.num_prompts, device)  # a checkpoint it refuses leaves --out as it was
    with run_folder_lock(out, "--out"):
        return evaluate_into(args, run, device, out)


def evaluate_into(args, run: LoadedRun, device: torch.device, out: Path) -> int:
    """:func:`run_evaluate`'s evaluation of the loaded ``run`` into ``out``; an optional input that
    is missing (the run's training log) is said on stderr, with what it leaves out. The figures are
    drawn from the JSON written."""
    checkpoint_dir = run.checkpoint
    run_dir = checkpoint_dir.parent
    metrics = run_dir / METRICS_FILE
    log_problem = training_log_problem(metrics)
    if log_problem:
        print(f"hmmtf evaluate: {TRAINING_LOSS_FIGURE} not drawn and {METRICS_FILE} not copied: {log_problem}",
              file=sys.stderr)
    preset, mixture, prompts = run.preset, run.mixture, run.prompts
    num_prompts = prompts.tokens.shape[0]
    predictors = in_context_predictors(run.model, mixture, preset, num_prompts, device)
    started = time.perf_counter()
    evaluation = evaluate_predictors({**predictors, "oracle": oracle_predictor(mixture, prompts)}, prompts,
                                     mixture.num_tokens, pairs=(("model", "oracle"),))
    regime = (regime_section(predictors, mixture, preset, evaluation, num_prompts, args.fresh_tasks,
                             args.reference_tasks, device) if args.fresh_tasks else None)
    out.mkdir(parents=True, exist_ok=True)
    remove_earlier_sections(args, out)
    train_summary = run_dir / TRAIN_SUMMARY_FILE
    report = EvaluationReport(
        provenance=Provenance(args.command_line, args.git_commit, str(checkpoint_dir), run.config["step"]),
        task=run.config["task"],
        model=run.config["model"],
        train=run.config["train"],
        train_summary=json.loads(train_summary.read_text()) if train_summary.is_file() else None,
        evaluation_time_s=time.perf_counter() - started,
        evaluation=evaluation,
        regime=regime,
    )
    written = to_json(report)
    (out / EVALUATION_FILE).write_text(result_text(written))
    plot_in_context(written, out / IN_CONTEXT_FIGURE)
    if regime is not None:
        plot_regime(written, out / REGIME_FIGURE)
    if not log_problem:
        (out / METRICS_FILE).write_text(metrics.read_text())
        plot_training_loss(metrics, written, out / TRAINING_LOSS_FIGURE)
    verdicts = {scope: {"fraction_of_gap": result.fraction_of_gap, "verdict": result.verdict}
                for scope, result in regime.memorisation.items()} if regime is not None else {}
    curve = evaluation.by_demonstrations
    summary = {"out": str(out), "test_sequence": to_json(evaluation.excess_test_sequence), "regime": verdicts,
               "accuracy_by_demonstrations": {name: [round(a, 4) for a in curve.predictors[name].accuracy]
                                              for name in predictors}}
    if args.hand_built_prompts:
        summary["hand_built"] = write_side_by_side(args, predictors, mixture, prompts, report.provenance, out)
    if args.fresh_tasks and args.ceiling_particles:
        summary["competence"] = write_competence(args, predictors, preset, args.competence_prompts or num_prompts,
                                                 report, out)
    print(json.dumps(summary, indent=2, allow_nan=False))
    return 0


def remove_earlier_sections(args, out: Path) -> None:
    """Remove from ``out`` the files of the sections this evaluation does not make (the regime
    section without ``--fresh-tasks``, the competence result without ceiling particles too, the
    hand-built side by side without ``--hand-built-prompts``): an earlier evaluation's, of this
    input (:func:`hmmtf.options.check_results_owner` passed, or ``--overwrite`` was given), so that
    the folder holds one evaluation, not parts of two; said in one line. The training log's copy
    and figure are the run's, not a section's, and stay."""
    sections = [(args.fresh_tasks, (REGIME_FIGURE,)),
                (args.fresh_tasks and args.ceiling_particles, (COMPETENCE_FILE, COMPETENCE_FIGURE)),
                (args.hand_built_prompts, (SIDE_BY_SIDE_FILE, SIDE_BY_SIDE_FIGURE))]
    earlier = [name for made, names in sections if not made for name in names if (out / name).is_file()]
    for name in earlier:
        (out / name).unlink()
    if earlier:
        print(f"hmmtf evaluate: removed {', '.join(earlier)} from {str(out)!r}: an earlier evaluation's, which this "
              f"one does not make", file=sys.stderr)


def training_log_problem(metrics: Path) -> str | None:
    """Why the training log ``metrics`` (``RUN_DIR/metrics.jsonl``) cannot be drawn, in a phrase
    naming it: missing, unreadable, or a line that is not a JSON record with ``step`` and ``loss``
    (a line cut short by a killed training); None when it can."""
    expected = "expected the training log of hmmtf train, beside its checkpoint/, one JSON record a line"
    if not metrics.is_file():
        return f"{str(metrics)!r} does not exist ({expected})"
    try:
        lines = metrics.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        return f"{str(metrics)!r} cannot be read ({error}; {expected})"
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not {"step", "loss"} <= set(record):
            return (f"{str(metrics)!r} line {number} is not a JSON record with step and loss ({expected}; a line cut "
                    f"short by a killed training can be removed)")
    return None


def ceiling_settings(args) -> tuple[SMCSettings | CollapsedSMCSettings, int] | None:
    """The competence result's ceiling from the ``--ceiling-*`` options: the SMC settings of a
    replicate and the replicate count, of the numpy SMC or of the collapsed backend's upper bound
    (:data:`empirical.yardsticks.competence.BACKEND_SOURCES`); None for ``--ceiling-particles 0`` (no
    competence result). An option of the other backend is refused, and so is any of them with
    ``--fresh-tasks 0``, which leaves out the competence result's fresh HMMs (but ``--ceiling-particles
    0``, which says the same)."""
    given = [dest for dest, default in COMPETENCE_OPTION_DEFAULTS.items()
             if getattr(args, dest) != default and (dest, getattr(args, dest)) != ("ceiling_particles", 0)]
    if not args.fresh_tasks and given:
        option = "--" + given[0].replace("_", "-")
        raise ValueError(f"{option}: {getattr(args, given[0])} with --fresh-tasks 0, which leaves out the regime "
                         f"section and the competence result computed on its fresh HMMs; expected --fresh-tasks >= 1, "
                         f"or no competence option")
    if args.ceiling_backend == "collapsed" and args.ceiling_moves != CEILING_SETTINGS.moves:
        raise ValueError(f"--ceiling-moves: {args.ceiling_moves}; the collapsed backend makes no Gibbs moves "
                         f"(leave it out, or pass --ceiling-backend numpy)")
    if args.ceiling_backend == "numpy" and args.ceiling_burn_in_steps is not None:
        raise ValueError(f"--ceiling-burn-in-steps: {args.ceiling_burn_in_steps}; it sets the collapsed backend's "
                         f"burn-in (pass --ceiling-backend collapsed, or leave it out)")
    if not args.ceiling_particles:
        return None
    if args.ceiling_backend == "collapsed":
        burn_in = args.ceiling_burn_in_steps or COLLAPSED_CEILING_SETTINGS.burn_in_steps
        return (CollapsedSMCSettings(particles=args.ceiling_particles, burn_in_steps=burn_in, seed=args.ceiling_seed),
                args.ceiling_replicates or COLLAPSED_CEILING_REPLICATES)
    return (SMCSettings(particles=args.ceiling_particles, moves=args.ceiling_moves, seed=args.ceiling_seed),
            args.ceiling_replicates or CEILING_REPLICATES)


def write_competence(args, predictors: dict[str, Predictor], preset, num_prompts: int, report: EvaluationReport,
                     out: Path) -> dict:
    """The competence result (:func:`empirical.yardsticks.competence.competence_section`) on the regime
    section's fresh-HMM prompts: ``competence.json`` (with the provenance, task and model of
    ``report``) and ``competence.png``; returns its summary for the command's output."""
    settings, replicates = ceiling_settings(args)
    started = time.perf_counter()
    competence = competence_section(predictors["model"], predictors["unigram"], preset, num_prompts, args.fresh_tasks,
                                    settings, replicates, args.ceiling_backend)
    written = to_json(CompetenceReport(provenance=report.provenance, task=report.task, model=report.model,
                                       evaluation_time_s=time.perf_counter() - started, competence=competence))
    (out / COMPETENCE_FILE).write_text(result_text(written))
    plot_competence(written, out / COMPETENCE_FIGURE)
    return {"out": str(out / COMPETENCE_FILE), "verdict": competence.verdict, "gap_closed": competence.gap_closed,
            "loss": {name: round(metrics.loss, 4) for name, metrics in competence.ladder.all_positions.items()}}


def write_side_by_side(args, predictors: dict[str, Predictor], mixture: hmm.Mixture, prompts: hmm.Prompts,
                       provenance: Provenance, out: Path) -> dict:
    """The hand-built network, P_L and least squares beside ``predictors`` (model, Bayes, unigram)
    on the first ``--hand-built-prompts`` prompts (all of them if there are fewer), for every
    ``--hand-built-L`` and ``--hand-built-T``, on the rows every one of them serves:
    ``hand_built.json`` and ``hand_built_in_context.png``; returns its summary for the command's output."""
    count = min(args.hand_built_prompts, len(prompts.tokens))
    subset = hmm.Prompts(prompts.tokens[:count], prompts.task_ids[:count], prompts.states[:count], prompts.format)
    history_lengths, gd_steps = sorted(args.hand_built_L), sorted(args.hand_built_T)
    started = time.perf_counter()
    evaluation = evaluate_predictors(
        {**predictors, **side_by_side_predictors(mixture, subset, history_lengths, gd_steps, HAND_BUILT_BATCH)},
        subset, mixture.num_tokens, rows=served_rows(prompts.format, max(history_lengths)))
    written = to_json(SideBySideReport(
        provenance=provenance,
        history_lengths=history_lengths,
        gd_steps=gd_steps,
        rows=f"row t predicts token t+1; t in segments 1..n at offset >= {max(history_lengths) - 1} (an L-history "
             f"inside the segment, at least one demonstration before it), for every predictor",
        distribution_rule=f"q = (1 - eps) max(v, 0) / sum max(v, 0) + eps / p, eps = {SMOOTHING} (uniform where "
                          f"no entry of v is positive), for the raw outputs v of least squares and hand-built",
        evaluation_time_s=time.perf_counter() - started,
        evaluation=evaluation,
    ))
    (out / SIDE_BY_SIDE_FILE).write_text(result_text(written))
    plot_side_by_side(written, history_lengths, gd_steps, out / SIDE_BY_SIDE_FIGURE)
    curve = evaluation.by_demonstrations
    return {"out": str(out / SIDE_BY_SIDE_FILE), "num_demonstrations": curve.num_demonstrations,
            "accuracy": {name: [round(a, 3) for a in metrics.accuracy] for name, metrics in curve.predictors.items()}}


def run_calibrate(args) -> int:
    out, (report_file, figure_file) = Path(args.out), calibration_files(args.preset).names
    check_study_owner(out, args.command_line, calibration_files(args.preset), args.overwrite)
    with run_folder_lock(out, "--out"):
        start = time.perf_counter()
        report = calibrate(args.preset, args.concentrations, args.num_prompts, args.seed)
        report["command"] = args.command_line
        report["git_commit"] = args.git_commit
        report["seconds"] = time.perf_counter() - start
        (out / report_file).write_text(json.dumps(report, indent=2, allow_nan=False))
        plot_calibration(report, out / figure_file)
    print(f"{'concentration':>13} | Bayes accuracy after 0 .. n demonstrations")
    for entry in report["results"]:
        print(f"{entry['concentration']:>13g} | " + " ".join(f"{value:.3f}" for value in entry["bayes_accuracy"]))
    print(f"wrote {out / report_file} and {figure_file} in {report['seconds']:.1f} s")
    return 0


def register(subparsers) -> None:
    """Add ``train``, ``evaluate`` and ``calibrate`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "train", help="train a RoFormer on a mixture of HMMs (also under torchrun)",
        description="Train a RoFormer: a preset's values, overridden by --config's, overridden by the flags "
                    "below (docs/empirical.md, 'Commands'). SIGINT or SIGTERM stops at the next step with a "
                    "checkpoint (exit code 130 or 143); the same command resumes it.")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="the named defaults (or `preset` in --config)")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML or JSON file of [data], [model] and [train] values (and a `preset`), between the "
                             "preset's and the flags'")
    parser.add_argument("--run-dir", help="checkpoint and metrics folder, resumed if it holds a checkpoint (default: "
                                          "runs/PRESET, or runs/PRESET-field=value-... for each value that differs "
                                          "from the preset's)")
    parser.add_argument("--device", type=device, help="default: this rank's CUDA device, else CPU")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (1 is fastest on a shared machine)")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    parser.add_argument("--prefetch", type=non_negative_int, default=0, metavar="DEPTH",
                        help="draw the batches up to DEPTH steps ahead in a worker process, off the training loop's "
                             "critical path (the same batches; empirical/training/prefetch.py); 0: in the loop "
                             "(default)")
    add_override_options(parser)
    parser.set_defaults(run=run_train)

    parser = subparsers.add_parser("evaluate", help="in-context accuracy/loss of a checkpoint vs Bayes-optimal")
    parser.add_argument("checkpoint", help=CHECKPOINT_EXPECTED)
    parser.add_argument("--out", type=output_folder,
                        help="folder for evaluation.json and figures (default runs/evaluate/INPUT: one per input)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the results of another input that --out holds (refused otherwise)")
    parser.add_argument("--num-prompts", type=positive_int, help="held-out prompts (default: the preset's)")
    parser.add_argument("--device", type=device, help="default: CUDA if available, else CPU")
    parser.add_argument("--hand-built-prompts", type=non_negative_int, default=256,
                        help="held-out prompts (the first ones; all of them if there are fewer) for the hand-built "
                             "network, P_L and least squares beside the model; 0 skips them")
    parser.add_argument("--hand-built-L", type=positive_int, nargs="+", default=[1, 2, 3], help="history lengths L")
    parser.add_argument("--hand-built-T", type=positive_int, nargs="+", default=[2, 32],
                        help="gradient-descent layers T")
    parser.add_argument("--fresh-tasks", type=non_negative_int, default=1024,
                        help="HMMs never seen in training for the regime diagnostic (0: no regime section)")
    parser.add_argument("--reference-tasks", type=positive_int, default=16384,
                        help="HMMs of the reference mixture bounding the fresh-HMM ceiling")
    parser.add_argument("--ceiling-particles", type=non_negative_int, default=COMPETENCE_OPTION_DEFAULTS["ceiling_particles"],
                        help="SMC particles per replicate of the prior-predictive ceiling on the fresh HMMs' prompts "
                             "(competence.json); 0 skips the competence result")
    parser.add_argument("--ceiling-moves", type=positive_int, default=COMPETENCE_OPTION_DEFAULTS["ceiling_moves"],
                        help="Gibbs sweeps per SMC rejuvenation of the ceiling")
    parser.add_argument("--ceiling-seed", type=non_negative_int, default=COMPETENCE_OPTION_DEFAULTS["ceiling_seed"],
                        help="seed of the ceiling's SMC")
    parser.add_argument("--competence-prompts", type=positive_int, default=COMPETENCE_OPTION_DEFAULTS["competence_prompts"],
                        help="fresh-HMM prompts of the competence result (default: as many as --num-prompts; more "
                             "where the evaluation's Bayes predictor is what limits --num-prompts, at 128 states)")
    parser.add_argument("--ceiling-backend", choices=("numpy", "collapsed"), default=COMPETENCE_OPTION_DEFAULTS["ceiling_backend"],
                        help="the ceiling's SMC: numpy (an estimate, converged at 16 states) or collapsed (the "
                             "collapsed-path SMC, whose average over replicates is an upper bound on the ceiling's "
                             "loss: for 128 states, where no SMC converges; the committed bounds use "
                             f"--ceiling-particles {COLLAPSED_CEILING_SETTINGS.particles})")
    parser.add_argument("--ceiling-replicates", type=positive_int, default=COMPETENCE_OPTION_DEFAULTS["ceiling_replicates"],
                        help=f"independent SMC runs averaged into the ceiling (default: {CEILING_REPLICATES} for "
                             f"numpy, {COLLAPSED_CEILING_REPLICATES} for collapsed)")
    parser.add_argument("--ceiling-burn-in-steps", type=positive_int, default=COMPETENCE_OPTION_DEFAULTS["ceiling_burn_in_steps"],
                        help="hidden burn-in steps before each demonstration, the collapsed backend's stationary "
                             f"start (default: {COLLAPSED_CEILING_SETTINGS.burn_in_steps})")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch CPU threads (1 is fastest on a shared machine)")
    parser.set_defaults(run=run_evaluate)

    parser = subparsers.add_parser("calibrate", help="Bayes-optimal in-context signal of a mixture preset vs Dirichlet concentration")
    parser.add_argument("--preset", default="cpu-small", choices=sorted(PRESETS))
    parser.add_argument("--concentrations", type=positive_float, nargs="+", default=list(DEFAULT_CONCENTRATIONS),
                        help="Dirichlet concentrations of the transition and emission rows (default: %(default)s)")
    parser.add_argument("--num-prompts", type=positive_int, default=512, help="prompts (default: %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="seed of the mixtures and prompts (default: %(default)s)")
    parser.add_argument("--out", type=output_folder, default="runs/calibration",
                        help="folder of PRESET.json and PRESET.png (default: %(default)s; the committed result is "
                             "written with --out figures/calibration)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_calibrate)
