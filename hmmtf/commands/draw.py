"""``hmmtf draw [FIGURE ...]``: the figures the tracked tree does not keep, drawn from the committed
result JSON beside them (issue 66, item 3).

A figure that no page links (README.md, docs/, models/README.md, the ledger's claims) is not
committed: it is one command away, drawn from the report its command wrote beside it by the plotting
function that command calls. :data:`DRAWINGS` names, for each figure, the report it is drawn from (a
pattern of paths) and how; a figure is *drawable* where a report under ``figures/`` matches and
holds what the figure shows (:func:`drawable`). ``hmmtf draw`` draws every drawable figure the
working tree lacks, ``hmmtf draw FIGURE ...`` those named (again, if present), ``--list`` lists
them. The figures it writes are what the commands would draw now from the same numbers;
``tests/test_draw.py`` draws each figure the tree lacks from its committed report.

Not drawable, so kept in the tree: the figures drawn from tensors no report holds (the attention
maps of ``hmmtf analyze``), and those whose folder another result reads (the plateau study's
verdicts, the run folders under ``models/``; :mod:`ledger.results`).
"""
from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from empirical.analysis.belief_figures import plot_beliefs
from empirical.analysis.figures import (plot_offset_profiles, plot_offset_summary, plot_previous_token_probes,
                                        plot_shuffle, plot_task_state_probes)
from empirical.analysis.head_figures import plot_heads
from empirical.analysis.klmap_figures import plot_klmap
from empirical.analysis.ngram_verdict import plot_ngram_verdict
from empirical.analysis.patching_figures import plot_history_patching, plot_state_forcing
from empirical.reports.plots import (plot_calibration, plot_competence, plot_curves, plot_family_calibration,
                                     plot_in_context, plot_regime, plot_side_by_side, plot_signal, plot_training_loss)
from empirical.studies.ladder_figures import plot_learning_curves
from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.figures import (plot_loss_curves, plot_phase_diagram, plot_plateau_survival,
                                              plot_read_back)
from empirical.training.train import METRICS_FILE

CHECKOUT = Path(__file__).resolve().parents[2]
"""The checkout whose ``figures/`` the figures are drawn into."""


@dataclass(frozen=True)
class Drawing:
    """The figure ``figure`` (a file name) beside every report whose path from the checkout matches
    ``report`` (``fnmatch``: ``*`` spans folders) and for which ``holds(report, folder)``: drawn by
    ``draw(report, folder, path)``."""

    report: str
    figure: str
    draw: Callable[[dict, Path, Path], None]
    holds: Callable[[dict, Path], bool] = lambda report, folder: True


def _section(name: str) -> Callable[[dict, Path], bool]:
    """Whether a report has the section ``name`` (``hmmtf analyze --sections`` chooses them)."""
    return lambda report, folder: report.get(name) is not None


def _markov_sweep(init: str | None = None) -> Callable[[dict, Path], bool]:
    """Whether a ``results.json`` is a Markov sweep's (and ran the initialisation ``init``)."""
    return lambda report, folder: "cells" in report and (init is None or init in report["config"]["inits"])


def _sweep_config(report: dict) -> MarkovSweepConfig:
    return MarkovSweepConfig.from_dict(report["config"])


MARKOV_INITS = ("gaussian", "lowrank", "lowrank-anti")
"""The initialisations a Markov sweep may run (``--inits``), each with its loss-curve figure."""

DRAWINGS = (
    Drawing("figures/*/evaluation.json", "in_context.png", lambda report, folder, path: plot_in_context(report, path)),
    Drawing("figures/*/evaluation.json", "regime.png", lambda report, folder, path: plot_regime(report, path),
            _section("regime")),
    Drawing("figures/*/evaluation.json", "training_loss.png",
            lambda report, folder, path: plot_training_loss(folder / METRICS_FILE, report, path),
            lambda report, folder: (folder / METRICS_FILE).is_file()),
    Drawing("figures/*/competence.json", "competence.png", lambda report, folder, path: plot_competence(report, path)),
    Drawing("figures/*/hand_built.json", "hand_built_in_context.png",
            lambda report, folder, path: plot_side_by_side(report, report["history_lengths"], report["gd_steps"], path),
            _section("history_lengths")),
    Drawing("figures/*/analysis.json", "shuffle.png", lambda report, folder, path: plot_shuffle(report["shuffle"], path),
            _section("shuffle")),
    Drawing("figures/*/analysis.json", "probes_task_state.png",
            lambda report, folder, path: plot_task_state_probes(report["probes"], path), _section("probes")),
    Drawing("figures/*/analysis.json", "probes_previous_tokens.png",
            lambda report, folder, path: plot_previous_token_probes(report["probes"], report["settings"]["max_distance"],
                                                                    path), _section("probes")),
    Drawing("figures/*/analysis.json", "offset_profiles.png",
            lambda report, folder, path: plot_offset_profiles(report["offsets"], path), _section("offsets")),
    Drawing("figures/*/analysis.json", "offset_summary.png",
            lambda report, folder, path: plot_offset_summary(report["offsets"]["summary"], path), _section("offsets")),
    Drawing("figures/*/analysis.json", "patching_state_forcing.png",
            lambda report, folder, path: plot_state_forcing(report["patching"]["state_forcing"], path),
            _section("patching")),
    Drawing("figures/*/analysis.json", "patching_history.png",
            lambda report, folder, path: plot_history_patching(report["patching"]["history"], path), _section("patching")),
    Drawing("figures/*/beliefs.json", "beliefs.png", lambda report, folder, path: plot_beliefs(report, path)),
    Drawing("figures/*/klmap.json", "klmap.png", lambda report, folder, path: plot_klmap(report, path)),
    Drawing("figures/*/heads.json", "heads.png", lambda report, folder, path: plot_heads(report, path)),
    Drawing("figures/*/ngram-verdict.json", "ngram-verdict.png",
            lambda report, folder, path: plot_ngram_verdict(report, path)),
    Drawing("figures/*/curves.json", "curves.png", lambda report, folder, path: plot_curves(report, path)),
    Drawing("figures/*/signal.json", "signal.png", lambda report, folder, path: plot_signal(report, path)),
    Drawing("figures/*/family_calibration.json", "family_calibration.png",
            lambda report, folder, path: plot_family_calibration(report, path)),
    Drawing("figures/calibration/cpu-small.json", "cpu-small.png",
            lambda report, folder, path: plot_calibration(report, path)),
    Drawing("figures/*/ladder.json", "ladder_learning_curves.png",
            lambda report, folder, path: plot_learning_curves(report["points"], CHECKOUT / report["root"], path)),
    Drawing("figures/markov/*results.json", "phase_diagram.png",
            lambda report, folder, path: plot_phase_diagram(report["cells"], _sweep_config(report), path),
            _markov_sweep()),
    Drawing("figures/markov/*results.json", "read_back.png",
            lambda report, folder, path: plot_read_back(report["runs"], _sweep_config(report), path), _markov_sweep()),
    Drawing("figures/markov/*results.json", "plateau_survival.png",
            lambda report, folder, path: plot_plateau_survival(report["runs"], _sweep_config(report), path),
            _markov_sweep()),
    *(Drawing("figures/markov/*results.json", f"loss_curves_{init}.png",
              lambda report, folder, path, init=init: plot_loss_curves(report["runs"], _sweep_config(report), init, path),
              _markov_sweep(init))
      for init in MARKOV_INITS),
)
"""Every figure ``hmmtf draw`` can draw, with its report and the plotting function its command calls."""


