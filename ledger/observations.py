"""Claims of Section 2 of the paper (Figures 1, 2, 3) and Appendix B (Figure 7): what a trained
RoFormer does, judged from ``hmmtf evaluate`` and ``hmmtf analyze`` results on the CPU-small model.

The decision rules of ``docs/analysis.md`` are used where they exist (``claims.task_vs_state.decision``,
``uses_state``); the other verdicts there are judgments of the numbers, which the rules below make
numeric. ``Section 2 at the paper's scale`` keeps the gap visible: no paper-scale run is committed.
"""
from __future__ import annotations

import math

from ledger.claims import Claim, Outcome, Section, Verdict
from ledger.documents import Doc
from ledger.numbers import fixed, interval, listed, percent, plus_minus

EVALUATION = "figures/cpu-small/evaluation.json"
ANALYSIS = "figures/analysis/analysis.json"
CEILINGS = "figures/probe-ceilings/analysis.json"
PATCHING = "figures/patching/analysis.json"

EXCESS_TARGET = 0.10
"""Excess loss over the Bayes-optimal predictor, as a fraction of the unigram-to-Bayes gap, that
counts as "high accuracy" (the target of docs/empirical.md)."""
RISE_IN_ERRORS = 2.0
"""A curve rises when its end exceeds its start by this many standard errors of the difference."""
MATCHED = 0.5
"""A trained head matches hand-built history layer r when it puts at least this much attention at offset -r."""


def scale(doc: Doc) -> str:
    """The mixture and the trained model a result is about."""
    spec, model = doc["task", "mixture_spec"], doc["model"]
    return (f"{doc['task', 'preset']}: {spec['num_tasks']} HMMs x {spec['num_states']} states x {spec['num_tokens']} "
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


def shuffle(analysis: Doc) -> Outcome:
    variants = analysis["claims", "shuffle"]
    below = {variant: v["upper_mean"] < v["lower_mean"] for variant, v in variants.items()}
    main = variants["min_context=0"]
    ok = all(below.values())
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   f"upper-half mean {fixed(main['upper_mean'])} vs lower-half {fixed(main['lower_mean'])} "
                   f"(layers 1..{len(main['by_layer'])}: {listed(main['by_layer'], lambda v: fixed(v, 2))}); "
                   + "; ".join(f"{variant}: {fixed(v['upper_mean'])} vs {fixed(v['lower_mean'])}"
                               for variant, v in variants.items() if variant != "min_context=0"),
                   "the upper layers' logits move " + ("less" if ok else "no less") + " than the lower layers' when the "
                   "demonstrations are reordered", scale(analysis))


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
    decision = timing["decision"]
    last = len(task["accuracy_by_layer"]) - 1
    return Outcome(Verdict.HOLDS if decision == "state first" else Verdict.NOT_REPRODUCED,
                   f"Bayes ceilings: task {interval(task['ceiling']['accuracy'], task['ceiling']['ci_low'], task['ceiling']['ci_high'])}, "
                   f"state {interval(state['ceiling']['accuracy'], state['ceiling']['ci_low'], state['ceiling']['ci_high'])}; "
                   f"layer 1: task {_fraction_of_ceiling(task, 1)} of its ceiling, state {_fraction_of_ceiling(state, 1)}; "
                   f"layer {last}: {_fraction_of_ceiling(task, last)}, {_fraction_of_ceiling(state, last)}; 95% of the "
                   f"ceiling reached by the interval's: task {_crossing(task)}; state {_crossing(state)}",
                   f"the decision rule returns '{decision}'", scale(ceilings))


def state_used(patching: Doc) -> Outcome:
    forcing = patching["patching", "state_forcing"]
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


def _learned(analysis: Doc) -> list[int]:
    """Distances k whose trained last-layer interval lies above the random-init network's last layer."""
    previous = analysis["claims", "previous_tokens"]
    random = analysis["probes", "random-init"]
    learned = []
    for target, curve in previous.items():
        k = int(target.split()[1])
        random_last = list(random[target].values())[-1]["accuracy"]
        if curve["last_layer"]["ci_low"] > random_last:
            learned.append(k)
    return sorted(learned)


def _previous(analysis: Doc, k: int) -> dict:
    return analysis["claims", "previous_tokens", f"token {k} back"]


def falls_with_distance(analysis: Doc) -> Outcome:
    previous = analysis["claims", "previous_tokens"]
    distances = sorted(int(target.split()[1]) for target in previous)
    peaks = [_previous(analysis, k)["peak"]["accuracy"] for k in distances]
    ok = all(a > b for a, b in zip(peaks, peaks[1:]))
    majority = _previous(analysis, distances[0])["peak"]["majority"]
    return Outcome(Verdict.HOLDS if ok else Verdict.NOT_REPRODUCED,
                   f"peak accuracy for k = {distances[0]}..{distances[-1]}: {listed(peaks)} (majority class "
                   f"{fixed(majority, 2)})", "falls at every step of k" if ok else "does not fall at every step of k",
                   scale(analysis))


def _graded(count: int, total: int) -> Verdict:
    return Verdict.HOLDS if count == total and total else Verdict.HOLDS_WITH_CAVEAT if count else Verdict.NOT_REPRODUCED


