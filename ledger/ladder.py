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

The same claims on the shipped regime models (:data:`REGIME_MODELS`) are re-judged in
:data:`REGIME_MODEL_SECTION`; :data:`REGIME_MATRIX` lays all of them out for the README, a row per
claim and a column per network, with a column for the paper's network that no result covers yet.

Competence before mechanism (``docs/empirical.md``, "Competence"): a claim about the regime
model's layers, heads, probes or patching is judged only when that model's ``competence.json``
says it beats the in-context bigram on fresh HMMs (:data:`empirical.yardsticks.competence.COMPETENT`);
at 128 states, where no prior-predictive ceiling exists (so no ``competence.json``), its
``ngram-verdict.json`` says so instead, on 4096 prompts.
Otherwise the claim is **not judged**: its number is still shown, with what its rule would have
said, but a verdict on a network that only counts tokens says nothing about the paper's network.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from ledger.claims import Claim, Judge, Outcome, Section, Verdict
from ledger.documents import Doc, LedgerError
from ledger.numbers import fixed, interval, listed
from ledger.observations import (
    falls_with_distance,
    history_heads,
    in_context,
    nearby_used,
    peak_later,
    rise_then_fall,
    scale,
    shuffle,
    state_before_task,
    state_used,
)

REGIME_NETWORK = "tasks-8192-deep"
REGIME_POINT = f"figures/ladder/{REGIME_NETWORK}"
REGIME_EVALUATION = f"{REGIME_POINT}/evaluation.json"
REGIME_ANALYSIS = f"{REGIME_POINT}/analysis.json"
REGIME_EXTRA = "figures/regime/analysis.json"
REGIME_COMPETENCE = f"{REGIME_POINT}/competence.json"
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


def competence_summary(competence: Doc) -> str:
    """The competence verdict with the model's and the baselines' losses on fresh HMMs."""
    losses = competence["ladder", "all_positions"]
    closed = competence["gap_closed", "all_positions"]
    names = [name for name in ("ngram 1", "ngram 2", "ngram 3", "model", "ceiling", "oracle") if name in losses]
    return (f"{competence['verdict']}; loss on {competence['num_prompts']} prompts of fresh HMMs, all positions: "
            + ", ".join(f"{name} {fixed(losses[name]['loss'])}" for name in names)
            + f"; closes {fixed(closed['fraction'], 2)} [{fixed(closed['interval_95'][0], 2)}, "
              f"{fixed(closed['interval_95'][1], 2)}] of the in-context-unigram-to-ceiling gap")


def competent(competence: Doc) -> Outcome:
    """The regime model beats the in-context bigram on fresh HMMs, and the variable-order predictor
    where the result scores it (the gate of the mechanism claims, :func:`is_competent`)."""
    verdict = Verdict.HOLDS if is_competent(competence) else Verdict.NOT_REPRODUCED
    beats = competence["beats"]
    beaten = [name for name in beats["all_positions"] if all(scope[name] for scope in beats.values())]
    return Outcome(verdict, competence_summary(competence),
                   f"beats in both scopes: {', '.join(beaten) or 'no in-context n-gram'} (competence.verdict)",
                   f"{scale(competence)}; {competence['fresh_tasks']} fresh HMMs")


BEATS_EVERY_NGRAM = "beats every in-context n-gram"
"""The highest verdict of empirical.yardsticks.competence.VERDICTS in a result made before the
variable-order predictor existed (the ledger reads results, it does not import their code)."""
BEATS_EVERY_PREDICTOR = "beats every in-context predictor"
"""The highest verdict where the result scores the variable-order predictor: every in-context n-gram
and it beaten in both scopes."""
VARIABLE_ORDER = "variable order"
"""The variable-order predictor's name in a result's ``beats`` (issue 65; absent from older results)."""


def scores_variable_order(result: Doc | dict) -> bool:
    """Whether ``result`` (``competence.json`` or ``ngram-verdict.json``) scores the variable-order predictor."""
    return all(VARIABLE_ORDER in scope for scope in result["beats"].values())


def top_verdict(result: Doc | dict) -> str:
    """The verdict a network that beats every in-context predictor ``result`` scores gets."""
    return BEATS_EVERY_PREDICTOR if scores_variable_order(result) else BEATS_EVERY_NGRAM


