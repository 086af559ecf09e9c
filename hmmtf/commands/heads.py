"""``hmmtf heads CHECKPOINT [--out DIR]``: the head scores and the
mean-ablation test of :mod:`empirical.analysis.heads` on a checkpoint, on prompts of fresh HMMs
of its task; writes ``heads.json`` (every number, the command and the git commit) and
``heads.png`` (:func:`empirical.analysis.head_figures.plot_heads`)."""
from __future__ import annotations

from hmmtf.commands.analyze import add_measure_command
from empirical.analysis.head_figures import plot_heads
from empirical.analysis.heads import COUNTS_FROM_ZERO, HeadsSettings, heads_report

HELP = ("previous-token and induction scores of every head (trained and random-init) and the mean-ablation of the "
        "top heads against random heads, on fresh-HMM prompts")


def summary(report: dict) -> dict:
    """What the command prints: the selected heads, and per group and reference the KL over all
    positions before ablating, its change and the random heads' change."""
    ablation = report["ablation"]
    return {
        "selection": {group: [f"layer {h['layer']} head {h['head']}" for h in chosen["heads"]]
                      for group, chosen in report["selection"].items()},
        "kl_all_positions": {group: {name: {"before": round(ablation["before"]["all_positions"][name]["mean"], 4),
                                            "change": round(values["change"]["mean"], 4),
                                            "random_change": round(values["random_change"]["mean"], 4)}
                                     for name, values in entry["all_positions"].items()}
                             for group, entry in ablation["groups"].items()},
    }


def register(subparsers) -> None:
    """Add ``heads`` to the ``hmmtf`` parser."""
    add_measure_command(subparsers, "heads", HELP, HeadsSettings, COUNTS_FROM_ZERO, heads_report, plot_heads, summary)
