"""The subcommands of the Markov-chain study:

``hmmtf markov-sweep`` trains RoFormers of every arm (initialisation x architecture) on a grid of
binary Markov chains and writes ``results.json``, ``phase_diagram.png``, ``read_back.png``,
``plateau_survival.png`` and ``loss_curves_<init>.png`` (see :mod:`empirical.studies.markov` and
``docs/markov.md``).

``hmmtf markov-verdict`` prints the verdict's tables (trapped runs with Wilson intervals and escape
steps, per arm) of one or more ``results.json`` files as markdown; ``docs/markov.md`` holds its
output for the committed sweeps.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from empirical.provenance import checkout
from empirical.studies.markov.aggregate import SIDES, aggregate_cells, aggregate_sides, verdict_counts
from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.criterion import TRAP_CRITERION
from empirical.studies.markov.figures import plot_loss_curves, plot_phase_diagram, plot_plateau_survival, plot_read_back
from empirical.studies.markov.runs import run_sweep
from empirical.training.result_files import MARKOV_SWEEP_FIGURES, loss_curves_figure, markov_sweep_files
from empirical.training.run_control import run_folder_lock
from hmmtf.options import (add_config_options, add_overwrite_option, check_study_owner, config_from_command_line,
                           output_folder, result_text)


def source_revision() -> dict | None:
    """``{"commit": ..., "dirty": ...}`` of the checkout (:func:`empirical.provenance.checkout`: dirty
    when a tracked file outside ``figures/``, where a chain of sweeps writes, differs from the
    commit), or None outside a git checkout."""
    state = checkout()
    return None if state.commit is None else {"commit": state.commit, "dirty": state.dirty}


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
    (directory / markov_sweep_files(config.inits).reports[0]).write_text(result_text(document))
    draw_figures(document, directory)
    return document


def draw_figures(document: dict, directory: Path) -> None:
    """The figures of a sweep from its ``results.json`` contents ``document``, into ``directory``."""
    config = MarkovSweepConfig.from_dict(document["config"])
    runs = document["runs"]
    phase_diagram, read_back, plateau_survival = MARKOV_SWEEP_FIGURES
    plot_phase_diagram(document["cells"], config, directory / phase_diagram)
    plot_read_back(runs, config, directory / read_back)
    plot_plateau_survival(runs, config, directory / plateau_survival)
    for init in config.inits:
        plot_loss_curves(runs, config, init, directory / loss_curves_figure(init))


def read_results(path: Path, argument: str) -> dict:
    """The ``results.json`` of a sweep at ``path``, given by the option ``argument``: ``ValueError``
    naming both when the file is missing or not JSON."""
    if not path.is_file():
        raise ValueError(f"{argument}: {str(path)!r} does not exist; expected the results.json of hmmtf markov-sweep")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{argument}: {str(path)!r} is not JSON ({error}); expected the results.json of "
                         f"hmmtf markov-sweep") from error


def run_markov_sweep(args) -> int:
    out = Path(args.out)
    if args.redraw:
        document = read_results(out / "results.json", "--out")
        with run_folder_lock(out, "--out"):
            draw_figures(document, out)
        print(f"redrew the figures of {args.out} from its results.json")
        return 0
    config = config_from_command_line(MarkovSweepConfig, vars(args))
    check_study_owner(out, args.command_line, markov_sweep_files(config.inits), args.overwrite)
    with run_folder_lock(out, "--out"):
        started = time.perf_counter()
        runs = run_sweep(config, progress=not args.no_progress)
        document = write_sweep(runs, config, out, command=args.command_line, wall_seconds=time.perf_counter() - started)
    for record in document["sides"]:
        print("{:>13} {:>15}  {}: trapped {}/{} [{:.2f}, {:.2f}]".format(
            record["init"], record["architecture"], record["side"], record["trapped"], record["seeds"],
            *record["trapped_interval"]))
    print(f"wrote results.json and figures to {args.out} in {document['wall_seconds']:.0f} s")
    return 0


VERDICT_SWEEPS = ("figures/markov/results.json", "figures/markov/long-budget/results.json")
"""The sweeps of the verdict in ``docs/markov.md``: the default sweep and the long budget."""


def _trapped_entry(record: dict | None) -> str:
    """``k/n [low, high]`` of a :func:`empirical.studies.markov.aggregate.count_record`, or "not run"."""
    if record is None:
        return "not run"
    return "{}/{} [{:.2f}, {:.2f}]".format(record["trapped"], record["seeds"], *record["trapped_interval"])


def _escape_entry(record: dict | None) -> str:
    """``median (first-last)`` of an :func:`empirical.studies.markov.aggregate.escape_record`, with "never"
    for runs censored at the budget and their count; or "not run"."""
    if record is None:
        return "not run"
    if record["first"] is None:
        return f"never ({record['censored']}/{record['seeds']} censored)"
    if not record["censored"]:
        return f"{record['median']} ({record['first']}-{record['last']})"
    median = "never" if record["median"] is None else record["median"]
    return f"{median} ({record['first']}-never, {record['censored']}/{record['seeds']} censored)"


def _verdict_columns(steps: int, records: list[dict]) -> tuple[list, list]:
    """The ``(header, entry of an arm's record)`` columns of one sweep in the two verdict tables:
    trapped runs on each side of ``p + q = 1`` the sweep covers and at its hardest cell; escape
    steps of each ``p + q > 1`` cell."""
    trapped = [(f"{side}, {steps} steps", lambda record, side=side: _trapped_entry(record[side]))
               for side in SIDES if any(record[side] is not None for record in records)]
    trapped.append(("({}, {}), {} steps".format(*records[0]["hardest_cell"], steps),
                    lambda record: _trapped_entry(record["at_hardest_cell"])))
    cells = sorted({(cell["p"], cell["q"]) for record in records for cell in record["escape"]})
    escape = [(f"({p}, {q}), {steps} steps",
               lambda record, cell=(p, q): _escape_entry(
                   next((entry for entry in record["escape"] if (entry["p"], entry["q"]) == cell), None)))
              for p, q in cells]
    return trapped, escape


def _arm_table(arms: list[tuple[str, str]], sweeps: list[tuple[dict, list]]) -> str:
    """A markdown table with a row per arm and, for each sweep ``(records by arm, columns)``, its
    columns; an arm the sweep did not train reads "not run"."""
    header = ["arm", *(name for _, columns in sweeps for name, _ in columns)]
    rows = [[f"{init}, {architecture}", *(entry(by_arm[(init, architecture)]) if (init, architecture) in by_arm
                                          else "not run" for by_arm, columns in sweeps for _, entry in columns)]
            for init, architecture in arms]
    return "\n".join("| " + " | ".join(line) + " |" for line in [header, ["---"] * len(header), *rows])


def verdict_markdown(documents: list[dict]) -> str:
    """The verdict's two tables for the sweeps ``documents`` (``results.json`` contents), as
    markdown, one row per arm and one group of columns per sweep, labelled with its budget
    (numbers from :func:`empirical.studies.markov.aggregate.verdict_counts`): trapped runs
    ``k/n [95% Wilson interval]`` on each side of ``p + q = 1`` that the sweep covers and at its
    hardest cell; escape steps of every ``p + q > 1`` cell as Kaplan-Meier median (first-last
    escape), runs censored at the budget counted."""
    trapped, escape = [], []
    for document in documents:
        records = verdict_counts(document["runs"])
        by_arm = {(record["init"], record["architecture"]): record for record in records}
        trapped_columns, escape_columns = _verdict_columns(document["config"]["steps"], records)
        trapped.append((by_arm, trapped_columns))
        escape.append((by_arm, escape_columns))
    arms = list(dict.fromkeys(arm for by_arm, _ in trapped for arm in by_arm))
    return ("Trapped runs / runs [95% Wilson interval]:\n\n" + _arm_table(arms, trapped) + "\n\n"
            "Escape steps, p + q > 1 cells: Kaplan-Meier median (first-last escape; censored = still on the "
            "plateau at the budget):\n\n" + _arm_table(arms, escape) + "\n")


def run_markov_verdict(args) -> int:
    print(verdict_markdown([read_results(Path(path), "results") for path in args.results]), end="")
    return 0


def register(subparsers) -> None:
    """Add ``markov-sweep`` and ``markov-verdict`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "markov-sweep",
        help="unigram traps of small RoFormers on binary Markov chains (Makkuva et al.)",
        description="Train RoFormers (initialisation x architecture) on a (p, q) grid of binary Markov chains; "
                    "report the fraction of seeds whose held-out loss is above the bigram line by more than its "
                    "sampling noise at the end of the budget.",
    )
    parser.add_argument("--out", type=output_folder, default="runs/markov",
                        help="output directory (default: %(default)s; the committed sweeps are written with "
                             "--out figures/markov/...)")
    add_config_options(parser, MarkovSweepConfig)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--redraw", action="store_true",
                        help="train nothing: redraw the figures of --out from its results.json (other options ignored)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_markov_sweep)
    verdict = subparsers.add_parser(
        "markov-verdict",
        help="the verdict tables of Markov sweeps (trapped runs with Wilson intervals, escape steps) as markdown",
        description="Print, per arm (initialisation x architecture), the trapped runs with 95%% Wilson intervals on "
                    "each side of p + q = 1 and at the hardest cell, and the escape steps of the p + q > 1 cells, "
                    "of each sweep's results.json, as the markdown tables of docs/markov.md.",
    )
    verdict.add_argument("results", nargs="*", default=list(VERDICT_SWEEPS),
                         help="results.json files of markov-sweep, one column group each (default: %(default)s)")
    verdict.set_defaults(run=run_markov_verdict)
