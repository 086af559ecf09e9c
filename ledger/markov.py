"""Claims of the companion result, "Attention with Markov" (Makkuva et al., arXiv 2402.04161):
single-layer transformers with tied embeddings trained on binary Markov chains with p + q > 1
end at the unigram (stationary) predictor, deeper or untied ones reach the Markov kernel.

Judged from ``hmmtf markov-sweep``'s ``results.json``: its ``sides`` pool the seeds of each
(initialisation, architecture, side of p + q = 1) with the trapped count and its 95% interval;
"trapped" is the decision rule recorded in the JSON's ``criterion`` (docs/markov.md). Verdicts read
the default initialisation (``gaussian``, as in the companion paper); the other initialisations
appear in the numbers and turn a pass into a caveat when they disagree.
"""
from __future__ import annotations

from ledger.claims import Claim, Outcome, Section, Verdict
from ledger.documents import Doc, LedgerError
from ledger.numbers import fixed

SWEEP = "figures/markov/results.json"
LONG_BUDGET = "figures/markov/long-budget/results.json"
DEFAULT_INIT = "gaussian"
ABOVE, BELOW = "p + q > 1", "p + q < 1"


def _side(sweep: Doc, architecture: str, side: str, init: str = DEFAULT_INIT) -> dict:
    for record in sweep["sides"]:
        if (record["init"], record["architecture"], record["side"]) == (init, architecture, side):
            return record
    raise LedgerError(f"{sweep.path}: no side ({init}, {architecture}, {side}) in 'sides'; expected the sweep to "
                      f"train {architecture} with the {init} initialisation on {side}")


def _count(record: dict) -> str:
    low, high = record["trapped_interval"]
    return f"{record['trapped']}/{record['seeds']} [{fixed(low, 2)}, {fixed(high, 2)}]"


def _others(sweep: Doc, architecture: str, side: str) -> dict[str, dict]:
    """The same architecture and side under the sweep's other initialisations."""
    return {init: _side(sweep, architecture, side, init) for init in sweep["config", "inits"] if init != DEFAULT_INIT}


def _scale(sweep: Doc) -> str:
    config = sweep["config"]
    return (f"binary chains p in {config['p_values']}, q in {config['q_values']}; width {config['width']}, "
            f"{config['seeds']} seeds per cell, {config['steps']} steps, batch {config['batch_size']} x "
            f"{config['sequence_length']} tokens")


def _trapped(sweep: Doc, architecture: str, side: str) -> str:
    others = _others(sweep, architecture, side)
    return (f"{architecture}, {side}: trapped {_count(_side(sweep, architecture, side))} ({DEFAULT_INIT})"
            + "".join(f"; {init}: {_count(record)}" for init, record in others.items()))


def trapped_above(sweep: Doc) -> Outcome:
    record = _side(sweep, "1-layer-tied", ABOVE)
    ok = record["trapped_interval"][0] > 0
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED, _trapped(sweep, "1-layer-tied", ABOVE),
                   f"the trapped fraction's interval {'excludes' if ok else 'includes'} 0", _scale(sweep))


def _never_trapped(sweep: Doc, architecture: str, sides: tuple[str, ...]) -> Outcome:
    """Holds when the default initialisation traps no seed on ``sides``; a caveat when another does."""
    default = sum(_side(sweep, architecture, side)["trapped"] for side in sides)
    others = {init: sum(_side(sweep, architecture, side, init)["trapped"] for side in sides)
              for init in sweep["config", "inits"] if init != DEFAULT_INIT}
    trapping = [f"{init} ({count})" for init, count in others.items() if count]
    verdict = Verdict.NOT_REPRODUCED if default else Verdict.HOLDS_WITH_CAVEAT if trapping else Verdict.HOLDS
    reason = (f"{default} {DEFAULT_INIT} runs trapped" if default else
              f"no {DEFAULT_INIT} run trapped; trapped under " + ", ".join(trapping) if trapping else "no run trapped")
    return Outcome(verdict, "; ".join(_trapped(sweep, architecture, side) for side in sides), reason, _scale(sweep))


def free_below(sweep: Doc) -> Outcome:
    return _never_trapped(sweep, "1-layer-tied", (BELOW,))


def untied_free(sweep: Doc) -> Outcome:
    return _never_trapped(sweep, "1-layer-untied", (BELOW, ABOVE))


def deeper_free(sweep: Doc) -> Outcome:
    return _never_trapped(sweep, "2-layer-tied", (BELOW, ABOVE))


