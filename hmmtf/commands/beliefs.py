"""``hmmtf beliefs CHECKPOINT [--out DIR]``: the belief-state probes of
:mod:`empirical.analysis.beliefs` on a checkpoint, on prompts of fresh HMMs of its task; writes
``beliefs.json`` (every number, the command and the git commit) and ``beliefs.png``
(:func:`empirical.analysis.belief_figures.plot_beliefs`)."""
from __future__ import annotations

from empirical.analysis.belief_figures import plot_beliefs
from empirical.analysis.beliefs import COUNTS_FROM_ZERO, BeliefSettings, beliefs_report
from hmmtf.commands.analyze import add_measure_command


def summary(report: dict) -> dict:
    """The held-out R^2 of every probe, by layer."""
    return {"held_out_r2_by_layer": {network: {target: [round(results[target]["r2"], 3) for results in by_layer.values()]
                                               for target in report["targets"]}
                                     for network, by_layer in report["probes"].items()}}


def register(subparsers) -> None:
    """Add ``beliefs`` to the ``hmmtf`` parser."""
    add_measure_command(subparsers, "beliefs", "linear (ridge) probes per layer to the exact belief of each prompt's "
                        "HMM (its implied next-token distribution, sorted probabilities, entropy), to the "
                        "prior-predictive ceiling and to the in-context n-grams, with shuffled-target and "
                        "random-init controls, on fresh-HMM prompts", BeliefSettings, COUNTS_FROM_ZERO,
                        beliefs_report, plot_beliefs, summary)
