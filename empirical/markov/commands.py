"""Subcommand of the Markov-chain study (registered in :mod:`hmmtf`):

``hmmtf markov-sweep`` trains RoFormers of every arm (initialisation x architecture) on a grid of
binary Markov chains and writes ``results.json``, ``phase_diagram.png``, ``read_back.png``,
``plateau_survival.png`` and ``loss_curves_<init>.png`` (see :mod:`empirical.markov` and
``docs/markov.md``).
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from empirical.configs import add_config_options, config_from_options
from empirical.markov.aggregate import aggregate_cells, aggregate_sides
from empirical.markov.config import MarkovSweepConfig
from empirical.markov.criterion import TRAP_CRITERION
from empirical.markov.figures import plot_loss_curves, plot_phase_diagram, plot_plateau_survival, plot_read_back
from empirical.markov.runs import run_sweep


def source_revision() -> dict | None:
    """``{"commit": HEAD's hash, "dirty": whether any Python file differs from it or is
    untracked}`` of the git checkout holding this file, or None outside a git checkout. Only
    Python files count: the figures and JSON a chain of sweeps rewrites are outputs, not code."""
    root = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--", ":/*.py"], cwd=root, capture_output=True,
                                text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def write_sweep(runs: list[dict], config: MarkovSweepConfig, directory: Path, *, command: str,
                wall_seconds: float) -> dict:
    """Write ``results.json`` (``command`` = the command line that ran the sweep, the git
    revision, wall time, config, decision rule, per-side and per-cell summaries, runs) and the
    figures to ``directory``; return the JSON document."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cells = aggregate_cells(runs)
    document = {
        "command": command,
        "git": source_revision(),
        "wall_seconds": wall_seconds,
        "config": config.to_dict(),
        "criterion": TRAP_CRITERION,
        "skipped_iid_cells": [list(cell) for cell in config.iid_cells()],
        "sides": aggregate_sides(runs),
        "cells": cells,
        "runs": runs,
    }
    (directory / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    plot_phase_diagram(cells, config, directory / "phase_diagram.png")
    plot_read_back(runs, config, directory / "read_back.png")
    plot_plateau_survival(runs, config, directory / "plateau_survival.png")
    for init in config.inits:
        plot_loss_curves(runs, config, init, directory / f"loss_curves_{init}.png")
    return document


def run_markov_sweep(args) -> int:
    config = config_from_options(MarkovSweepConfig, vars(args))
    started = time.perf_counter()
    runs = run_sweep(config, progress=not args.no_progress)
    document = write_sweep(runs, config, Path(args.out), command=args.command_line,
                           wall_seconds=time.perf_counter() - started)
    for record in document["sides"]:
        print("{:>13} {:>15}  {}: trapped {}/{} [{:.2f}, {:.2f}]".format(
            record["init"], record["architecture"], record["side"], record["trapped"], record["seeds"],
            *record["trapped_interval"]))
    print(f"wrote results.json and figures to {args.out} in {document['wall_seconds']:.0f} s")
    return 0


def register(subparsers) -> None:
    """Add ``markov-sweep`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "markov-sweep",
        help="unigram traps of small RoFormers on binary Markov chains (Makkuva et al.)",
        description="Train RoFormers (initialisation x architecture) on a (p, q) grid of binary Markov chains; "
                    "report the fraction of seeds whose held-out loss is above the bigram line by more than its "
                    "sampling noise at the end of the budget.",
    )
    parser.add_argument("--out", default="figures/markov", help="output directory (default: %(default)s)")
    add_config_options(parser, MarkovSweepConfig)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run_markov_sweep)