def beats_every_ngram(verdict: Doc) -> Outcome:
    """The n-gram verdict on thousands of prompts says the model beats every in-context n-gram, and
    the variable-order predictor where the result scores it (:func:`top_verdict`)."""
    holds = verdict["verdict"] == top_verdict(verdict)
    parts = [f"{scope.replace('_', ' ')}: " + ", ".join(
        f"{name.removeprefix('model - ')} {interval(value['mean'], *value['interval_95'], decimals=4)}"
        for name, value in verdict["comparisons", scope].items() if name != "model - oracle")
        for scope in ("test_sequence", "all_positions")]
    return Outcome(Verdict.HOLDS if holds else Verdict.NOT_REPRODUCED,
                   f"{verdict['verdict']}; model minus each in-context n-gram (nats), " + "; ".join(parts),
                   f"verdict: {verdict['verdict']} (ngram-verdict.verdict)",
                   f"{scale(verdict)}; {verdict['settings', 'prompts']} prompts of {verdict['distinct_hmms']} "
                   f"distinct fresh HMMs")


COMPETENT_VERDICTS = ("beats the in-context bigram", BEATS_EVERY_NGRAM, BEATS_EVERY_PREDICTOR)
"""The verdicts of empirical.yardsticks.competence.VERDICTS that beat the in-context bigram or more:
``competence.json`` and ``ngram-verdict.json`` use the same."""


def is_competent(result: Doc) -> bool:
    """Competent for mechanism claims: ``result``'s verdict beats the in-context bigram
    (:data:`COMPETENT_VERDICTS`) and, where it scores the variable-order predictor, the model beats
    that in both scopes too."""
    return result["verdict"] in COMPETENT_VERDICTS and (
        not scores_variable_order(result) or all(scope[VARIABLE_ORDER] for scope in result["beats"].values()))


def competence_phrase(result: Doc) -> str:
    """The verdict, and where it beats the bigram but the model not the variable-order predictor, that too."""
    if result["verdict"] in COMPETENT_VERDICTS and not is_competent(result):
        return f"{result['verdict']}, not the variable-order predictor"
    return str(result["verdict"])


def window_to_the_bound(competence: Doc) -> str:
    """Where the model lies in the window from the in-context unigram to the ceiling, read from a
    ``competence.json`` whose ceiling is the collapsed SMC's upper bound (``ceiling.upper_bound``):
    the test sequence's losses and the share of the window to the bound the model closes, which is
    at least its share of the window to the true ceiling."""
    losses = competence["ladder", "test_sequence"]
    closed = competence["gap_closed", "test_sequence"]
    ceiling = competence["ceiling"]
    names = ("ngram 1", "ngram 2", "ngram 3", "model")
    return (f"beside an upper bound on the ceiling ({ceiling['replicates']} runs of the collapsed SMC, "
            f"{competence['num_prompts']} other prompts), test sequence: "
            + ", ".join(f"{name} {fixed(losses[name]['loss'])}" for name in names)
            + f", ceiling <= {fixed(losses['ceiling']['loss'])}, oracle {fixed(losses['oracle']['loss'])}; the model "
              f"closes {fixed(closed['fraction'], 2)} [{fixed(closed['interval_95'][0], 2)}, "
              f"{fixed(closed['interval_95'][1], 2)}] of the window from the in-context unigram to the bound (at most "
              f"that of the window to the ceiling)")


def lower_bound_text(lower: Doc, scope: str = "test_sequence") -> str:
    """The reverse-annealing lower bound on the ceiling's loss in ``scope``
    (``benchmarks/ceiling_lower_bounds.py``, at its largest setting) and the width of the bracket
    it makes with the collapsed SMC's upper bound on the same prompts: ``ceiling >= L ± s.e.``,
    width ``U - L``."""
    setting = lower["scopes", scope, "settings", lower["scopes", "largest_setting"]]
    bound = setting["lower"]
    return (f"ceiling >= {fixed(bound['mean'])} ± {fixed(bound['stderr'])} (reverse annealing from the generating "
            f"HMM, {setting['chains']} chain x {setting['sweeps']} sweep x {setting['substeps']} step a token, "
            f"{setting['prompts']} prompts), a bracket {fixed(setting['width_to_collapsed_smc'], 2)} nats wide")


