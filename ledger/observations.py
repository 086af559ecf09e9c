"""Claims of Section 2 of the paper (Figures 1, 2, 3) and Appendix B (Figure 7): what a trained
RoFormer does, judged from ``hmmtf evaluate`` and ``hmmtf analyze`` results on the CPU-small model.

The decision rules of ``docs/analysis.md`` are used where they exist (``claims.task_vs_state.decision``,
``uses_state``); the other verdicts there are judgments of the numbers, which the rules below make
numeric. ``Section 2 at the paper's scale`` keeps the gap visible: no paper-scale run is committed.
"""
from __future__ import annotations

import math

from ledger.claims import Claim, Outcome, Section, Verdict
from ledger.documents import Doc, LedgerError
from ledger.numbers import fixed, interval, listed, percent, plus_minus
from ledger.results import remedy_for

EVALUATION = "figures/cpu-small/evaluation.json"
ANALYSIS = "figures/analysis/analysis.json"
PATCHING = "figures/patching/analysis.json"

EXCESS_TARGET = 0.10
"""Excess loss over the Bayes-optimal predictor, as a fraction of the unigram-to-Bayes gap, that
counts as "high accuracy" (the target of docs/empirical.md)."""
RISE_IN_ERRORS = 2.0
"""A curve rises when its end exceeds its start by this many standard errors of the difference."""
MATCHED = 0.5
"""A trained head matches hand-built history layer r when it puts at least this much attention at offset -r."""


def scale(doc: Doc) -> str:
    """The mixture (named by the preset, or by its own name where the run chose another) and the
    trained model a result is about."""
    spec, model, task = doc["task", "mixture_spec"], doc["model"], doc["task"]
    family = task["preset"] if task.get("mixture", task["preset"]) == task["preset"] else (
        f"{task['preset']} preset, {task['mixture']} mixture")
    return (f"{family}: {spec['num_tasks']} HMMs x {spec['num_states']} states x {spec['num_tokens']} "
            f"tokens; RoFormer {model['num_layers']} layers x {model['num_heads']} heads x width {model['width']}, "
            f"{doc['step']} steps")


def accuracy_level(evaluation: Doc) -> Outcome:
    excess = evaluation["excess_test_sequence"]
    fraction = excess["model"]["excess_over_gap"]
    model, bayes = evaluation["test_sequence", "model"], evaluation["test_sequence", "bayes"]
    ok = fraction <= EXCESS_TARGET
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   f"excess loss {fixed(excess['model']['excess_loss'], 4)} nats = {percent(fraction)} of the "
                   f"unigram-to-Bayes gap ({fixed(excess['gap'])} nats); top-1 accuracy "
                   f"{plus_minus(model['accuracy'], model['accuracy_stderr'])} vs Bayes "
                   f"{plus_minus(bayes['accuracy'], bayes['accuracy_stderr'])}",
                   f"{percent(fraction)} {'<=' if ok else '>'} {percent(EXCESS_TARGET)}", scale(evaluation))


def _rise(evaluation: Doc, curve: str, axis: str, label: str) -> Outcome:
    """First against last point of ``evaluation[curve]``'s model accuracy, in standard errors."""
    model, bayes = evaluation[curve, "model"], evaluation[curve, "bayes"]
    steps = evaluation[curve, axis]
    accuracy, error = model["accuracy"], model["accuracy_stderr"]
    rise = accuracy[-1] - accuracy[0]
    errors = rise / math.hypot(error[0], error[-1])
    ok = errors > RISE_IN_ERRORS
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   f"top-1 accuracy {plus_minus(accuracy[0], error[0])} ({label} {steps[0]}) -> "
                   f"{plus_minus(accuracy[-1], error[-1])} ({label} {steps[-1]}); Bayes {fixed(bayes['accuracy'][0])} -> "
                   f"{fixed(bayes['accuracy'][-1])}",
                   f"rise {fixed(rise)} = {fixed(errors, 1)} standard errors {'>' if ok else '<='} {RISE_IN_ERRORS:g}",
                   scale(evaluation))


def with_demonstrations(evaluation: Doc) -> Outcome:
    return _rise(evaluation, "by_demonstrations", "num_demonstrations", "k =")


def with_test_length(evaluation: Doc) -> Outcome:
    return _rise(evaluation, "by_test_position", "position", "position")


