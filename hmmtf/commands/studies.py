"""Subcommands of the studies that choose and train the regime networks:

``hmmtf signal`` measures the in-context signal of data families (:mod:`empirical.yardsticks.signal`),
``hmmtf family-calibration`` chooses the paper-scale family (:mod:`empirical.yardsticks.family_calibration`),
``hmmtf curve`` trains with a learning curve on fresh HMMs (:mod:`empirical.yardsticks.curves`) and
``hmmtf curves`` puts a study's runs in one JSON and figure. The computations live in those
modules; this one parses, writes and draws.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

import hmm
from empirical.yardsticks.competence import CEILING_SETTINGS
from empirical.yardsticks.curves import BASELINES_FILE, CURVE_FILE, baseline_means, run_summary, train_with_curve
from empirical.training.overrides import training_run
from hmmtf.override_options import add_override_options, flag_overrides
from empirical.yardsticks.family_calibration import GRID, calibration_report, grid_specs
from empirical.reports.plots import plot_curve, plot_curves, plot_family_calibration, plot_signal
from empirical.training.presets import PRESETS
from empirical.training.checkpoint import CONFIG_FILE, has_checkpoint
from empirical.training.result_files import COMMAND_FILES, CURVE_FIGURE
from empirical.training.runs import check_run_folder
from empirical.training.train import CHECKPOINT_DIR
from empirical.training.run_control import interrupted_line, run_folder_lock, stop_on_signals
from empirical.yardsticks.signal import CANDIDATES, signal_report
from hmm.prior_predictive import SMCSettings
from hmmtf.options import (add_overwrite_option, check_study_owner, non_negative_int, output_folder, positive_float,
                           positive_int, result_text)

CURVE_OWN_FILES = (CURVE_FILE, BASELINES_FILE, CURVE_FIGURE)
"""What ``hmmtf curve`` writes into its run folder beside the training's files."""
SIGNAL_FILES, FAMILY_CALIBRATION_FILES, STUDY_FILES = (COMMAND_FILES[name] for name in ("signal", "family-calibration",
                                                                                         "curves"))


CURVE_RUN_FILES = (f"{CHECKPOINT_DIR}/{CONFIG_FILE}", BASELINES_FILE)
"""What a study reads from a run folder of ``hmmtf curve``: its checkpoint's config and its probe's baselines."""


def check_curve_run(path: str | Path, name: str) -> Path:
    """``path`` as a ``Path`` if it is a run folder of ``hmmtf curve`` (it holds
    :data:`CURVE_RUN_FILES`); ``FileNotFoundError`` or ``ValueError`` naming the option ``name``,
    the folder and what it lacks otherwise."""
    path = Path(path)
    expected = f"expected a run folder of hmmtf curve, holding {' and '.join(CURVE_RUN_FILES)}"
    if not path.is_dir():
        raise FileNotFoundError(f"{name}: {str(path)!r} does not exist or is not a folder; {expected}")
    missing = [file for file in CURVE_RUN_FILES if not (path / file).is_file()]
    if missing:
        raise ValueError(f"{name}: {str(path)!r} has no {missing[0]}; {expected} (a committed run's tensors, if that is "
                         f"what is missing, are in git history: hmmtf restore-checkpoint)")
    return path


def run_signal(args) -> int:
    torch.set_num_threads(args.threads)
    unknown = sorted(set(args.families) - set(CANDIDATES))
    if unknown:
        raise ValueError(f"--families: {unknown}; expected names of {sorted(CANDIDATES)}")
    settings = SMCSettings(particles=args.particles, moves=args.moves, seed=args.seed)
    out = Path(args.out)
    check_study_owner(out, args.command_line, SIGNAL_FILES, args.overwrite)
    with run_folder_lock(out, "--out"):
        started = time.perf_counter()
        report = signal_report({name: CANDIDATES[name] for name in args.families}, hmm.PROMPT_FORMATS["tasks-8192"],
                               args.num_prompts, args.fresh_tasks, settings)
        report = {"command": args.command_line, "git_commit": args.git_commit,
                  "seconds": time.perf_counter() - started, **report}
        (out / SIGNAL_FILES.reports[0]).write_text(result_text(report))
        plot_signal(report, out / SIGNAL_FILES.companions[0])
    print(json.dumps({name: {"signal": round(family["scopes"]["all_positions"]["signal"]["mean"], 4),
                             "bigram_share": round(family["scopes"]["all_positions"]["bigram_share"], 3)}
                      for name, family in report["families"].items()}, indent=1, allow_nan=False))
    return 0


