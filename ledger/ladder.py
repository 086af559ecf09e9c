"""The regime ladder (issue 15): the Section 2 claims measured in the paper's regime, and the
regime change itself.

The paper's network sees each of its 8192 HMMs about 16 times and must infer the task in context;
cpu-small's sees each of 8 HMMs 12,000 times and can memorise them. The ladder trains the same
data format at 8, 64, 1024 and 8192 tasks with two RoFormers (``tasks-N-small``, 4 layers, and
``tasks-N-deep``, 8 layers); ``hmmtf ladder`` gathers the points under ``figures/ladder/POINT/``
into ``figures/ladder/ladder.json``. The claims below read:

* the regime model, ``tasks-8192-deep`` (the paper's task count, the deeper model): its point's
  ``evaluation.json`` and ``analysis.json`` (shuffle and probes) and ``figures/regime/`` (attention
  and patching), judged by the same judges as cpu-small's claims (:mod:`ledger.observations`);
* the whole ladder (``ladder.json``): where each model memorises and where it infers in context.
"""
from __future__ import annotations

from ledger.claims import Claim, Outcome, Section, Verdict
from ledger.documents import Doc
from ledger.observations import (
    falls_with_distance,
    history_heads,
    in_context,
    nearby_used,
    peak_later,
    rise_then_fall,
    shuffle,
    state_before_task,
    state_used,
)

REGIME_POINT = "figures/ladder/tasks-8192-deep"
REGIME_EVALUATION = f"{REGIME_POINT}/evaluation.json"
REGIME_ANALYSIS = f"{REGIME_POINT}/analysis.json"
REGIME_EXTRA = "figures/regime/analysis.json"
LADDER_JSON = "figures/ladder/ladder.json"


def regime_change(ladder: Doc) -> Outcome:
    """Every model memorises at its fewest tasks and infers in context at its most."""
    points = ladder["points"]
    models = sorted({(p["model"]["num_layers"], p["model"]["width"]) for p in points})
    ends, parts = [], []
    for layers, width in models:
        mine = sorted((p for p in points if (p["model"]["num_layers"], p["model"]["width"]) == (layers, width)),
                      key=lambda p: p["tasks"])
        few, many = mine[0], mine[-1]
        ends.append(few["memorisation_verdict"] == "memorising" and many["memorisation_verdict"] == "in context")
        parts.append(f"{layers} layers x {width}: " + ", ".join(
            f"{p['tasks']} tasks {p['memorisation_fraction_of_gap']:.0%} ({p['memorisation_verdict']})" for p in mine))
    verdict = Verdict.HOLDS if all(ends) else Verdict.HOLDS_WITH_CAVEAT if any(ends) else Verdict.NOT_REPRODUCED
    return Outcome(verdict, "memorisation (fraction of the training gap, verdict) by task count: " + "; ".join(parts),
                   f"{sum(ends)} of {len(ends)} models memorise at their fewest tasks and infer in context at their most",
                   f"the regime ladder, {len(points)} trained points")


REGIME_SCALE = "on tasks-8192-deep (the paper's 8192 tasks, 8 layers), "

LADDER = Section("The paper's regime: 8192 tasks inferred in context (the regime ladder)", "Regime", (
    Claim("R-regime-change", "A network trained on few HMMs memorises them; on thousands it infers the task in "
          "context, as the paper's must (8192 HMMs, each seen about 16 times).",
          "the regime diagnostic (fresh minus training excess over the oracle) of every ladder point",
          sources=(LADDER_JSON,), judge=regime_change, figure="figures/ladder/ladder_regime.png",
          rule="holds when every model is 'memorising' at its fewest tasks and 'in context' at its most "
               "(memorisation_verdict, empirical/regime.py)"),
    Claim("R-F1-in-context", "Figure 1's network learns in context (the paper's regime).",
          REGIME_SCALE + "the regime diagnostic", sources=(REGIME_EVALUATION,), judge=in_context,
          figure=f"{REGIME_POINT}/regime.png",
          rule="memorisation_verdict: 'in context' holds; otherwise not reproduced"),
    Claim("R-F2-shuffle", "Upper layers are position-independent (Figure 2), in the paper's regime.",
          REGIME_SCALE + "the shuffle metric, lower vs upper half of the layers", sources=(REGIME_ANALYSIS,),
          judge=shuffle, figure="figures/ladder/ladder_claim1.png",
          rule="locality_order, as F2-shuffle"),
    Claim("R-F3a-state-first", "The hidden state is identified before the task (Figure 3a), in the paper's regime.",
          REGIME_SCALE + "task and state probes against their Bayes-optimal ceilings", sources=(REGIME_ANALYSIS,),
          judge=state_before_task, figure="figures/ladder/ladder_claim2.png",
          rule="decoding_order, as F3a-state-first"),
    Claim("R-F3a-state-used", "Lower layers carry the hidden state causally, in the paper's regime.",
          REGIME_SCALE + "state forcing against four controls", sources=(REGIME_EXTRA,), judge=state_used,
          figure="figures/regime/patching_state_forcing.png", rule="uses_state, as F3a-state-used"),
    Claim("R-F3b-distance", "Previous tokens are decoded worse the further back (Figure 3b), in the paper's regime.",
          REGIME_SCALE + "o_{t-k} probes", sources=(REGIME_ANALYSIS,), judge=falls_with_distance,
          figure="figures/ladder/ladder_claim3.png", rule="falls_with_k, as F3b-distance"),
    Claim("R-F3b-nearby-used", "The prediction relies on nearby tokens (Figure 3b, causally), in the paper's regime.",
          REGIME_SCALE + "history patching", sources=(REGIME_EXTRA,), judge=nearby_used,
          figure="figures/regime/patching_history.png", rule="as F3b-nearby-used"),
    Claim("R-F3b-rise-fall", "Each previous-token curve rises then falls, in the paper's regime.",
          REGIME_SCALE + "o_{t-k} probes", sources=(REGIME_ANALYSIS,), judge=rise_then_fall,
          figure="figures/ladder/ladder_claim3.png", rule="rise_then_fall, as F3b-rise-fall"),
    Claim("R-F3b-peak-later", "The peak moves up with the distance, in the paper's regime.",
          REGIME_SCALE + "o_{t-k} probes", sources=(REGIME_ANALYSIS,), judge=peak_later,
          figure="figures/ladder/ladder_claim3.png", rule="peaks_later, as F3b-peak-later"),
    Claim("R-F7-history-heads", "Trained heads attend like the history layers (Figure 7), in the paper's regime.",
          REGIME_SCALE + "matching score of the best trained head to each hand-built history layer",
          sources=(REGIME_EXTRA,), judge=history_heads, figure="figures/regime/attention_hand_built_vs_trained.png",
          rule="as F7-history-heads"),
))