def above_the_lower_bound(lower: Doc, model: str) -> str:
    """How far the network ``model`` (``models/...``, as the lower bound's file names it) lies above
    the reverse-annealing lower bound on the ceiling, test sequence, paired on that bound's prompts:
    mean over prompts of loss(model) - lower bound, with its 95% interval (or that the file does
    not score it: a network trained after the bound was gathered)."""
    scored = lower["scopes", "test_sequence", "on_the_largest_setting's_prompts"]
    if model not in scored:
        return f"{lower_bound_text(lower)}; this network is not scored on those prompts"
    above = scored[model]["minus_lower"]
    return (f"{lower_bound_text(lower)}; the model lies {interval(above['mean'], *above['interval_95'])} above it "
            f"on those prompts")


def competent_by_ngram_verdict(verdict: Doc, bound: Doc | None = None, lower: Doc | None = None) -> Outcome:
    """The competence gate read from the n-gram verdict, for a family whose prior-predictive ceiling
    the SMC does not reach (128 states): the network beats the in-context bigram on thousands of
    fresh-HMM prompts. With ``bound`` (a ``competence.json`` beside the ceiling's upper bound), the
    number says where the model lies in the window (:func:`window_to_the_bound`), and with ``lower``
    (the reverse-annealing lower bound's result) how far above the ceiling's lower bound
    (:func:`above_the_lower_bound`); the gate reads neither."""
    outcome = beats_every_ngram(verdict)
    if bound is not None and not bound["ceiling"].get("upper_bound"):
        raise LedgerError(f"{bound.path}: its ceiling is not the collapsed SMC's upper bound (ceiling.upper_bound); "
                          f"expected the competence result of --ceiling-backend collapsed")
    number = outcome.number if bound is None else f"{outcome.number}; {window_to_the_bound(bound)}"
    if lower is not None:
        number += f"; {above_the_lower_bound(lower, verdict['checkpoint'].removesuffix('/checkpoint'))}"
    return Outcome(Verdict.HOLDS if is_competent(verdict) else Verdict.NOT_REPRODUCED,
                   number, f"verdict: {competence_phrase(verdict)} (ngram-verdict.verdict, beats); no converged "
                   f"prior-predictive ceiling at this family's 128 states", outcome.scale)


def gated(judge: Judge) -> Judge:
    """``judge`` run on the sources after the first, the competence result (``competence.json``, or
    ``ngram-verdict.json`` where there is no ceiling): its verdict stands when the model is
    competent (:func:`is_competent`), and becomes ``not judged`` (its number kept) when it is not."""
    def judge_if_competent(competence: Doc, *documents: Doc) -> Outcome:
        outcome = judge(*documents)
        if is_competent(competence) or outcome.verdict in (Verdict.NOT_COMPUTED, Verdict.UNTESTED):
            return outcome
        return Outcome(Verdict.NOT_JUDGED, outcome.number,
                       f"the network is not competent ({competence_phrase(competence)}, {competence.path}); the rule "
                       f"alone would say '{outcome.verdict.value}': {outcome.reason}", outcome.scale)

    judge_if_competent.__name__ = judge_if_competent.__qualname__ = f"gated_{judge.__name__}"
    return judge_if_competent


