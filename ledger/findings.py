"""The README's findings block: what the project found, in at most :data:`MOST` sentences, each with
its number read from the result JSONs its claims read (never typed) and links to those claims on
docs/claims.md, below the count of every verdict.

A finding is a function of the repository root and the judged outcomes (``{claim id: Outcome}``):
its words that depend on a verdict (holds or not) follow the verdict, its numbers are read from its
``sources`` with the same :class:`~ledger.documents.Doc` lookups the claims' judges use. A finding
whose source is missing says so and names the file, as a claim does ("not computed")."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ledger.claims import Outcome, Verdict
from ledger.documents import Doc
from ledger.gpu import CEILING_BOUNDS, DEPTH, DEPTH_LADDER, PLATEAU, PLATEAU_FAMILY, SCOPES, SWEEP as GPU_SWEEP
from ledger.ladder import BEATS_EVERY_PREDICTOR, CEILING_LOWER, LADDER_JSON, REGIME_MATRIX, REGIME_MODELS, \
    RegimeMatrix, RegimeModel
from ledger.markov import ABOVE, BELOW, DEFAULT_INIT, INCONTEXT, LONG_BUDGET, SWEEP as MARKOV_SWEEP, _deepest, _side
from ledger.numbers import fixed, interval, plus_minus, sig
from ledger.outcomes import judge_sections
from ledger.registry import SECTIONS
from ledger.render import PAGE, anchor, counts_sentence
from ledger.theory import REPORT, _row, _rows_starting

BLOCK = "ledger:findings"
"""The marker name of the findings block in README.md (:mod:`ledger.blocks`)."""

MOST = 12
"""The most findings the block holds (issue 69: a first screen, not a second ledger)."""

BOUND_TERMS = ("approximation |P - P_L| (Lemma 1)", "generalization |W*x - W_hat x|", "optimization (paper form)",
               "construction |W_T x - TF|")
"""The rows of ``hmmtf main``'s table that are Theorem 1's four terms, each against its own bound."""
TOTAL = "total |P - TF| <= sum of bounds"
LINEARITY = "linearization |P_L - W*x| (paper: 0)"
LEMMA1_PRIOR = "uniform"
"""The prior of the Lemma 1 fit the finding quotes (the one of docs/bounds.md's figure)."""
LAYERWISE_FIGURES = ("F2-", "F3", "F7-")
"""The regime claim templates that are the paper's layer-wise observations (Figures 2, 3 and 7)."""
CEILING_FAMILY = "paper"
"""The family of :data:`ledger.gpu.CEILING_BOUNDS` the ceiling finding quotes: the paper's."""

Sentence = Callable[[Path, dict[str, Outcome]], str]


@dataclass(frozen=True)
class Finding:
    """One line of the block: ``topic`` (its bold lead), ``claims`` (the ids it links), ``sources``
    (the result JSONs it reads) and ``sentence`` (its text, from the root and the outcomes)."""

    topic: str
    claims: tuple[str, ...]
    sources: tuple[str, ...]
    sentence: Sentence


def _load(root: Path, path: str) -> Doc:
    return Doc.load(root, path)


def _construction(root: Path, outcomes: dict[str, Outcome]) -> str:
    report = _load(root, REPORT)
    stages, output = _rows_starting(report, "stage "), _row(report, "construction |W_T x - TF|")
    rows = [*stages, output]
    exact = all(row["holds"] == row["units"] for row in rows)
    units = min(row["units"] for row in rows)
    return (f"The hand-wired transformer {'computes' if exact else 'does not compute'} what the paper says it computes, "
            f"to rounding: "
            f"each of its {len(stages)} stages within {sig(max(row['measured'] for row in stages))} of its plain-numpy "
            f"reference and its output within {sig(output['measured'])} of T explicit gradient-descent steps, on "
            f"{min(row['holds'] for row in rows)}/{units} prompts")


def _bounds(root: Path, outcomes: dict[str, Outcome]) -> str:
    report = _load(root, REPORT)
    terms, total = [_row(report, term) for term in BOUND_TERMS], _row(report, TOTAL)
    within = sum(row["holds"] == row["units"] for row in terms)
    return (f"Theorem 1 {'holds' if within == len(terms) else 'does not hold'} term by term: {within} of its "
            f"{len(terms)} terms within their bounds on every held-out HMM or prompt, and the total error at most "
            f"{sig(total['measured'])} against the bounds' sum {sig(total['bound'])} on {total['holds']}/{total['units']} "
            f"{total['over']}")


def _theory_breaks(root: Path, outcomes: dict[str, Outcome]) -> str:
    report = _load(root, REPORT)
    lemma, linear = _row(report, f"Lemma 1 smallest C ({LEMMA1_PRIOR} prior) <= fitted C"), _row(report, LINEARITY)
    return (f"Lemma 1 with one constant C {outcomes['L1-bound'].verdict.value} ({lemma['holds']}/{lemma['units']} "
            f"{lemma['over']} within the C fitted on the other half, {LEMMA1_PRIOR} prior), and P_L's linearity in the "
            f"one-hot history, assumed before it, {outcomes['A-linear'].verdict.value} ({linear['holds']}/"
            f"{linear['units']} {linear['over']} within {sig(linear['bound'])}, worst {sig(linear['measured'])})")


def _regime_change(root: Path, outcomes: dict[str, Outcome]) -> str:
    points = _load(root, LADDER_JSON)["points"]
    shapes = sorted({(p["model"]["num_layers"], p["model"]["width"]) for p in points},
                    key=lambda shape: -sum((p["model"]["num_layers"], p["model"]["width"]) == shape for p in points))
    mine = sorted((p for p in points if (p["model"]["num_layers"], p["model"]["width"]) == shapes[0]),
                  key=lambda p: p["tasks"])
    few, many = mine[0], mine[-1]
    return (f"A {shapes[0][0]}-layer x {shapes[0][1]} network trained on {few['tasks']} HMMs is "
            f"{few['memorisation_verdict']} ({few['memorisation_fraction_of_gap']:.0%} of the training gap), on "
            f"{many['tasks']} it is {many['memorisation_verdict']} ({many['memorisation_fraction_of_gap']:.0%}), the paper's "
            f"regime (the claim: {outcomes['R-regime-change'].verdict.value})")


def _row_verdicts(matrix: RegimeMatrix, template: str, outcomes: dict[str, Outcome]) -> list[Verdict]:
    """The verdicts of ``template`` on every judged network of ``matrix`` that it is made on."""
    return [outcomes[column.claims[template]].verdict for column in matrix.columns
            if column.untested is None and template in column.claims]


def _first_claims(matrix: RegimeMatrix, templates: tuple[str, ...]) -> tuple[str, ...]:
    """The id of each of ``templates`` on the first network it is judged on (the link of a row)."""
    return tuple(next(column.claims[template] for column in matrix.columns if template in column.claims)
                 for template in templates)


def _competence(root: Path, outcomes: dict[str, Outcome]) -> str:
    competent, every = (_row_verdicts(REGIME_MATRIX, template, outcomes) for template in ("competence", "beats-every-ngram"))
    return (f"{competent.count(Verdict.HOLDS)} of the {len(competent)} regime networks are competent (they beat the "
            f"in-context bigram on HMMs they never saw) and {every.count(Verdict.HOLDS)} of {len(every)} beat every "
            f"in-context n-gram on thousands of fresh-HMM prompts")


def _circuit(root: Path, outcomes: dict[str, Outcome]) -> str:
    verdicts = _row_verdicts(REGIME_MATRIX, "circuit", outcomes)
    return (f"{verdicts.count(Verdict.HOLDS)} of the {len(verdicts)} networks tested run an induction circuit: "
            f"previous-token and induction heads above a random-init twin's, whose ablation moves the model away from "
            f"the in-context bigram more than ablating as many random heads")


def _layerwise_templates(matrix: RegimeMatrix) -> tuple[str, ...]:
    return tuple(template for template in matrix.templates if template.startswith(LAYERWISE_FIGURES))


def _layerwise(root: Path, outcomes: dict[str, Outcome]) -> str:
    verdicts = [verdict for template in _layerwise_templates(REGIME_MATRIX)
                for verdict in _row_verdicts(REGIME_MATRIX, template, outcomes)]
    reached = [verdict for verdict in verdicts if verdict in (Verdict.HOLDS, Verdict.HOLDS_WITH_CAVEAT,
                                                              Verdict.NOT_REPRODUCED, Verdict.FAILS)]
    state_first = [v for v in _row_verdicts(REGIME_MATRIX, "F3a-state-first", outcomes) if v in reached]
    mostly = "mostly do not reproduce" if 2 * reached.count(Verdict.NOT_REPRODUCED) > len(reached) else "mostly hold"
    return (f"The paper's layer-wise claims (Figures 2, 3 and 7) {mostly} on these networks: of "
            f"{len(reached)} verdicts, {reached.count(Verdict.HOLDS)} hold, {reached.count(Verdict.HOLDS_WITH_CAVEAT)} hold "
            f"with caveat and {reached.count(Verdict.NOT_REPRODUCED)} are not reproduced; the hidden state is decoded "
            f"before the task on {state_first.count(Verdict.HOLDS)} of {len(state_first)}")


STATES_128 = tuple(model for model in REGIME_MODELS if model.ceiling_bound is not None)
"""The regime networks on 128-state families, whose ``competence.json`` holds the ceiling's upper bound."""


STATES_128_VERDICTS = tuple(dict.fromkeys((*(model.ngram_verdict or "" for model in STATES_128), *DEPTH_LADDER)))
"""The n-gram verdicts of every 128-state network the depth finding names: the regime models' and the
depth ladder's."""


def _run(model: RegimeModel) -> str:
    """The run's name without its folder: ``paper-2x4x64-4x``."""
    return model.name.rsplit("/", 1)[-1]


def _depth_at_128(root: Path, outcomes: dict[str, Outcome]) -> str:
    """Which networks pass the gate at 128 states (each with its depth and its distance to the
    variable-order predictor), where the competent ones lie against the ceiling's upper bound, and
    what depth changed of that distance."""
    passed, failed = [], []
    for path in STATES_128_VERDICTS:
        verdict = _load(root, path)
        run = verdict["checkpoint"].removesuffix("/checkpoint").rsplit("/", 1)[-1]
        gap = verdict["comparisons", "test_sequence", "model - variable order"]
        named = f"{run} ({verdict['model', 'num_layers']} layers, {interval(*_mean_and_interval(gap), 4)})"
        (passed if verdict["verdict"] == BEATS_EVERY_PREDICTOR else failed).append(named)
    closed = []
    for model in STATES_128:
        assert model.ceiling_bound is not None
        if outcomes[f"{model.prefix}-competence"].verdict is Verdict.HOLDS:
            share = _load(root, model.ceiling_bound)["gap_closed", "test_sequence"]
            closed.append(f"{_run(model)} closes {interval(share['fraction'], *share['interval_95'], 2)}")
    changes = [f"on {family} {interval(*_mean_and_interval(effect['minus_ceiling_bound']), 4)}, "
               f"{effect['minus_ceiling_bound']['reading']}"
               for family, entry in _load(root, DEPTH)["families"].items()
               if (effect := entry["effect"]) is not None and effect["deep"] is not None
               and effect["minus_ceiling_bound"] is not None]
    return (f"Judged against every in-context n-gram and the variable-order predictor (CTW; model - CTW on the test "
            f"sequence), {'; '.join(passed) or 'no network'} pass{'es' if len(passed) == 1 else ''} the gate, and "
            f"{'; '.join(failed) or 'none'} do{'es' if len(failed) == 1 else ''} not; "
            + (f"{' and '.join(closed)} of the window from the in-context unigram to the ceiling's upper bound; "
               if closed else "")
            + "the deepest competent network's distance to that bound minus the 2-layer network's: "
            + ("; ".join(changes) if changes else "not measured yet"))


def _mean_and_interval(value: dict) -> tuple[float, float, float]:
    return value["mean"], *value["interval_95"]


def _hand_built_128(root: Path, outcomes: dict[str, Outcome]) -> str:
    parts, networks = [], set()
    for model in STATES_128:
        assert model.ceiling_bound is not None
        competence = _load(root, model.ceiling_bound)
        losses = competence["hand_built", "test_sequence"]
        uniform = math.log(competence["task", "mixture_spec", "num_tokens"])
        hand_built = losses["hand-built"]["loss"]
        network = competence["hand_built_network"]
        networks.add(f"L = {network['history_length']}, T = {network['gd_steps']}")
        parts.append(f"{fixed(hand_built)} nats beside {_run(model)}'s {fixed(losses['model']['loss'])}, "
                     f"{'worse' if hand_built > uniform else 'better'} than the uniform predictor's {fixed(uniform)}")
    return (f"The hand-built network ({'; '.join(sorted(networks))}) on the 128-state test sequences: "
            + "; ".join(parts))


def _escape(escape: dict) -> str:
    if escape["escaped"]:
        return f"({fixed(escape['range'][0], 3)}, {fixed(escape['range'][1], 3)}]x"
    return f"not by {fixed(escape['after'], 3)}x"


def _plateau(root: Path, outcomes: dict[str, Outcome]) -> str:
    sweep, study = _load(root, GPU_SWEEP), _load(root, PLATEAU)
    runs = {name: run for name, run in sweep["runs"].items() if run["verdict"] is not None}
    best = min(runs, key=lambda name: runs[name]["verdict"]["losses"]["test_sequence"]["model"])
    gap = runs[best]["verdict"]["comparisons"]["test_sequence"]["model - ngram 3"]
    rows = [row for row in study["arms"] if row["family"] == PLATEAU_FAMILY]
    baseline = next(row for row in rows if row["arm"] == study["baseline"])
    earlier = [row for row in rows if row.get("against_baseline") == "earlier"]
    fastest = min(earlier, key=lambda row: row["escape"]["range"][1], default=None)
    shape = baseline["runs"][0]["model"]
    past = not baseline["escape"]["escaped"] or baseline["escape"]["range"][0] >= 1
    return (f"The counting plateau {'lasts past' if past else 'ends within'} the paper's budget: the paper-size "
            f"network trained for that budget on a "
            f"GPU stays {interval(gap['mean'], *gap['interval_95'])} nats behind the in-context trigram, and a "
            f"{shape['num_layers']} x {shape['num_heads']} x {shape['width']} first beats the in-context bigram at "
            f"{_escape(baseline['escape'])} the budget with the {study['baseline']} recipe"
            + ("" if fastest is None else f", at {_escape(fastest['escape'])} with the {fastest['arm']} arm"))


def _ceiling(root: Path, outcomes: dict[str, Outcome]) -> str:
    bounds = _load(root, CEILING_BOUNDS[CEILING_FAMILY])
    lower = _load(root, CEILING_LOWER[CEILING_FAMILY])
    against = {scope: bounds["scopes", scope, "bound_minus", "ngram 3"] for scope in SCOPES}
    below = all(value["upper_95"] < 0 for value in against.values())
    setting = lower["scopes", "test_sequence", "settings", lower["scopes", "largest_setting"]]
    oracle = setting["oracle_minus_lower"]
    low, high = oracle["interval_95"]
    relation = ("level with the oracle" if low <= 0 <= high else f"{fixed(-oracle['mean'])} above the oracle"
                if high < 0 else f"{fixed(oracle['mean'])} below the oracle")
    return (f"The Bayes ceiling of the paper's family (S = {bounds['prior', 'num_states']}) "
            f"{'lies' if below else 'is not shown to lie'} below the in-context trigram: an upper bound on it minus the "
            f"trigram is " + " and ".join(f"{plus_minus(value['mean'], value['stderr'], 4)} nats ({scope.replace('_', ' ')})"
                                          for scope, value in against.items())
            + f"; from below, reverse annealing from the generating HMM bounds it at "
              f"{plus_minus(setting['lower']['mean'], setting['lower']['stderr'])} on the test sequence, {relation}, "
              f"so the bracket is {fixed(setting['width_to_collapsed_smc'], 2)} nats wide")


def _markov(root: Path, outcomes: dict[str, Outcome]) -> str:
    sweep, long_budget, study = _load(root, MARKOV_SWEEP), _load(root, LONG_BUDGET), _load(root, INCONTEXT)
    above, below = _side(sweep, "1-layer-tied", ABOVE), _side(sweep, "1-layer-tied", BELOW)
    later = _side(long_budget, "1-layer-tied", ABOVE)
    name, deepest = _deepest(study)
    gap = deepest["gap_closed"]
    trap = outcomes["M1-unigram-trap"].verdict is Verdict.HOLDS
    stays = outcomes["M5-local-minimum"].verdict is Verdict.HOLDS
    return (f"The companion's unigram trap {'reproduces' if trap else 'does not reproduce'} "
            f"({above['trapped']}/{above['seeds']} single-layer tied runs trapped at {ABOVE}, {below['trapped']}/"
            f"{below['seeds']} at {BELOW}, {DEFAULT_INIT} init) but {'is' if stays else 'is not'} a bad local minimum "
            f"({later['trapped']}/{later['seeds']} trapped after {long_budget['config', 'steps']} steps), and a "
            f"{name} model closes {interval(gap['fraction'], *gap['interval_95'], 2)} of the gap to Bayes with an "
            f"induction head")


STATES_128_CLAIMS = tuple(f"{model.prefix}-competence" for model in STATES_128)

FINDINGS: tuple[Finding, ...] = (
    Finding("The construction", ("C-gd", "T1-construction"), (REPORT,), _construction),
    Finding("The bounds", ("T1-total",), (REPORT,), _bounds),
    Finding("Lemma 1's constant and P_L's linearity", ("L1-bound", "A-linear"), (REPORT,), _theory_breaks),
    Finding("The regime", ("R-regime-change",), (LADDER_JSON,), _regime_change),
    Finding("Competent networks", _first_claims(REGIME_MATRIX, ("competence", "beats-every-ngram")), (), _competence),
    Finding("Their circuit", _first_claims(REGIME_MATRIX, ("circuit",)), (), _circuit),
    Finding("The layer-wise claims", (f"{REGIME_MODELS[0].prefix}-F3a-state-first",), (), _layerwise),
    Finding("Depth at 128 states", ("G-depth-competence", "D-depth", *STATES_128_CLAIMS),
            (*STATES_128_VERDICTS, DEPTH, *(model.ceiling_bound or "" for model in STATES_128)), _depth_at_128),
    Finding("The hand-built network at 128 states", STATES_128_CLAIMS,
            tuple(model.ceiling_bound or "" for model in STATES_128), _hand_built_128),
    Finding("The plateau", ("G-paper-size-competence", "G-plateau-study"), (GPU_SWEEP, PLATEAU), _plateau),
    Finding("The ceiling", ("G-ceiling-paper",), (CEILING_BOUNDS[CEILING_FAMILY], CEILING_LOWER[CEILING_FAMILY]),
            _ceiling),
    Finding("Attention with Markov", ("M1-unigram-trap", "M5-local-minimum", "M7-induction"),
            (MARKOV_SWEEP, LONG_BUDGET, INCONTEXT), _markov),
)
if len(FINDINGS) > MOST:
    raise ValueError(f"FINDINGS: {len(FINDINGS)} findings; expected at most {MOST}")


def _links(claims: tuple[str, ...]) -> str:
    return ", ".join(f"[{claim}]({PAGE}#{anchor(claim)})" for claim in claims)


def finding_line(finding: Finding, root: Path, outcomes: dict[str, Outcome]) -> str:
    """``- **Topic.** Sentence ([CLAIM](docs/claims.md#claim), ...).``; a missing source named instead."""
    missing = [path for path in finding.sources if not (root / path).is_file()]
    text = (f"not computed: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing" if missing
            else finding.sentence(root, outcomes))
    return f"- **{finding.topic}.** {text} ({_links(finding.claims)})."


def findings_block(root: Path, findings: tuple[Finding, ...] = FINDINGS) -> str:
    """The README's findings block for the results under ``root``: the verdict counts, then a line per finding."""
    rows = [row for _, section_rows in judge_sections(SECTIONS, root) for row in section_rows]
    outcomes = {row.claim.id: row.outcome for row in rows}
    return "\n".join([
        f"**What the project found**, generated by `hmmtf ledger` from the result JSONs under `figures/` "
        f"({counts_sentence(rows)}; every claim with its rule, number and command: [{PAGE}]({PAGE}), the verdicts "
        f"at a glance: [docs/results.md](docs/results.md)):",
        "",
        *(finding_line(finding, root, outcomes) for finding in findings),
    ])
