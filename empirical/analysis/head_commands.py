"""``hmmtf heads CHECKPOINT --out DIR`` (registered in :mod:`hmmtf`): the head scores and the
mean-ablation test of :mod:`empirical.analysis.heads` on a checkpoint, on prompts of fresh HMMs
of its task; writes ``heads.json`` (every number, the command and the git commit) and
``heads.png`` (:func:`empirical.analysis.head_figures.plot_heads`)."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch

from empirical.analysis.commands import load_on_device
from empirical.analysis.head_figures import plot_heads
from empirical.analysis.heads import COUNTS_FROM_ZERO, HeadsSettings, heads_report
from hmmtf_options import config_from_command_line, non_negative_int, positive_int

REPORT_FILE = "heads.json"
FIGURE_FILE = "heads.png"


def run_heads(args) -> int:
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    settings = config_from_command_line(HeadsSettings, vars(args))
    device, saved, preset = load_on_device(args)
    report = {
        "command": args.command_line, "git_commit": args.git_commit, "checkpoint": str(args.checkpoint),
        "step": saved.config["step"], "task": saved.config["task"], "model": saved.config["model"],
        "device": str(device),
        **heads_report(saved.model.eval(), preset, settings, device),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_heads(report, out / FIGURE_FILE)
    report["runtime_s"] = time.perf_counter() - started
    (out / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
    ablation = report["ablation"]
    print(json.dumps({
        "out": str(out), "runtime_s": round(report["runtime_s"], 1),
        "selection": {group: [f"layer {h['layer']} head {h['head']}" for h in chosen["heads"]]
                      for group, chosen in report["selection"].items()},
        "kl_all_positions": {group: {name: {"before": round(ablation["before"]["all_positions"][name]["mean"], 4),
                                            "change": round(values["change"]["mean"], 4),
                                            "random_change": round(values["random_change"]["mean"], 4)}
                                     for name, values in entry["all_positions"].items()}
                             for group, entry in ablation["groups"].items()},
    }, indent=1))
    return 0


def register(subparsers) -> None:
    """Add ``heads`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("heads", help="previous-token and induction scores of every head (trained and "
                                                 "random-init) and the mean-ablation of the top heads against random "
                                                 "heads, on fresh-HMM prompts")
    parser.add_argument("checkpoint", help="a checkpoint folder (RUN_DIR/checkpoint of hmmtf train, or a folder of "
                                           "models/)")
    parser.add_argument("--out", required=True, help="folder of heads.json and heads.png")
    for field in dataclasses.fields(HeadsSettings):
        kind = non_negative_int if field.name in COUNTS_FROM_ZERO else positive_int
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default,
                            help=f"{field.metadata['help']} (default: %(default)s)")
    parser.add_argument("--device", help="default: CUDA if available, else CPU")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    parser.set_defaults(run=run_heads)