@dataclass(frozen=True)
class RegimeModel:
    """Where a regime model's results are, for :func:`regime_claims`: ``name``, the network's short
    name (``models/NAME``, its column in the README's regime matrix), ``prefix`` of its claims'
    ids, ``scale`` (what the model is, a phrase ending in ", "), ``point`` (the folder of its
    ``evaluation.json`` and ``competence.json``), ``analysis`` (``hmmtf analyze``'s shuffle and
    probes), ``extra`` (its offsets and patching; may be ``analysis``), ``figures`` (a figure
    per kind of claim: competence, regime, shuffle, state-first, state-used, distance, nearby,
    heads, and optionally verdict, the n-gram verdict's where it is not ``ngram-verdict.png``; None:
    no figure kept), ``heads`` (``hmmtf heads``'s result, for the circuit claim; None: no such claim),
    ``ngram_verdict`` (``hmmtf ngram-verdict``'s result; None: no such claim), ``ceiling`` (False
    for a family with no prior-predictive ceiling, 128 states: no ``competence.json``, so the
    competence gate is the n-gram verdict, and Figure 1's regime diagnostic is judged from an
    ``evaluation.json`` made without the ceiling), ``covers`` (the name of the
    :class:`UntestedNetwork` this model is, whose placeholder column it takes in the README's
    matrix; None: none), ``ceiling_bound`` (without a ceiling, the ``competence.json`` made with
    the collapsed SMC's upper bound as its ceiling, quoted beside the n-gram verdict; None: none) and
    ``ceiling_lower`` (with ``ceiling_bound``, the reverse-annealing lower bound on the ceiling whose
    file scores this network, quoted beside it; None: none)."""

    name: str
    prefix: str
    scale: str
    point: str
    analysis: str
    extra: str
    figures: dict[str, str | None]
    heads: str | None = None
    ngram_verdict: str | None = None
    ceiling: bool = True
    covers: str | None = None
    ceiling_bound: str | None = None
    ceiling_lower: str | None = None

    def __post_init__(self) -> None:
        if not self.ceiling and self.ngram_verdict is None:
            raise ValueError(f"ngram_verdict: None for {self.name}, which has no ceiling; expected the n-gram "
                             f"verdict that gates its claims")
        if self.ceiling_lower is not None and self.ceiling_bound is None:
            raise ValueError(f"ceiling_lower: {self.ceiling_lower} for {self.name}, which has no ceiling_bound; "
                             f"expected the upper bound's competence.json beside the lower bound")

    @property
    def competence(self) -> str:
        """The result that gates the mechanism claims: ``competence.json``, or the n-gram verdict
        where there is no ceiling."""
        if not self.ceiling:
            assert self.ngram_verdict is not None
            return self.ngram_verdict
        return f"{self.point}/competence.json"

    @property
    def evaluation(self) -> str:
        return f"{self.point}/evaluation.json"


def _competence_claims(model: RegimeModel) -> tuple[Claim, ...]:
    """The premise of ``model``'s mechanism claims: its competence (from ``competence.json``, beside
    the ceiling, or from the n-gram verdict where there is no ceiling) and Figure 1's regime diagnostic."""
    statement = ("The regime network infers more than token counts: it beats the in-context n-gram baselines on "
                 "HMMs it never saw (the premise of every mechanism claim below).")
    if model.ceiling:
        competence = Claim(
            f"{model.prefix}-competence", statement, model.scale + "loss on fresh HMMs against the in-context "
            "1/2/3-grams, paired per prompt, beside the prior-predictive ceiling", sources=(model.competence,),
            judge=competent, figure=model.figures["competence"],
            rule="holds when competence.json's verdict beats the in-context bigram (95% paired intervals below 0 on the "
                 "test sequence and all positions, empirical/yardsticks/competence.py) and, where it scores the "
                 "variable-order predictor (context-tree weighting of depth 6), the model beats that in both scopes "
                 "too; otherwise not reproduced")
    else:
        competence = Claim(
            f"{model.prefix}-competence", statement, model.scale + "loss on 4096 prompts of 8192 fresh HMMs against "
            "the in-context 1/2/3-grams, paired per prompt, standard errors clustered by HMM (no converged "
            "prior-predictive ceiling at 128 states; beside it, an upper bound on it)",
            sources=(model.competence, *(path for path in (model.ceiling_bound, model.ceiling_lower) if path)),
            judge=competent_by_ngram_verdict,
            figure=model.figures["competence"],
            rule="holds when ngram-verdict.json's verdict beats the in-context bigram (95% intervals below 0 in both "
                 "scopes, empirical/analysis/ngram_verdict.py) and, where it scores the variable-order predictor "
                 "(context-tree weighting of depth 6), the model beats that in both scopes too; otherwise not "
                 "reproduced")
    return (
        competence,
        Claim(f"{model.prefix}-F1-in-context", "Figure 1's network learns in context (the paper's regime).",
              model.scale + "the regime diagnostic", sources=(model.evaluation,), judge=in_context,
              figure=model.figures["regime"], rule="memorisation_verdict: 'in context' holds; otherwise not reproduced"),
    )


