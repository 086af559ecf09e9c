"""``hmmtf analyze [CHECKPOINT]``: the analyses of
:mod:`empirical.analysis.report` on a checkpoint; writes ``analysis.json`` (with the command and
the git commit that made it) and the figures of :mod:`empirical.analysis.figures` and
:mod:`empirical.analysis.patching_figures` of the sections that ran to ``--out``. Its options are the fields of
:class:`~empirical.analysis.report.AnalysisConfig` plus where to read, where to write and how to
run."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bounds.serialize import to_json
from empirical.analysis.report import AnalysisConfig, analyze
from empirical.analysis.report_figures import write_figures
from empirical.training.checkpoint import Checkpoint, load_checkpoint
from empirical.training.presets import ExperimentPreset, preset_from_task
from empirical.training.runs import CHECKPOINT_EXPECTED, checkpoint_folder
from empirical.training.result_files import ANALYSIS_FILE, COMMAND_FILES, ResultFiles
from empirical.training.run_control import run_folder_lock
from hmmtf.options import (add_config_options, check_output_folder, check_results_owner, config_from_command_line,
                           default_results_folder, device, integer_at_least, non_negative_int, output_folder,
                           positive_int, result_text)

DEFAULT_CHECKPOINT = "runs/cpu-small/checkpoint"
DEFAULT_OUT = "analysis"
"""The folder beside the checkpoint that ``--out`` defaults to (``RUN_DIR/analysis``)."""


def load_on_device(folder: Path, args) -> tuple[torch.device, Checkpoint, ExperimentPreset]:
    """The device of ``--device`` (CUDA if available when not given), the checkpoint in ``folder``
    on it and the preset of its task (:func:`empirical.training.presets.preset_from_task`)."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    saved = load_checkpoint(folder, device)
    return device, saved, preset_from_task(saved.config["task"])


def add_measure_command(subparsers, name: str, help: str, settings_class: type, counts_from_zero: tuple[str, ...],
                        measure: Callable[..., dict], plot: Callable[[dict, Path], None],
                        summarise: Callable[[dict], dict], at_least: dict[str, tuple[int, str]] | None = None) -> None:
    """Add the subcommand ``name`` (``hmmtf heads``, ``klmap``, ``beliefs``) that measures one
    checkpoint with the settings dataclass ``settings_class`` (:func:`measure_checkpoint`) and
    prints ``--out``, the runtime and ``summarise(report)`` as JSON. Its options: the checkpoint,
    ``--out`` (the folder of its report and figure), one ``--field-name`` per field
    (:func:`empirical.training.configs.option`'s help; type :data:`hmmtf.options.non_negative_int` for the
    fields of ``counts_from_zero``, else :data:`hmmtf.options.positive_int`, or at least ``N`` for
    a field of ``at_least``, ``{field: (N, why)}``), ``--device`` and ``--threads``. Its files are ``COMMAND_FILES[name]`` (:mod:`empirical.training.result_files`)."""
    files = COMMAND_FILES[name]
    parser = subparsers.add_parser(name, help=help)
    parser.add_argument("checkpoint", help=CHECKPOINT_EXPECTED)
    parser.add_argument("--out", type=output_folder,
                        help=f"folder of {' and '.join(files.names)} (default runs/{name}/INPUT: one per input)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the results of another input that --out holds (refused otherwise)")
    for field in dataclasses.fields(settings_class):
        kind = non_negative_int if field.name in counts_from_zero else positive_int
        minimum, why = (at_least or {}).get(field.name, (None, ""))
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind if minimum is None else integer_at_least(minimum),
                            default=field.default, help=f"{field.metadata['help']}{why} (default: %(default)s)")
    parser.add_argument("--device", type=device, help="default: CUDA if available, else CPU")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")

    def run(args) -> int:
        out, report = measure_checkpoint(args, settings_class, measure, plot, files)
        print(json.dumps({"out": str(out), "runtime_s": round(report["runtime_s"], 1),
                          **summarise(report)}, indent=1, allow_nan=False))
        return 0

    parser.set_defaults(run=run)