def run_family_calibration(args) -> int:
    """``hmmtf family-calibration``: the grid's measurements and the rule's choice in
    ``family_calibration.json``, the maps in ``family_calibration.png``."""
    torch.set_num_threads(args.threads)
    specs = grid_specs(args.concentrations)
    out = Path(args.out)
    check_study_owner(out, args.command_line, FAMILY_CALIBRATION_FILES, args.overwrite)

    def progress(name: str, seconds: float) -> None:
        print(f"{name}: {seconds:.1f} s", flush=True)

    with run_folder_lock(out, "--out"):
        started = time.perf_counter()
        report = calibration_report(specs, hmm.PROMPT_FORMATS["paper"], args.num_prompts, args.fresh_tasks, progress,
                                    args.ceiling_replicates)
        report = {"command": args.command_line, "git_commit": args.git_commit, "threads": args.threads,
                  "seconds": time.perf_counter() - started, **report}
        (out / FAMILY_CALIBRATION_FILES.reports[0]).write_text(result_text(report))
        plot_family_calibration(report, out / FAMILY_CALIBRATION_FILES.companions[0])
    print(f"choice: {report['choice']}")
    return 0


def run_curve(args) -> int:
    """``hmmtf curve``: training with its learning curve, stopped by SIGINT or SIGTERM at the next
    step with a checkpoint (exit code 128 + the signal; the unfinished chunk has no point)."""
    torch.set_num_threads(args.threads)
    run = training_run(args.preset, args.config, flag_overrides(args))
    run_dir = check_run_folder(args.run_dir, "--run-dir", own=CURVE_OWN_FILES)
    if args.branch_from and not has_checkpoint(run_dir / CHECKPOINT_DIR):
        check_curve_run(args.branch_from, "--branch-from")
    settings = dataclasses.replace(CEILING_SETTINGS, particles=args.ceiling_particles) if args.ceiling_particles else None
    with stop_on_signals() as stop:
        points = train_with_curve(run.preset, run.model, run_dir, args.every, args.curve_prompts, args.fresh_tasks,
                                  settings, command=args.command_line, branch_from=args.branch_from,
                                  stop_requested=stop)
    if stop() and (not points or points[-1]["step"] < run.preset.train.steps):
        step = json.loads((run_dir / CHECKPOINT_DIR / CONFIG_FILE).read_text())["step"]
        print(interrupted_line("hmmtf curve", stop.signal.name, f"at step {step} of {run.preset.train.steps}; "
                               f"checkpoint written to {run_dir / CHECKPOINT_DIR}"), file=sys.stderr)
        return stop.exit_code
    baselines = json.loads((run_dir / BASELINES_FILE).read_text())
    plot_curve(points, baseline_means(baselines), run_dir / CURVE_FIGURE)
    return 0


def run_curves(args) -> int:
    """``hmmtf curves``: the runs' summaries in ``curves.json`` and their curves in ``curves.png``."""
    out = Path(args.out)
    run_dirs = [check_curve_run(run_dir, "run_dirs") for run_dir in args.run_dirs]
    check_study_owner(out, args.command_line, STUDY_FILES, args.overwrite)
    with run_folder_lock(out, "--out"):
        runs = [run_summary(run_dir) for run_dir in run_dirs]
        for run in runs[1:]:
            if (run["mixture"], run["probe"]) != (runs[0]["mixture"], runs[0]["probe"]):
                raise ValueError(f"run_dirs: {run['run']!r} was scored on {run['mixture']!r} with {run['probe']}, "
                                 f"{runs[0]['run']!r} on {runs[0]['mixture']!r} with {runs[0]['probe']}; expected "
                                 f"one mixture and one probe per study")
        study = {"command": args.command_line, "git_commit": args.git_commit, "title": args.title, "runs": runs}
        (out / STUDY_FILES.reports[0]).write_text(result_text(study))
        plot_curves(study, out / STUDY_FILES.companions[0])
    for run in runs:
        last = run["points"][-1]["all_positions"]
        print(f"{run['run']}: step {run['points'][-1]['step']}, model - bigram {last['model_minus']['ngram 2']['mean']:+.4f}, "
              f"gap closed {last['gap_closed']['fraction']:.2f}")
    return 0


