"""The frame of the commands that measure one checkpoint on fresh prompts of its own task and write
one JSON and one figure (``hmmtf heads``, ``hmmtf beliefs``): their options, and the run that loads
the checkpoint, records the command and the git commit, and writes what was measured."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from empirical.analysis.commands import load_on_device
from empirical.model import RoFormer
from empirical.presets import ExperimentPreset
from hmmtf_options import config_from_command_line, non_negative_int, positive_int

Measure = Callable[[RoFormer, ExperimentPreset, object, torch.device], dict]
"""``(model, preset, settings, device) -> JSON-ready dict``: what a command computes."""
Draw = Callable[[dict, Path], None]
"""``(report, path)``: the command's figure from its report."""
Summarise = Callable[[dict], dict]
"""``report -> JSON-ready dict``: the few numbers a command prints."""


def add_checkpoint_options(parser, settings_class: type, counts_from_zero: tuple[str, ...], outputs: str) -> None:
    """The positional checkpoint, ``--out`` (the folder of ``outputs``), one option per field of the
    dataclass ``settings_class`` (``non_negative_int`` for the fields in ``counts_from_zero``, else
    ``positive_int``; help from :func:`empirical.configs.option`), ``--device`` and ``--threads``."""
    parser.add_argument("checkpoint", help="a checkpoint folder (RUN_DIR/checkpoint of hmmtf train, or a folder of "
                                           "models/)")
    parser.add_argument("--out", required=True, help=f"folder of {outputs}")
    for field in dataclasses.fields(settings_class):
        kind = non_negative_int if field.name in counts_from_zero else positive_int
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default,
                            help=f"{field.metadata['help']} (default: %(default)s)")
    parser.add_argument("--device", help="default: CUDA if available, else CPU")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")


def run_on_checkpoint(args, settings_class: type, measure: Measure, draw: Draw, summarise: Summarise,
                      report_file: str, figure_file: str) -> int:
    """Measure the checkpoint ``args.checkpoint`` with the settings of the options, draw the figure
    and write the report into ``args.out``: the command, the git commit, the checkpoint, its step,
    task and model config, the device, what ``measure`` returned and the runtime in seconds
    (``runtime_s``); print ``out``, the runtime and ``summarise(report)`` as JSON; exit code 0."""
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    settings = config_from_command_line(settings_class, vars(args))
    device, saved, preset = load_on_device(args)
    report = {
        "command": args.command_line, "git_commit": args.git_commit, "checkpoint": str(args.checkpoint),
        "step": saved.config["step"], "task": saved.config["task"], "model": saved.config["model"],
        "device": str(device),
        **measure(saved.model.eval(), preset, settings, device),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    draw(report, out / figure_file)
    report["runtime_s"] = time.perf_counter() - started
    (out / report_file).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"out": str(out), "runtime_s": round(report["runtime_s"], 1), **summarise(report)}, indent=1))
    return 0