def regime_claims(model: RegimeModel) -> tuple[Claim, ...]:
    """The Section 2 claims judged on one regime model, each gated on its competence."""
    phrase, figures, gate = model.scale, model.figures, (model.competence,)
    gate_rule = (f"; judged only if {PurePosixPath(model.competence).name} says the model beats the in-context "
                 f"bigram (and the variable-order predictor, where it scores it), else not judged")
    return _competence_claims(model) + (
        Claim(f"{model.prefix}-F2-shuffle", "Upper layers are position-independent (Figure 2), in the paper's regime.",
              phrase + "the shuffle metric, lower vs upper half of the layers", sources=(*gate, model.analysis),
              judge=gated(shuffle), figure=figures["shuffle"], rule="locality_order, as F2-shuffle" + gate_rule),
        Claim(f"{model.prefix}-F3a-state-first", "The hidden state is identified before the task (Figure 3a), in "
              "the paper's regime.", phrase + "task and state probes against their Bayes-optimal ceilings",
              sources=(*gate, model.analysis), judge=gated(state_before_task), figure=figures["state-first"],
              rule="decoding_order, as F3a-state-first" + gate_rule),
        Claim(f"{model.prefix}-F3a-state-used", "Lower layers carry the hidden state causally, in the paper's regime.",
              phrase + "state forcing against four controls", sources=(*gate, model.extra), judge=gated(state_used),
              figure=figures["state-used"], rule="uses_state, as F3a-state-used" + gate_rule),
        Claim(f"{model.prefix}-F3b-distance", "Previous tokens are decoded worse the further back (Figure 3b), in "
              "the paper's regime.", phrase + "o_{t-k} probes", sources=(*gate, model.analysis),
              judge=gated(falls_with_distance), figure=figures["distance"], rule="falls_with_k, as F3b-distance" + gate_rule),
        Claim(f"{model.prefix}-F3b-nearby-used", "The prediction relies on nearby tokens (Figure 3b, causally), in "
              "the paper's regime.", phrase + "history patching", sources=(*gate, model.extra),
              judge=gated(nearby_used), figure=figures["nearby"], rule="as F3b-nearby-used" + gate_rule),
        Claim(f"{model.prefix}-F3b-rise-fall", "Each previous-token curve rises then falls, in the paper's regime.",
              phrase + "o_{t-k} probes", sources=(*gate, model.analysis), judge=gated(rise_then_fall),
              figure=figures["distance"], rule="rise_then_fall, as F3b-rise-fall" + gate_rule),
        Claim(f"{model.prefix}-F3b-peak-later", "The peak moves up with the distance, in the paper's regime.",
              phrase + "o_{t-k} probes", sources=(*gate, model.analysis), judge=gated(peak_later),
              figure=figures["distance"], rule="peaks_later, as F3b-peak-later" + gate_rule),
        Claim(f"{model.prefix}-F7-history-heads", "Trained heads attend like the history layers (Figure 7), in the "
              "paper's regime.", phrase + "matching score of the best trained head to each hand-built history layer",
              sources=(*gate, model.extra), judge=gated(history_heads), figure=figures["heads"],
              rule="as F7-history-heads" + gate_rule),
    ) + (() if model.heads is None else (
        Claim(f"{model.prefix}-circuit", "The network's in-context estimate runs through previous-token heads (the "
              "construction's history layers) and induction heads: without either it falls back toward the "
              "in-context unigram.", phrase + "previous-token and induction scores of every head against a "
              "random-init twin, and mean-ablation of the top heads of each kind against random heads",
              sources=(*gate, model.heads), judge=gated(circuit), figure=model.heads.replace(".json", ".png"),
              rule="holds when, for both kinds, the selected heads' excess over chance beats the best random-init "
                   "head's and ablating them raises the KL from the in-context bigram more than ablating as many "
                   "random heads (95% paired interval of the difference above 0, all positions); with caveat for "
                   "one kind; otherwise not reproduced" + gate_rule),
    )) + (() if model.ngram_verdict is None else (
        Claim(f"{model.prefix}-beats-every-ngram", "The regime network beats every in-context n-gram (orders 1, 2 and "
              "3) on HMMs it never saw, on the test sequence and over all positions, when thousands of prompts "
              "resolve differences of a thousandth of a nat (the bar of a competent network in issue 34), and the "
              "variable-order predictor, context-tree weighting of depth 6 (issue 65).",
              phrase + "loss on 4096 prompts of 8192 fresh HMMs against the in-context 1/2/3-grams and the "
              "variable-order predictor, paired per prompt, standard errors clustered by HMM", sources=(model.ngram_verdict,), judge=beats_every_ngram,
              figure=model.figures.get("verdict", model.ngram_verdict.replace(".json", ".png")),
              rule="holds when ngram-verdict.json's verdict is 'beats every in-context n-gram' (95% intervals of "
                   "model minus each n-gram below 0 in both scopes, empirical/analysis/ngram_verdict.py), or, where it "
                   "scores the variable-order predictor (context-tree weighting of depth 6), 'beats every in-context "
                   "predictor' (that one beaten in both scopes too); otherwise not reproduced"),
    ))