DECISIONS = {
    "holds": Verdict.HOLDS, "state first": Verdict.HOLDS, "in context": Verdict.HOLDS, "partly": Verdict.HOLDS_WITH_CAVEAT,
    "memorising": Verdict.NOT_REPRODUCED, "undetermined": Verdict.NOT_REPRODUCED,
    "reversed": Verdict.NOT_REPRODUCED, "task first": Verdict.NOT_REPRODUCED,
    "not separated": Verdict.NOT_REPRODUCED, "not reproduced": Verdict.NOT_REPRODUCED,
    "untestable": Verdict.UNTESTED,
}
"""The decisions ``hmmtf analyze`` (empirical/analysis/claims.py) and ``hmmtf evaluate``
(empirical/yardsticks/regime.py) record, in the ledger's vocabulary: "partly" is a caveat; "undetermined"
does not show the claim; "untestable" (fewer than two distances the probes can tell from chance)
says the model is too small to test it."""


def _decided(doc: Doc, keys: tuple, rule: str, number: str) -> Outcome:
    """The verdict of the decision the command that made ``doc`` recorded at ``keys`` by ``rule``;
    "not computed" when ``doc`` predates that rule (its numbers are still shown)."""
    try:
        decision = doc[keys]
    except LedgerError:
        return Outcome(Verdict.NOT_COMPUTED, number, f"{doc.path} predates the rule ({'/'.join(keys)} is absent); "
                       f"{remedy_for(doc.path)}", scale(doc))
    if decision not in DECISIONS:
        raise LedgerError(f"{doc.path}: {'/'.join(keys)} = {decision!r}; expected one of {sorted(DECISIONS)}")
    return Outcome(DECISIONS[decision], number, f"{rule} decides '{decision}'", scale(doc))


def shuffle(analysis: Doc) -> Outcome:
    claims = analysis["claims", "shuffle"]
    means = "; ".join(f"{variant}: upper-half mean {fixed(v['upper_mean'])} vs lower-half {fixed(v['lower_mean'])}"
                      for variant, v in claims.items() if variant.startswith("min_context"))
    if "rule" in claims:
        rule = claims["rule"]
        d, e = rule["lower_minus_upper"], rule["upper_minus_random_init"]
        means = (f"{rule['variant']}, per prompt: lower - upper {interval(d['mean'], d['ci_low'], d['ci_high'])}, "
                 f"upper - random-init upper {interval(e['mean'], e['ci_low'], e['ci_high'])} ({rule['prompts']} prompts); "
                 + means)
    return _decided(analysis, ("claims", "shuffle", "rule", "decision"), "locality_order", means)


def _fraction_of_ceiling(timing: dict, layer: int) -> str:
    return percent(timing["accuracy_by_layer"][layer] / timing["ceiling"]["accuracy"])


def _crossing(timing: dict) -> str:
    crossing = timing["first_layer_at_95_percent_of_ceiling"]
    def at(key):
        return "never" if crossing[key] is None else f"layer {crossing[key]}"
    return f"upper end {at('earliest')}, lower end {at('latest')}"


def state_before_task(ceilings: Doc) -> Outcome:
    timing = ceilings["claims", "task_vs_state"]
    task, state = timing["task"], timing["state"]
    last = len(task["accuracy_by_layer"]) - 1
    number = (f"Bayes ceilings: task {interval(task['ceiling']['accuracy'], task['ceiling']['ci_low'], task['ceiling']['ci_high'])}, "
              f"state {interval(state['ceiling']['accuracy'], state['ceiling']['ci_low'], state['ceiling']['ci_high'])}; "
              f"layer 1: task {_fraction_of_ceiling(task, 1)} of its ceiling, state {_fraction_of_ceiling(state, 1)}; "
              f"layer {last}: {_fraction_of_ceiling(task, last)}, {_fraction_of_ceiling(state, last)}; 95% of the "
              f"ceiling reached by the interval's: task {_crossing(task)}; state {_crossing(state)}")
    return _decided(ceilings, ("claims", "task_vs_state", "decision"), "decoding_order", number)