def measure_checkpoint(args, settings_class: type, measure: Callable[..., dict], plot: Callable[[dict, Path], None],
                       files: ResultFiles) -> tuple[Path, dict]:
    """Run a command of :func:`add_measure_command`: its settings from ``args``, the checkpoint on
    its device, ``measure(model, preset, settings, device)`` under the command line, git commit,
    checkpoint, step, task, model and device; ``plot(report, path)`` draws ``figure_file`` and the
    report, with ``runtime_s``, goes to the report file, both ``files`` in ``--out`` (default
    ``runs/COMMAND/INPUT``, one folder per input: :func:`hmmtf.options.default_results_folder`).
    Returns the folder and the report."""
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    settings = config_from_command_line(settings_class, vars(args))
    folder = checkpoint_folder(args.checkpoint, "checkpoint")
    out = check_output_folder(args.out if args.out else default_results_folder(args.command, folder))
    check_results_owner(out, folder, files, args.overwrite, args.command_line)
    device, saved, preset = load_on_device(folder, args)  # a checkpoint it refuses leaves --out as it was
    with run_folder_lock(out, "--out"):
        return out, _measure_into(args, settings, measure, plot, files.names, folder, (device, saved, preset),
                                  out, started)


def _measure_into(args, settings, measure: Callable[..., dict], plot: Callable[[dict, Path], None],
                  files: tuple[str, str], folder: Path, loaded: tuple, out: Path, started: float) -> dict:
    """:func:`measure_checkpoint`'s measurement of the checkpoint ``folder``, ``loaded`` as
    ``(device, checkpoint, preset)``, into ``out``'s ``files`` (report, figure)."""
    (report_file, figure_file), (device, saved, preset) = files, loaded
    report = {
        "command": args.command_line, "git_commit": args.git_commit, "checkpoint": str(folder),
        "step": saved.config["step"], "task": saved.config["task"], "model": saved.config["model"],
        "device": str(device),
        **measure(saved.model.eval(), preset, settings, device),
    }
    out.mkdir(parents=True, exist_ok=True)
    plot(report, out / figure_file)
    report["runtime_s"] = time.perf_counter() - started
    (out / report_file).write_text(result_text(report))
    return report


def run_analyze(args) -> int:
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    config = config_from_command_line(AnalysisConfig, vars(args))
    folder = checkpoint_folder(args.checkpoint, "checkpoint")
    out = check_output_folder(args.out if args.out else default_results_folder(DEFAULT_OUT, folder))
    check_results_owner(out, folder, COMMAND_FILES["analyze"], args.overwrite, args.command_line)
    loaded = load_on_device(folder, args)  # a checkpoint it refuses leaves --out as it was
    with run_folder_lock(out, "--out"):
        return _analyze_into(args, config, folder, loaded, out, started)


def _analyze_into(args, config: AnalysisConfig, folder: Path, loaded: tuple, out: Path, started: float) -> int:
    """:func:`run_analyze`'s analysis of the checkpoint ``folder``, ``loaded`` as ``(device,
    checkpoint, preset)``, into ``out``."""
    device, saved, preset = loaded
    analysis = analyze(saved.model, preset, config, device)
    report = {
        "command": args.command_line, "git_commit": args.git_commit, "checkpoint": str(folder),
        "step": saved.config["step"],
        "task": saved.config["task"], "model": saved.config["model"], "device": str(device),
        "settings": {key: value for key, value in vars(args).items() if key not in ("run", "command_line")},
        **analysis.report,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_figures(analysis, preset.prompt_format, config.max_distance, out)
    report["runtime_s"] = time.perf_counter() - started
    (out / ANALYSIS_FILE).write_text(result_text(to_json(report)))
    print(json.dumps({"out": str(out), "runtime_s": round(report["runtime_s"], 1), "claims": report.get("claims")},
                     indent=1, allow_nan=False))
    return 0


def register(subparsers) -> None:
    """Add ``analyze`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("analyze", help="shuffle test, probes, attention maps, hand-built vs trained, "
                                                   "activation patching")
    parser.add_argument("checkpoint", nargs="?", default=DEFAULT_CHECKPOINT,
                        help=f"{CHECKPOINT_EXPECTED} (default {DEFAULT_CHECKPOINT})")
    parser.add_argument("--out", type=output_folder,
                        help=f"folder for {ANALYSIS_FILE} and the figures (default runs/{DEFAULT_OUT}/INPUT: one per input)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the results of another input that --out holds (refused otherwise)")
    parser.add_argument("--device", type=device, help="default: CUDA if available, else CPU")
    add_config_options(parser, AnalysisConfig)
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    parser.set_defaults(run=run_analyze)