CIRCUIT_KINDS = ("previous-token", "induction")
"""The head groups of ``hmmtf heads`` (:mod:`empirical.analysis.heads`) the circuit claim reads."""


def circuit(heads: Doc) -> Outcome:
    """Both kinds of heads are there (scores above a random-init twin's) and used (their ablation
    moves the model away from the in-context bigram more than random heads' does)."""
    parts, kinds_found = [], []
    for kind in CIRCUIT_KINDS:
        selection, group = heads["selection", kind], heads["ablation", "groups", kind]
        from_bigram = group["all_positions"]["ngram 2"]["minus_random"]
        to_unigram = group["all_positions"]["ngram 1"]["change"]
        low, high = from_bigram["interval_95"]
        found = max(selection["excess"]) > selection["random_init_best_excess"] and low > 0
        kinds_found += [kind] if found else []
        heads_named = ", ".join(f"L{head['layer']}H{head['head']}" for head in group["heads"])
        parts.append(f"{kind} heads {heads_named}: excess over chance {listed(selection['excess'], fixed)} (best "
                     f"random-init {fixed(selection['random_init_best_excess'])}); ablated, KL from the bigram minus "
                     f"random heads' {interval(from_bigram['mean'], low, high, 4)}, KL to the unigram changes by "
                     f"{fixed(to_unigram['mean'], 4)}")
    verdict = (Verdict.HOLDS if len(kinds_found) == len(CIRCUIT_KINDS) else
               Verdict.HOLDS_WITH_CAVEAT if kinds_found else Verdict.NOT_REPRODUCED)
    return Outcome(verdict, "; ".join(parts),
                   f"found and used: {', '.join(kinds_found) or 'neither kind'} (all positions, "
                   f"{heads['settings', 'prompts']} prompts of fresh HMMs)", scale(heads))


LADDER_MODEL = RegimeModel(
    REGIME_NETWORK, "R", f"on {REGIME_NETWORK} (the paper's 8192 tasks, 8 layers), ", REGIME_POINT, REGIME_ANALYSIS,
    REGIME_EXTRA,
    {"competence": f"{REGIME_POINT}/competence.png", "regime": f"{REGIME_POINT}/regime.png",
     "shuffle": "figures/ladder/ladder_claim1.png", "state-first": "figures/ladder/ladder_claim2.png",
     "state-used": "figures/regime/patching_state_forcing.png", "distance": "figures/ladder/ladder_claim3.png",
     "nearby": "figures/regime/patching_history.png", "heads": "figures/regime/attention_hand_built_vs_trained.png"})

LADDER = Section("The paper's regime: 8192 tasks inferred in context (the regime ladder)", "Regime", (
    Claim("R-regime-change", "A network trained on few HMMs memorises them; on thousands it infers the task in "
          "context, as the paper's must (8192 HMMs, each seen about 16 times).",
          "the regime diagnostic (fresh minus training excess over the oracle) of every ladder point",
          sources=(LADDER_JSON,), judge=regime_change, figure="figures/ladder/ladder_regime.png",
          rule="holds when every model is 'memorising' at its fewest tasks and 'in context' at its most "
               "(memorisation_verdict, empirical/yardsticks/regime.py)"),
    *regime_claims(LADDER_MODEL),
))


def _mechanism_figures(point: str) -> dict[str, str]:
    """The figures ``hmmtf analyze`` draws in ``point`` for each kind of mechanism claim."""
    return {"shuffle": f"{point}/shuffle.png", "state-first": f"{point}/probes_task_state.png",
            "state-used": f"{point}/patching_state_forcing.png", "distance": f"{point}/probes_previous_tokens.png",
            "nearby": f"{point}/patching_history.png", "heads": f"{point}/attention_hand_built_vs_trained.png"}


