"""``hmmtf ngram-verdict CHECKPOINT [--out DIR]``: the competence rule's comparison of
:mod:`empirical.analysis.ngram_verdict` on a checkpoint (its docstring states the decision rule)."""
from __future__ import annotations

from empirical.analysis.ngram_verdict import NgramVerdictSettings, ngram_verdict_report, plot_ngram_verdict
from hmmtf.commands.analyze import add_measure_command

HELP = ("the model against the in-context 1/2/3-grams on thousands of fresh-HMM prompts (the competence rule, "
        "standard errors clustered by HMM, no SMC ceiling; optionally an upper bound on it beside them)")


def summary(report: dict) -> dict:
    """What the command prints: the verdict and the intervals of model minus each n-gram."""
    return {"verdict": report["verdict"],
            "model_minus": {scope: {name.removeprefix("model - "): [round(v, 5) for v in value["interval_95"]]
                                    for name, value in by_name.items()}
                            for scope, by_name in report["comparisons"].items()}}


def register(subparsers) -> None:
    """Add ``ngram-verdict`` to the ``hmmtf`` parser."""
    add_measure_command(subparsers, "ngram-verdict", HELP, NgramVerdictSettings, ("ceiling_replicates",),
                        ngram_verdict_report, plot_ngram_verdict, summary,
                        at_least={"fresh_tasks": (2, "; at least 2: the intervals are clustered by HMM, and one HMM "
                                                     "is one cluster, whose spread is zero")})
