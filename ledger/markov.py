"""Claims of the companion result, "Attention with Markov" (Makkuva et al., arXiv 2402.04161):
single-layer transformers with tied embeddings trained on binary Markov chains with p + q > 1
end at the unigram (stationary) predictor, deeper or untied ones reach the Markov kernel.

Judged from ``hmmtf markov-sweep``'s ``results.json``: its ``sides`` pool the seeds of each
(initialisation, architecture, side of p + q = 1) with the trapped count and its 95% interval;
"trapped" is the decision rule recorded in the JSON's ``criterion`` (docs/markov.md). Verdicts read
the default initialisation (``gaussian``, as in the companion paper); the other initialisations
appear in the numbers and turn a pass into a caveat when they disagree.

M7, the in-context variant (a fresh kernel per sequence), is judged from ``hmmtf
markov-incontext``'s ``results.json`` (:mod:`empirical.studies.markov.incontext`).
"""
from __future__ import annotations

from ledger.claims import Claim, Outcome, Section, Verdict
from ledger.documents import Doc, LedgerError
from ledger.numbers import fixed, interval

SWEEP = "figures/markov/results.json"
INCONTEXT = "figures/markov/incontext/results.json"
MIN_GAP_CLOSED = 0.8
"""M7: the smallest lower 95% bound of the gap closed that counts as estimating the kernel."""
MIN_INDUCTION_EXCESS = 0.2
"""M7: the smallest induction score over chance (attention mass) that counts as an induction head."""
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


def _deepest(study: Doc) -> tuple[str, dict]:
    depths = study["config", "depths"]
    if max(depths) < 2:
        raise LedgerError(f"{study.path}: depths {depths}; expected a model with 2 or more layers")
    name = f"{max(depths)}-layer"
    return name, study["models", name]


def induction_in_context(study: Doc) -> Outcome:
    """M7: the rule of the claim, read from ``hmmtf markov-incontext``'s ``results.json``."""
    name, deepest = _deepest(study)
    gap = deepest["gap_closed"]
    excess, control = deepest["largest_excess"]["induction"], deepest["random_init_largest_excess"]["induction"]
    versus_random = deepest["ablation"]["induction"]["bayes"]["minus_random"]
    checks = {
        f"gap closed {interval(gap['fraction'], *gap['interval_95'], 2)} "
        f"{'>=' if gap['interval_95'][0] >= MIN_GAP_CLOSED else '<'} {MIN_GAP_CLOSED}": gap["interval_95"][0] >= MIN_GAP_CLOSED,
        f"largest induction excess {fixed(excess, 2)} (random init {fixed(control, 2)})":
            excess >= MIN_INDUCTION_EXCESS and excess > control,
        f"ablation minus random heads, KL to Bayes {interval(versus_random['mean'], *versus_random['interval_95'], 4)}":
            versus_random["interval_95"][0] > 0,
    }
    shallow = [f"{depth}-layer closes {fixed(study['models', f'{depth}-layer', 'gap_closed', 'fraction'], 2)}"
               for depth in study["config", "depths"] if depth < 2]
    config = study["config"]
    failed = [text for text, ok in checks.items() if not ok]
    return Outcome(Verdict.NOT_REPRODUCED if failed else Verdict.HOLDS,
                   f"{name}: " + "; ".join(checks) + "".join(f"; {text}" for text in shallow),
                   "fails: " + "; ".join(failed) if failed else "all three parts of the rule hold",
                   f"{config['num_tokens']} tokens, Dirichlet({config['concentration']:g}) rows, "
                   f"{config['eval_sequences']} held-out sequences of {config['sequence_length']}; width "
                   f"{config['width']}, {config['num_heads']} heads, {config['steps']} steps x {config['batch_size']}")


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
          "on chains with a fresh Dirichlet kernel per sequence: the fraction of the in-context unigram's excess "
          "over the Bayes predictor the deepest model closes, its largest order-1 induction score over chance "
          "(random-init control), and the change in KL(Bayes || model) when its top induction heads are "
          "mean-ablated, against as many random heads", sources=(INCONTEXT,), judge=induction_in_context,
          figure="figures/markov/incontext/incontext.png",
          rule=f"holds when the deepest model (>= 2 layers) closes at least {MIN_GAP_CLOSED} of the gap (lower 95% "
               f"bound), has a head whose induction score exceeds chance by at least {MIN_INDUCTION_EXCESS} and "
               f"exceeds the random-init model's largest excess, and ablating its top induction heads moves it "
               f"further from the Bayes predictor than as many random heads (95% interval of the difference above "
               f"0); not reproduced when any of the three fails"),
))