def _regime_model(family: str, shape: str, prefix: str, what: str) -> RegimeModel:
    """The shipped regime model ``models/FAMILY-SHAPE``, whose results are in ``figures/FAMILY/SHAPE``."""
    point = f"figures/{family}/{shape}"
    analysis = f"{point}/analysis.json"
    return RegimeModel(f"{family}-{shape}", prefix, f"on {family}-{shape} ({what}), ", point, analysis, analysis,
                       {"competence": f"{point}/competence.png", "regime": f"{point}/regime.png",
                        **_mechanism_figures(point)}, heads=f"{point}/heads.json",
                       ngram_verdict=f"{point}/ngram-verdict.json")


CEILING_LOWER = {family: f"figures/competence/ceiling-lower-{family}.json" for family in ("paper", "paper-sparse")}
"""The reverse-annealing lower bounds on the 128-state families' ceilings
(``benchmarks/ceiling_lower_bounds.py``), each scoring that family's CPU networks on its prompts."""
STATES_128_FOLDER = "figures/paper-scale/cpu"
"""The results of the small networks trained on the CPU on the 128-state families
(``models/paper-scale-cpu/RUN``): ``ngram-verdict.json``, ``evaluation.json``, ``analysis.json``,
``heads.json`` and ``beliefs.json`` in ``RUN/``."""


DEPTH_FIGURE = "figures/depth/depth.png"
"""``hmmtf depth``'s figure: every 128-state network's distances, probes and heads against depth."""


def _depth_ladder_figures(point: str) -> dict[str, str | None]:
    """The figures a depth-ladder network's claims link: its regime diagnostic and head scores, and
    the depth figure for its verdict and probes. The tree keeps no other figure of theirs (the
    analysis's, about 2.4 MB a network, are drawn on demand by ``hmmtf draw``), so the shuffle and
    patching claims link none and cite their JSON."""
    return {"competence": DEPTH_FIGURE, "verdict": DEPTH_FIGURE, "regime": f"{point}/regime.png", "shuffle": None,
            "state-first": DEPTH_FIGURE, "state-used": None, "distance": DEPTH_FIGURE, "nearby": None,
            "heads": f"{point}/heads.png"}


def _states_128_model(run: str, family: str, prefix: str, what: str, depth_ladder: bool = False) -> RegimeModel:
    """The run ``models/paper-scale-cpu/RUN`` on the 128-state ``family``, its results in
    ``figures/paper-scale/cpu/RUN``: no converged ceiling, so gated by its n-gram verdict, with the
    window to the ceiling's upper bound from its ``competence.json`` beside it, and its distance to
    the family's reverse-annealing lower bound (:data:`CEILING_LOWER`); a network of the depth
    ladder links the figures of :func:`_depth_ladder_figures`."""
    point = f"{STATES_128_FOLDER}/{run}"
    analysis = f"{point}/analysis.json"
    figures = _depth_ladder_figures(point) if depth_ladder else {
        "competence": f"{point}/ngram-verdict.png", "regime": f"{point}/regime.png", **_mechanism_figures(point)}
    return RegimeModel(f"paper-scale-cpu/{run}", prefix, f"on {run} ({what}), ", point, analysis, analysis, figures,
                       heads=f"{point}/heads.json", ngram_verdict=f"{point}/ngram-verdict.json", ceiling=False,
                       ceiling_bound=f"{point}/competence.json", ceiling_lower=CEILING_LOWER[family])


REGIME_MODELS = (
    _regime_model("observable", "4x4x64", "O4", "the theory's observable family: 8192 HMMs, 4 states, 8 tokens; "
                  "4 layers x 4 heads x width 64"),
    _regime_model("observable", "2x4x64", "O2", "the same family; 2 layers x 4 heads x width 64"),
    _regime_model("paper", "2x4x64", "P2", "the paper's family: 8192 HMMs, 16 states, 8 tokens; 2 layers x 4 heads "
                  "x width 64"),
    _regime_model("paper", "4x4x64", "P4", "the same family; 4 layers x 4 heads x width 64"),
    _regime_model("paper", "4x4x64-long", "P4L", "the same 4-layer network with a longer cooldown: constant rate to "
                  "step 19000, decay to step 27000"),
    _states_128_model("sparse-2x4x64-2x", "paper-sparse", "S128", "paper-sparse: 8192 HMMs, 128 states, 16 tokens, Dirichlet "
                      "0.005 / 0.005; 2 layers x 4 heads x width 64 at twice the paper's budget"),
    _states_128_model("paper-2x4x64-4x", "paper", "P128", "the paper-scale family: 8192 HMMs, 128 states, 16 tokens, "
                      "Dirichlet 0.01 / 0.02; 2 layers x 4 heads x width 64 at four times the paper's budget"),
    _states_128_model("sparse-4x4x64-2x", "paper-sparse", "S128L4", "paper-sparse; 4 layers x 4 heads x width 64 at "
                      "twice the paper's budget, the depth ladder's", depth_ladder=True),
    _states_128_model("sparse-8x4x64-2x", "paper-sparse", "S128L8", "paper-sparse; 8 layers x 4 heads x width 64 at "
                      "twice the paper's budget, the depth ladder's", depth_ladder=True),
    _states_128_model("paper-4x4x64-4x-curriculum", "paper", "P128L4", "the paper-scale family; 4 layers x 4 heads x "
                      "width 64 at four times the paper's budget after the plateau study's data curriculum, the depth "
                      "ladder's", depth_ladder=True),
)
"""The shipped regime models (models/README.md), each judged on every regime claim and the circuit."""