def state_used(patching: Doc) -> Outcome:
    forcing = patching["patching", "state_forcing"]
    if "not_run" in forcing:  # no confident state to force: the HMMs' posteriors stay diffuse at this scale
        return Outcome(Verdict.UNTESTED, "—", f"state forcing not run: {forcing['not_run']}", scale(patching))
    layers = forcing["by_layer"]
    first, last = next(iter(layers)), list(layers)[-1]
    used = [name for name, layer in layers.items() if layer["uses_state"]]
    def kl(name):
        value = layers[name]["kl"]["state centroid"]
        return interval(value["mean"], value["ci_low"], value["ci_high"])
    before, floor = forcing["before"], forcing["own_state_floor"]
    ok = layers[first]["uses_state"]
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   f"KL to the exact counterfactual: unpatched {interval(before['mean'], before['ci_low'], before['ci_high'])}, "
                   f"state centroid patched after {first} {kl(first)}, after {last} {kl(last)} (own-state floor "
                   f"{fixed(floor['mean'])}); the rule finds the state used after: {', '.join(used) or 'no layer'}",
                   f"uses_state after {first}: {ok}", scale(patching))


def _previous_tokens(analysis: Doc) -> str:
    """Peak accuracy and peak layer of every distance's curve (and which distances the rule tests)."""
    previous = analysis["claims", "previous_tokens"]
    curves = {int(target.split()[1]): curve["accuracy_by_layer"] for target, curve in previous.items()
              if target.startswith("token ")}
    peaks = ", ".join(f"k = {k}: {fixed(max(curve))} at layer {curve.index(max(curve))}" for k, curve in sorted(curves.items()))
    informative = previous.get("rules", {}).get("informative")
    tested = "" if informative is None else f"; distances the probes tell from chance: {listed(informative, str)}"
    return f"peak accuracy and layer of o_{{t-k}} (layer {len(next(iter(curves.values()))) - 1} is the last), {peaks}{tested}"


def _previous_rule(name: str):
    """A judge reading sub-decision ``name`` of :func:`empirical.analysis.claims.previous_token_rules`."""
    def judge(analysis: Doc) -> Outcome:
        return _decided(analysis, ("claims", "previous_tokens", "rules", name), f"previous_token_rules ({name})",
                        _previous_tokens(analysis))
    return judge


falls_with_distance = _previous_rule("falls_with_k")
peak_later = _previous_rule("peaks_later")
rise_then_fall = _previous_rule("rise_then_fall")


def nearby_used(patching: Doc) -> Outcome:
    history = patching["patching", "history", "trained", "by_distance"]
    distances = sorted(history, key=lambda name: int(name.removeprefix("r=")))
    last = [list(history[r]["exact"].values())[-1] for r in distances]
    fractions = [value["fraction"] for value in last]
    used = {r: history[r]["uses_history"] for r in distances}
    falls = all(a >= b for a, b in zip(fractions, fractions[1:]))
    ok = bool(used[distances[0]]) and falls
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   "fraction of the exact change carried by the last position after the last layer, "
                   + ", ".join(f"{r}: {interval(v['fraction'], v['ci_low'], v['ci_high'])}" for r, v in zip(distances, last))
                   + "; used (rule uses_history) " + "; ".join(f"{r} after {', '.join(layers)}"
                                                          for r, layers in used.items() if layers),
                   f"the nearest token is {'used' if used[distances[0]] else 'not used'} and the fraction "
                   f"{'falls' if falls else 'does not fall'} with the distance",
                   scale(patching))


def _graded(count: int, total: int) -> Verdict:
    """Every one of ``total`` passes: holds; some: holds with caveat; none: not reproduced."""
    return Verdict.HOLDS if count == total and total else Verdict.HOLDS_WITH_CAVEAT if count else Verdict.NOT_REPRODUCED


def in_context(evaluation: Doc) -> Outcome:
    try:
        regime = evaluation["regime"]
    except LedgerError:
        return Outcome(Verdict.NOT_COMPUTED, "—", f"{evaluation.path} predates the regime diagnostic (no 'regime'); "
                       f"{remedy_for(evaluation.path)}", scale(evaluation))
    memorisation = regime["memorisation"]["all_positions"]
    gap = memorisation["training_gap"]
    low, high = (value / gap for value in memorisation["interval_95"])
    fresh = regime["fresh_hmms"]["all_positions"]
    number = (f"extra excess over the oracle on {regime['fresh_tasks']} HMMs never seen in training: "
              f"{interval(memorisation['fraction_of_gap'], low, high)} of the training gap; loss on them: model "
              f"{fixed(fresh['model']['loss'])}, oracle {fixed(fresh['oracle']['loss'])}, training-mixture Bayes "
              f"{fixed(fresh['bayes_training']['loss'])}")
    return _decided(evaluation, ("regime", "memorisation", "all_positions", "verdict"), "memorisation_verdict", number)


