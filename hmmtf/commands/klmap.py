"""``hmmtf klmap CHECKPOINT [--out DIR]``: the KL map of
:mod:`empirical.analysis.klmap` (the trained model, the hand-built network, ``P_L``, the in-context
n-grams, the ceiling and the oracle, pairwise on the same fresh-HMM prompts) on a checkpoint;
writes ``klmap.json`` (every number, the command and the git commit) and ``klmap.png``
(:func:`empirical.analysis.klmap_figures.plot_klmap`)."""
from __future__ import annotations

from hmmtf.commands.analyze import add_measure_command
from empirical.analysis.klmap import COUNTS_FROM_ZERO, KLMapSettings, klmap_report
from empirical.analysis.klmap_figures import plot_klmap

HELP = ("pairwise KL between the trained model, the hand-built network (L = 1, 2, 3), P_L, the in-context n-grams, "
        "the ceiling and the oracle on the same fresh-HMM prompts, and the model's nearest predictor")


def summary(report: dict) -> dict:
    """What the command prints: per scope, the model's nearest predictor in both directions with
    the 95% interval of the second nearest's margin over it, and every predictor's loss."""
    def nearest(entry: dict) -> dict:
        return {"nearest": entry["nearest"], "kl": round(entry["kl"]["mean"], 4), "second": entry["second"],
                "second_minus_nearest_95": [round(end, 4) for end in entry["second_minus_nearest"]["interval_95"]]}

    return {scope: {"model_as_row": nearest(section["placement"]["as_row"]),
                    "model_as_column": nearest(section["placement"]["as_column"]),
                    "loss": {name: round(entry["mean"], 4) for name, entry in section["loss"].items()}}
            for scope, section in report["scopes"].items()}


def register(subparsers) -> None:
    """Add ``klmap`` to the ``hmmtf`` parser."""
    add_measure_command(subparsers, "klmap", HELP, KLMapSettings, COUNTS_FROM_ZERO, klmap_report, plot_klmap, summary)