def stays_trapped(sweep: Doc, long_budget: Doc) -> Outcome:
    short, long = _side(sweep, "1-layer-tied", ABOVE), _side(long_budget, "1-layer-tied", ABOVE)
    ok = long["trapped_interval"][0] > 0
    others = "".join(f"; {init}: {_count(_side(sweep, '1-layer-tied', ABOVE, init))} -> "
                     f"{_count(_side(long_budget, '1-layer-tied', ABOVE, init))}"
                     for init in long_budget["config", "inits"] if init != DEFAULT_INIT)
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   f"1-layer-tied, {ABOVE}, trapped after {sweep['config', 'steps']} steps {_count(short)}, after "
                   f"{long_budget['config', 'steps']} steps {_count(long)} ({DEFAULT_INIT}){others}",
                   f"after {long_budget['config', 'steps']} steps the trapped fraction's interval "
                   f"{'excludes' if ok else 'includes'} 0", _scale(long_budget))


def depends_on_init(sweep: Doc) -> Outcome:
    cells: dict[tuple, dict[str, dict]] = {}
    for cell in sweep["cells"]:
        if cell["p"] + cell["q"] > 1:
            cells.setdefault((cell["architecture"], cell["p"], cell["q"]), {})[cell["init"]] = cell
    separated = []
    for (architecture, p, q), by_init in cells.items():
        for first, a in by_init.items():
            for second, b in by_init.items():
                if a["trapped_interval"][0] > b["trapped_interval"][1]:
                    separated.append(f"{architecture} at ({p:g}, {q:g}): {first} {_count(a)} vs {second} {_count(b)}")
    inits = sweep["config", "inits"]
    if len(inits) < 2:
        return Outcome(Verdict.UNTESTED, f"one initialisation ({inits[0]})", "the sweep compares no initialisations",
                       _scale(sweep))
    return Outcome(Verdict.HOLDS if separated else Verdict.NOT_REPRODUCED,
                   "; ".join(separated) or f"no p + q > 1 cell separates the initialisations {', '.join(inits)}",
                   f"{len(separated)} (architecture, cell) pairs of initialisations with disjoint trapped intervals",
                   _scale(sweep))


MARKOV = Section("Companion: Attention with Markov (Makkuva et al.)", "Markov", (
    Claim("M1-unigram-trap", "A single-layer transformer with tied embeddings, trained on a chain with p + q > 1, "
          "ends at the unigram (stationary) predictor in a fraction of seeds.",
          "trapped seeds (excess loss over the entropy rate beyond the bigram predictor's sampling error) pooled "
          "over the p + q > 1 cells", sources=(SWEEP,), judge=trapped_above, figure="figures/markov/phase_diagram.png",
          rule="holds when the 95% interval of the trapped fraction (default initialisation) lies above 0"),
    Claim("M2-no-trap-below", "The same model reaches the Markov kernel when p + q < 1.",
          "trapped seeds over the p + q < 1 cells", sources=(SWEEP,), judge=free_below,
          figure="figures/markov/phase_diagram.png",
          rule="holds when no seed is trapped (default initialisation); with a caveat when another initialisation "
               "traps some; not reproduced when the default does"),
    Claim("M3-untied", "Without tied embeddings the single layer reaches the kernel on both sides.",
          "trapped seeds of 1-layer-untied", sources=(SWEEP,), judge=untied_free, figure="figures/markov/phase_diagram.png",
          rule="holds when no seed is trapped (default initialisation); with a caveat when another initialisation "
               "traps some; not reproduced when the default does"),
    Claim("M4-two-layers", "Two layers reach the kernel on both sides.",
          "trapped seeds of 2-layer-tied", sources=(SWEEP,), judge=deeper_free, figure="figures/markov/phase_diagram.png",
          rule="holds when no seed is trapped (default initialisation); with a caveat when another initialisation "
               "traps some; not reproduced when the default does"),
    Claim("M5-local-minimum", "The unigram solution is a bad local minimum: trapped runs stay trapped.",
          "trapped seeds of 1-layer-tied at p + q > 1 after the sweep's budget and after a longer one",
          sources=(SWEEP, LONG_BUDGET),
          judge=stays_trapped, figure="figures/markov/long-budget/plateau_survival.png",
          rule="holds when the trapped fraction's 95% interval after the long budget lies above 0; not reproduced "
               "otherwise (the trap is a plateau)"),
    Claim("M6-initialisation", "Whether training ends at the unigram or the bigram solution depends on the "
          "initialisation (follow-up of the companion paper).",
          "trapped seeds per p + q > 1 cell under each initialisation (Gaussian, aligned and anti-aligned rank one)",
          sources=(SWEEP,), judge=depends_on_init, figure="figures/markov/phase_diagram.png",
          rule="holds when, for some architecture and p + q > 1 cell, one initialisation's trapped interval lies "
               "entirely above another's"),
    Claim("M7-induction", "Two or more layers estimate an in-context kernel with an induction head.",
          "nothing yet", pending=Verdict.NOT_COMPUTED,
          pending_reason="the in-context variant (a new kernel per sequence) is not run; with one fixed chain nothing "
                         "rewards copying from the context (docs/markov.md)"),
))