def rise_then_fall(analysis: Doc) -> Outcome:
    learned = _learned(analysis)
    falling = [k for k in learned if _previous(analysis, k)["peak"]["ci_low"] > _previous(analysis, k)["last_layer"]["ci_high"]]
    layers = len(_previous(analysis, 1)["accuracy_by_layer"]) - 1
    return Outcome(_graded(len(falling), len(learned)),
                   f"learned distances k = {listed(learned, str)}: peak at layer "
                   f"{listed([_previous(analysis, k)['peak_layer'] for k in learned], str)} of {layers}",
                   f"{len(falling)} of {len(learned)} learned curves fall after their peak beyond the intervals",
                   scale(analysis))


def _half_rise_layer(curve: dict) -> int:
    """The first layer >= 1 whose accuracy covers half the rise from layer 1 to the peak."""
    accuracy = curve["accuracy_by_layer"]
    bar = accuracy[1] + (max(accuracy[1:]) - accuracy[1]) / 2
    return next(layer for layer in range(1, len(accuracy)) if accuracy[layer] >= bar)


def peak_later(analysis: Doc) -> Outcome:
    learned = _learned(analysis)
    peaks = [_previous(analysis, k)["peak_layer"] for k in learned]
    halves = [_half_rise_layer(_previous(analysis, k)) for k in learned]

    def rises(values):
        return len(values) > 1 and all(a <= b for a, b in zip(values, values[1:])) and values[-1] > values[0]

    verdict = Verdict.HOLDS if rises(peaks) else Verdict.HOLDS_WITH_CAVEAT if rises(halves) else Verdict.NOT_REPRODUCED
    reason = {Verdict.HOLDS: "the peak layer rises with k",
              Verdict.HOLDS_WITH_CAVEAT: "the peak does not move, but the half-rise layer rises with k: a later rise",
              Verdict.NOT_REPRODUCED: "neither the peak nor the half-rise layer rises with k"}[verdict]
    return Outcome(verdict, f"learned k = {listed(learned, str)}: peak layers {listed(peaks, str)}, half-rise layers "
                   f"{listed(halves, str)}", reason, scale(analysis))


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
))

FIGURE2 = Section("Section 2, Figure 2: position shuffle", "Fig. 2", (
    Claim("F2-shuffle", "Upper layers are position-independent (time-disentangled): their attention logits change "
          "less than the lower layers' when the demonstrations are shuffled.",
          "shuffle metric of docs/analysis.md (change of test-to-demonstration logits, matched by token identity, "
          "in units of their spread), head-averaged, lower vs upper half of the layers", sources=(ANALYSIS,),
          judge=shuffle, figure="figures/analysis/shuffle.png",
          rule="holds when the upper half's mean is below the lower half's with both pair selections "
               "(min_context = 0 and 5); not reproduced otherwise"),
))

FIGURE3 = Section("Section 2, Figure 3: layer-wise probes", "Fig. 3", (
    Claim("F3a-state-first", "The hidden state is identified in earlier layers than the task identity (Figure 3a).",
          "linear probes for task and hidden state after each layer, against the Bayes-optimal decoders of the same "
          "prefixes (ceilings), with bootstrap intervals", sources=(CEILINGS,), judge=state_before_task,
          figure="figures/probe-ceilings/probes_task_state.png",
          rule="the decision rule of docs/analysis.md (claims.task_vs_state.decision): holds on 'state first'; "
               "'task first' or 'not separated' is not reproduced"),
    Claim("F3a-state-used", "Lower layers learn the relation between observations and hidden states.",
          "activation patching: the centroid of hidden state s written into one position after layer l, scored "
          "by KL to the exact counterfactual (T_k O_k)[s] against four controls", sources=(PATCHING,),
          judge=state_used, figure="figures/patching/patching_state_forcing.png",
          rule="holds when the decision rule uses_state of docs/analysis.md ('Patching') holds after the first layer"),
    Claim("F3b-distance", "Previous tokens are decoded with less accuracy the further back they are (Figure 3b).",
          "linear probes for o_{t-k}, k = 1..5, after each layer", sources=(ANALYSIS,), judge=falls_with_distance,
          figure="figures/analysis/probes_previous_tokens.png",
          rule="holds when each curve's peak accuracy falls strictly with k"),
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
          rule="over the learned distances (last-layer interval above the random-init network's last layer): holds "
               "when every curve falls after its peak beyond the intervals (peak's lower end above the last layer's "
               "upper end), holds with caveat when some do, not reproduced when none does"),
    Claim("F3b-peak-later", "The peak moves to upper layers as the distance grows.",
          "the same probes; peak layer and the first layer covering half the rise from layer 1 to the peak",
          sources=(ANALYSIS,), judge=peak_later, figure="figures/analysis/probes_previous_tokens.png",
          rule="over the learned distances: holds when the peak layer rises with k (never falls, rises once); holds "
               "with caveat when only the half-rise layer does (a later rise, not a later peak); not reproduced otherwise"),
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
          pending_reason="hmmtf reproduce --preset paper (docs/reproduce.md) runs it on a GPU; no paper-scale "
                         "result is committed (figures/paper/)"),
))