REGIME_MODEL_SECTION = Section(
    "Competent regime networks: the claims re-judged on networks that beat the in-context n-grams", "Competent",
    tuple(claim for model in REGIME_MODELS for claim in regime_claims(model)))


@dataclass(frozen=True)
class UntestedNetwork:
    """A network the regime claims are meant for that no regime model covers yet: ``name`` (its
    column in the README's regime matrix, which a regime model that ``covers`` it takes), ``claim``
    (the id of the pending claim that says why, which each of its untested cells links) and
    ``measured`` (per claim template, the id of a claim judged elsewhere on this kind of network,
    shown in that cell)."""

    name: str
    claim: str
    measured: tuple[tuple[str, str], ...] = ()


PAPER_SCALE_NETWORK = UntestedNetwork("paper-scale-16x16x1024", "S2-paper-scale",
                                      (("beats-every-ngram", "G-paper-size-competence"),))
"""The paper's network (16 layers x 16 heads x width 1024 on 8192 HMMs of 128 states), made by
``hmmtf reproduce --preset paper`` on a GPU and unpacked into ``figures/paper-scale/`` (``make unpack-paper``).
Its n-gram bar is measured already, on the recipe sweep's networks (:mod:`ledger.gpu`)."""


def claim_template(model: RegimeModel, claim: Claim) -> str:
    """The id of one of ``model``'s regime claims without the model's prefix (``F2-shuffle``): the
    same claim on every regime model."""
    return claim.id.removeprefix(f"{model.prefix}-")


@dataclass(frozen=True)
class RegimeColumn:
    """A network of the README's regime matrix: its ``name``, ``claims`` (per claim template, the id
    of the claim judging it on this network) and ``untested`` (for a network no regime model
    covers, the id of the claim each cell without a claim links as untested at this scale; None for
    a judged network)."""

    name: str
    claims: dict[str, str]
    untested: str | None = None


@dataclass(frozen=True)
class RegimeMatrix:
    """The regime claims as a table: ``templates`` (the rows: every claim template, in the order of
    :func:`regime_claims`, with its statement) and ``columns`` (the networks)."""

    templates: dict[str, str]
    columns: tuple[RegimeColumn, ...]

    @property
    def claim_ids(self) -> set[str]:
        """The claims whose verdicts the cells show (not the claims an untested column links)."""
        return {claim_id for column in self.columns for claim_id in column.claims.values()}


def regime_matrix(models: tuple[RegimeModel, ...], untested: tuple[UntestedNetwork, ...]) -> RegimeMatrix:
    """A column per regime model, then one per untested network that no model covers (so the
    paper's network, once a regime model covers it, replaces the placeholder column; a smaller
    network on the same family does not)."""
    templates = {claim_template(model, claim): claim.statement for model in models for claim in regime_claims(model)}
    judged = [RegimeColumn(model.name, {claim_template(model, claim): claim.id for claim in regime_claims(model)})
              for model in models]
    placeholders = [RegimeColumn(network.name, dict(network.measured), network.claim) for network in untested
                    if not any(model.covers == network.name for model in models)]
    return RegimeMatrix(templates, (*judged, *placeholders))


REGIME_MATRIX = regime_matrix((LADDER_MODEL, *REGIME_MODELS), (PAPER_SCALE_NETWORK,))
"""The README's regime matrix: the regime ladder's model, every shipped regime model, the paper's network."""