def drawable(root: Path = CHECKOUT) -> dict[str, Drawing]:
    """``{figure path from root: its drawing}`` for every report under ``root/figures`` that a
    :class:`Drawing` matches and whose figure it holds, in path order."""
    figures: dict[str, Drawing] = {}
    reports = sorted(path.relative_to(root).as_posix() for path in (root / "figures").rglob("*.json"))
    for report_path in reports:
        matching = [drawing for drawing in DRAWINGS if fnmatch.fnmatchcase(report_path, drawing.report)]
        if not matching:
            continue
        report, folder = json.loads((root / report_path).read_text()), (root / report_path).parent
        for drawing in matching:
            if drawing.holds(report, folder):
                figures[(folder / drawing.figure).relative_to(root).as_posix()] = drawing
    return dict(sorted(figures.items()))


def draw(figure: str, drawing: Drawing, root: Path = CHECKOUT, into: Path | None = None) -> Path:
    """Draw ``figure`` (a path from ``root``) from the report beside it, at that path under ``into``
    (default: ``root``); the path written."""
    folder = (root / figure).parent
    report_path = next(report for report in sorted(folder.glob("*.json"))
                       if fnmatch.fnmatchcase(report.relative_to(root).as_posix(), drawing.report))
    path = (root if into is None else into) / figure
    path.parent.mkdir(parents=True, exist_ok=True)
    drawing.draw(json.loads(report_path.read_text()), folder, path)
    return path


def _from_checkout(figure: str) -> str:
    """The path ``figure`` (from the working directory) from the checkout's root, or as given when it
    lies outside the checkout."""
    path = Path(figure).resolve()
    return path.relative_to(CHECKOUT).as_posix() if path.is_relative_to(CHECKOUT) else figure


def run_draw(args) -> int:
    """``hmmtf draw``: draw the named figures, or every drawable one the tree lacks; ``--list`` lists them."""
    figures = drawable()
    if args.list:
        for figure in figures:
            print(f"{figure}{'' if (CHECKOUT / figure).is_file() else '  (not drawn)'}")
        return 0
    named = [_from_checkout(figure) for figure in args.figures]
    for figure, given in zip(named, args.figures):
        if figure not in figures:
            raise ValueError(f"figure: {given!r} is not a figure hmmtf draw can draw; expected one that "
                             f"'hmmtf draw --list' lists (a figure beside the report it is drawn from)")
    wanted = named or [figure for figure in figures if not (CHECKOUT / figure).is_file()]
    for figure in wanted:
        print(draw(figure, figures[figure]).relative_to(CHECKOUT))
    if not wanted:
        print("every drawable figure is in the tree; nothing drawn ('hmmtf draw FIGURE' draws one again)")
    return 0


def register(subparsers) -> None:
    """Add ``draw`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "draw", help="draw, from the committed result JSON beside them, the figures the tracked tree does not keep",
        description="Draw the figures that no page links, which the tracked tree does not keep, from the result "
                    "JSON beside them (figures/), with the plotting function their command calls: every one the "
                    "tree lacks, or those named.")
    parser.add_argument("figures", nargs="*", metavar="FIGURE",
                        help="figure paths (figures/ladder/cpu-small/shuffle.png); default: every drawable figure "
                             "the tree lacks")
    parser.add_argument("--list", action="store_true", help="list the drawable figures, marking those not drawn")
    parser.set_defaults(run=run_draw)