def history_heads(analysis: Doc) -> Outcome:
    best, chance = analysis["offsets", "best_match_composed"], analysis["offsets", "best_match_composed_random_init"]
    matched = [name for name, match in best.items() if match["similarity"] >= MATCHED]
    number = "; ".join(f"{name}: {fixed(match['similarity'], 2)} (layer {match['layer']} head {match['head']})"
                       for name, match in best.items())
    top_chance = max(match["similarity"] for match in chance.values())
    return Outcome(_graded(len(matched), len(best)), f"best trained head per layer, {number}; random-init best "
                   f"{fixed(top_chance)}", f"{len(matched)} of {len(best)} history layers matched "
                   f"({', '.join(matched) or 'none'})", scale(analysis))


FIGURE1 = Section("Section 2, Figure 1: in-context accuracy", "Fig. 1", (
    Claim("F1-accuracy", "A trained transformer predicts mixture-of-HMM sequences with high accuracy.",
          "loss and top-1 accuracy on the test sequence against the Bayes-optimal predictor (the ceiling) and a "
          "unigram baseline", sources=(EVALUATION,), judge=accuracy_level, figure="figures/cpu-small/in_context.png",
          rule=f"holds when the excess loss over Bayes is at most {percent(EXCESS_TARGET)} of the unigram-to-Bayes "
               "gap (the target of docs/empirical.md); not reproduced otherwise"),
    Claim("F1-demonstrations", "Accuracy improves as more demonstrations are given.",
          "top-1 accuracy on the segment after k = 0..n demonstrations", sources=(EVALUATION,),
          judge=with_demonstrations, figure="figures/cpu-small/in_context.png",
          rule=f"holds when the accuracy after the most demonstrations exceeds the accuracy after none by more than "
               f"{RISE_IN_ERRORS:g} standard errors of the difference"),
    Claim("F1-length", "Accuracy improves along a longer test sequence.",
          "top-1 accuracy per position of the test sequence after all demonstrations", sources=(EVALUATION,),
          judge=with_test_length, figure="figures/cpu-small/in_context.png",
          rule=f"holds when the accuracy at the last position exceeds that at the first by more than "
               f"{RISE_IN_ERRORS:g} standard errors of the difference"),
    Claim("F1-in-context", "The transformer learns in context: it predicts HMMs it never saw in training as well, "
          "relative to their oracle, as its training HMMs (multi-task generalization, not memorisation).",
          "the regime diagnostic of docs/empirical.md: the model's excess loss over each prompt's oracle on fresh "
          "HMMs minus that on the training HMMs, as a fraction of the training unigram-to-Bayes gap",
          sources=(EVALUATION,), judge=in_context, figure="figures/cpu-small/regime.png",
          rule="the decision rule memorisation_verdict (empirical/yardsticks/regime.py): 'in context' holds; 'memorising' or "
               "'undetermined' is not reproduced"),
))

FIGURE2 = Section("Section 2, Figure 2: position shuffle", "Fig. 2", (
    Claim("F2-shuffle", "Upper layers are position-independent (time-disentangled): their attention logits change "
          "less than the lower layers' when the demonstrations are shuffled.",
          "shuffle metric of docs/analysis.md (change of test-to-demonstration logits, matched by token identity, "
          "in units of their spread), head-averaged, lower vs upper half of the layers", sources=(ANALYSIS,),
          judge=shuffle, figure="figures/analysis/shuffle.png",
          rule="the decision rule locality_order of docs/analysis.md (claims.shuffle.rule.decision): holds when the "
               "per-prompt lower - upper difference lies above 0 and the upper half is more position-free than the "
               "random-init network's; 'reversed' or 'not separated' is not reproduced"),
))

