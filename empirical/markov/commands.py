"""Subcommand of the Markov-chain study (registered in :mod:`hmmtf`):

``hmmtf markov-sweep`` trains single-layer (tied / untied embeddings) and two-layer RoFormers on a
grid of binary Markov chains and writes ``results.json``, ``phase_diagram.png``,
``loss_curves.png`` and ``plateau_survival.png`` (see :mod:`empirical.markov` and ``docs/markov.md``).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from empirical.configs import add_config_options, config_from_options
from empirical.markov.aggregate import aggregate_cells
from empirical.markov.config import MarkovSweepConfig
from empirical.markov.criterion import TRAP_CRITERION
from empirical.markov.figures import loss_curve_cells, plot_loss_curves, plot_phase_diagram, plot_plateau_survival
from empirical.markov.runs import run_sweep


def write_sweep(runs: list[dict], config: MarkovSweepConfig, directory: Path, *, command: str,
                wall_seconds: float) -> dict:
    """Write ``results.json`` (config, ``command`` = the command line that ran the sweep,
    criterion, cells, runs), ``phase_diagram.png``, ``loss_curves.png`` and
    ``plateau_survival.png`` to ``directory``; return the JSON document."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cells = aggregate_cells(runs)
    document = {
        "command": command,
        "wall_seconds": wall_seconds,
        "config": config.to_dict(),
        "criterion": TRAP_CRITERION,
        "skipped_iid_cells": [list(cell) for cell in config.iid_cells()],
        "cells": cells,
        "runs": runs,
    }
    (directory / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    plot_phase_diagram(cells, config, directory / "phase_diagram.png")
    plot_loss_curves(runs, loss_curve_cells(config), config.architectures, directory / "loss_curves.png")
    plot_plateau_survival(runs, config, directory / "plateau_survival.png")
    return document


def run_markov_sweep(args) -> int:
    config = config_from_options(MarkovSweepConfig, vars(args))
    started = time.perf_counter()
    runs = run_sweep(config, progress=not args.no_progress)
    document = write_sweep(runs, config, Path(args.out), command=args.command_line,
                           wall_seconds=time.perf_counter() - started)
    for cell in document["cells"]:
        print(f"{cell['architecture']:>15}  p={cell['p']:<5} q={cell['q']:<5} trapped {cell['trapped']}/{cell['seeds']}")
    print(f"wrote results.json and figures to {args.out} in {document['wall_seconds']:.0f} s")
    return 0


def register(subparsers) -> None:
    """Add ``markov-sweep`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "markov-sweep",
        help="unigram traps of small RoFormers on binary Markov chains (Makkuva et al.)",
        description="Train RoFormers on a (p, q) grid of binary Markov chains; report the fraction of seeds "
                    "whose final loss is closer to the unigram line than to the bigram line.",
    )
    parser.add_argument("--out", default="figures/markov", help="output directory (default: %(default)s)")
    add_config_options(parser, MarkovSweepConfig)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run_markov_sweep)