def register(subparsers) -> None:
    """Add ``signal``, ``family-calibration``, ``curve`` and ``curves`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("signal", help="in-context signal of data families: in-context n-grams, the "
                                                  "prior-predictive ceiling and the oracle on fresh HMMs")
    parser.add_argument("--families", nargs="+", default=list(CANDIDATES), metavar="NAME",
                        help=f"families to measure (default: all of {list(CANDIDATES)})")
    parser.add_argument("--num-prompts", type=positive_int, default=128, help="prompts per family")
    parser.add_argument("--fresh-tasks", type=positive_int, default=1024, help="fresh HMMs the prompts come from")
    parser.add_argument("--particles", type=positive_int, default=CEILING_SETTINGS.particles,
                        help="SMC particles per replicate of the ceiling")
    parser.add_argument("--moves", type=positive_int, default=CEILING_SETTINGS.moves,
                        help="Gibbs sweeps per rejuvenation")
    parser.add_argument("--seed", type=non_negative_int, default=CEILING_SETTINGS.seed, help="seed of the ceiling's SMC")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=output_folder, default="runs/families",
                        help="folder of signal.json and signal.png (the committed result: --out figures/families)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_signal)

    parser = subparsers.add_parser("family-calibration", help="the paper-scale family: oracle, in-context n-grams "
                                   "and uniform on fresh 128-state HMMs over a grid of Dirichlet concentrations, and the "
                                   "rule's choice")
    parser.add_argument("--concentrations", nargs="+", type=positive_float, default=list(GRID), metavar="C",
                        help=f"the grid, for transition and emission rows alike (default {list(GRID)})")
    parser.add_argument("--num-prompts", type=positive_int, default=512, help="prompts per family")
    parser.add_argument("--fresh-tasks", type=positive_int, default=1024, help="fresh HMMs the prompts come from")
    parser.add_argument("--ceiling-replicates", type=non_negative_int, default=0,
                        help="runs of the collapsed-path SMC averaged into an upper bound on each family's ceiling "
                             "(0: none; at 512 prompts a run takes 1.5 minutes of a core on the paper family, more "
                             "on denser ones)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=output_folder, default="runs/families/paper-scale",
                        help="folder of family_calibration.json and .png (the committed result: --out "
                             "figures/families/paper-scale)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_family_calibration)

    parser = subparsers.add_parser("curve", help="train with a learning curve on fresh HMMs against the in-context "
                                                 "n-grams and the prior-predictive ceiling")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="the named defaults (or `preset` in --config)")
    parser.add_argument("--config", metavar="FILE", help="TOML or JSON overrides, as hmmtf train reads them")
    add_override_options(parser)
    parser.add_argument("--run-dir", required=True, help="checkpoint, training log and curve folder (resumes if present; "
                                                         "SIGINT or SIGTERM stops at the next step with a checkpoint)")
    parser.add_argument("--every", type=positive_int, required=True, help="steps between curve points (divides --steps)")
    parser.add_argument("--branch-from", metavar="RUN_DIR",
                        help="start a new --run-dir from this curve run's checkpoint, whose steps took the same "
                             "rates (a constant-rate run into its final decay: --decay-steps)")
    parser.add_argument("--curve-prompts", type=positive_int, default=256, help="fresh-HMM prompts of every point")
    parser.add_argument("--fresh-tasks", type=positive_int, default=1024, help="fresh HMMs the prompts come from")
    parser.add_argument("--ceiling-particles", type=non_negative_int, default=CEILING_SETTINGS.particles,
                        help="SMC particles per replicate of the ceiling (0: no ceiling, no gap closed)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    parser.set_defaults(run=run_curve)

    parser = subparsers.add_parser("curves", help="a study: several runs' learning curves (of hmmtf curve) in one "
                                                  "JSON and figure")
    parser.add_argument("run_dirs", nargs="+", help="run folders of hmmtf curve")
    parser.add_argument("--title", required=True, help="what the study compares (the figure's title)")
    parser.add_argument("--out", type=output_folder, required=True, help="folder of curves.json and curves.png")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_curves)
