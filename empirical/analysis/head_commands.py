"""``hmmtf heads CHECKPOINT --out DIR`` (registered in :mod:`hmmtf`): the head scores and the
mean-ablation test of :mod:`empirical.analysis.heads` on a checkpoint, on prompts of fresh HMMs
of its task; writes ``heads.json`` (every number, the command and the git commit) and
``heads.png`` (:func:`empirical.analysis.head_figures.plot_heads`)."""
from __future__ import annotations

from empirical.analysis.checkpoint_commands import add_checkpoint_options, run_on_checkpoint
from empirical.analysis.head_figures import plot_heads
from empirical.analysis.heads import COUNTS_FROM_ZERO, HeadsSettings, heads_report

REPORT_FILE = "heads.json"
FIGURE_FILE = "heads.png"


def summary(report: dict) -> dict:
    """The selected heads, and the KL to each reference before and after ablating them, over all positions."""
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


def run_heads(args) -> int:
    return run_on_checkpoint(args, HeadsSettings, heads_report, plot_heads, summary, REPORT_FILE, FIGURE_FILE)


def register(subparsers) -> None:
    """Add ``heads`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("heads", help="previous-token and induction scores of every head (trained and "
                                                 "random-init) and the mean-ablation of the top heads against random "
                                                 "heads, on fresh-HMM prompts")
    add_checkpoint_options(parser, HeadsSettings, COUNTS_FROM_ZERO, f"{REPORT_FILE} and {FIGURE_FILE}")
    parser.set_defaults(run=run_heads)