FIGURE3 = Section("Section 2, Figure 3: layer-wise probes", "Fig. 3", (
    Claim("F3a-state-first", "The hidden state is identified in earlier layers than the task identity (Figure 3a).",
          "linear probes for task and hidden state after each layer, against the Bayes-optimal decoders of the same "
          "prefixes (ceilings), with bootstrap intervals", sources=(ANALYSIS,), judge=state_before_task,
          figure="figures/analysis/probes_task_state.png",
          rule="the decision rule decoding_order of docs/analysis.md (claims.task_vs_state.decision): holds on "
               "'state first'; 'task first' or 'not separated' is not reproduced"),
    Claim("F3a-state-used", "Lower layers learn the relation between observations and hidden states.",
          "activation patching: the centroid of hidden state s written into one position after layer l, scored "
          "by KL to the exact counterfactual (T_k O_k)[s] against four controls", sources=(PATCHING,),
          judge=state_used, figure="figures/patching/patching_state_forcing.png",
          rule="holds when the decision rule uses_state of docs/analysis.md ('Patching') holds after the first layer; "
               "untested at this scale when no position has a confident state to force (the section's not_run)"),
    Claim("F3b-distance", "Previous tokens are decoded with less accuracy the further back they are (Figure 3b).",
          "linear probes for o_{t-k} after each layer, trained and random-init", sources=(ANALYSIS,),
          judge=falls_with_distance, figure="figures/analysis/probes_previous_tokens.png",
          rule="the rule falls_with_k of previous_token_rules (docs/analysis.md, claims.previous_tokens.rules): holds "
               "when the peaks of consecutive distances the probes tell from chance are separated downwards"),
    Claim("F3b-nearby-used", "The prediction relies on nearby tokens more than on distant ones (the causal side "
          "of Figure 3b's first pattern).",
          "history patching: the token r back replaced by a draw the HMM allows, the last position's stream swapped in "
          "after each layer, scored as the fraction of the exact change of the next-token distribution",
          sources=(PATCHING,), judge=nearby_used, figure="figures/patching/patching_history.png",
          rule="holds when the token one back passes the rule uses_history of docs/analysis.md at some layer and the "
               "last layer's recovered fraction never rises with the distance r"),
    Claim("F3b-rise-fall", "Each previous-token curve rises then falls across layers.",
          "the same probes; the layer of each curve's peak", sources=(ANALYSIS,), judge=rise_then_fall,
          figure="figures/analysis/probes_previous_tokens.png",
          rule="the rule rise_then_fall of previous_token_rules: holds when every distance the probes tell from chance "
               "rises above the embedding and falls below its peak by the last layer, 'partly' (holds with caveat) "
               "when some do"),
    Claim("F3b-peak-later", "The peak moves to upper layers as the distance grows.",
          "the same probes; each peak with the layers statistically level with it",
          sources=(ANALYSIS,), judge=peak_later, figure="figures/analysis/probes_previous_tokens.png",
          rule="the rule peaks_later of previous_token_rules: holds when some consecutive pair of distances peaks "
               "separably later and none separably earlier"),
))

FIGURE7 = Section("Appendix B, Figure 7: attention heat-maps", "Fig. 7", (
    Claim("F7-history-heads", "Trained heads attend to nearby tokens the way the construction's history layers do "
          "(layer r reads r tokens back).",
          "matching score of the best trained head to each hand-built history layer: its mean attention at offset -r, "
          "beside the best random-init head", sources=(ANALYSIS,), judge=history_heads,
          figure="figures/analysis/attention_hand_built_vs_trained.png",
          rule=f"history layer r is matched when a trained head puts at least {MATCHED:g} of its attention at offset "
               "-r; holds when every layer is matched, holds with caveat when some are, not reproduced when none"),
))

PAPER_SCALE = Section("Section 2 at the paper's scale", "Sec. 2", (
    Claim("S2-paper-scale", "The observations of Figures 1-3 on the paper's model (16 layers x 16 heads x width "
          "1024) trained on 8192 HMMs x 128 states x 16 tokens.",
          "the claims above, measured on the paper preset", pending=Verdict.UNTESTED,
          pending_reason="no paper-size network is yet competent on the paper-scale family (G-paper-size-competence: "
                         "the recipes tried count tokens), so no paper-scale bundle of hmmtf reproduce --preset paper "
                         "(docs/reproduce.md) is committed; figures/paper/ is the 16-state stand-in"),
))
