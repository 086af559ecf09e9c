"""The paper's three claims about the trained network's inside, each decided by a rule stated
before any result (docs/analysis.md, "Decision rules"), from the sections of ``analysis.json``:

1. *lower layers local, upper layers position-independent* (Figure 2): :func:`locality_order`;
2. *the hidden state is decoded before the task id* (Figure 3a): :func:`decoding_order`;
3. *previous-token probes fall with k, peak later for larger k, rise then fall* (Figure 3b):
   :func:`previous_token_rules`.

:func:`claims_summary` gathers the numbers and the decisions (``analysis.json["claims"]``).
Layer index 0 is the embedding, l the residual stream after layer l.
"""
from __future__ import annotations

import math

import torch

from empirical.analysis.probes import bootstrap_interval

CEILING_FRACTION = 0.95
"""A probe 'decodes' its target from the first layer whose accuracy reaches this fraction of the
Bayes-optimal decoder's (the ceiling)."""


def first_layer_at_ceiling(results: list[dict], ceiling: float) -> dict:
    """When a probe first reaches ``CEILING_FRACTION * ceiling`` along the layers (index 0 = the
    embedding), from its accuracies and 95% intervals: ``estimate`` (accuracy), ``earliest``
    (upper end of the interval: the first layer that may have reached it) and ``latest`` (lower
    end: the first layer that certainly has); None where no layer does."""
    bar = CEILING_FRACTION * ceiling

    def first(key: str) -> int | None:
        return next((index for index, result in enumerate(results) if result[key] >= bar), None)

    return {"bar": bar, "estimate": first("accuracy"), "earliest": first("ci_high"), "latest": first("ci_low")}


def decoding_order(task: dict, state: dict) -> str:
    """Decision rule for "the hidden state is decoded before the task": ``state first`` when the
    state's ``latest`` crossing comes before the task's ``earliest``, ``task first`` in the mirror
    case, ``not separated`` when the intervals of the two crossing layers overlap (a probe that
    never crosses counts as crossing after the last layer)."""
    def crossing(result: dict, key: str) -> float:
        return math.inf if result[key] is None else result[key]

    if crossing(state, "latest") < crossing(task, "earliest"):
        return "state first"
    if crossing(task, "latest") < crossing(state, "earliest"):
        return "task first"
    return "not separated"


def _mean_with_interval(values: torch.Tensor) -> dict:
    """Mean of per-prompt ``values (B,)`` (NaN-free) with its prompt-level bootstrap 95% interval."""
    low, high = bootstrap_interval(values, torch.arange(len(values)))
    return {"mean": float(values.mean()), "ci_low": low, "ci_high": high}


def locality_order(lower: torch.Tensor, upper: torch.Tensor, baseline_upper: torch.Tensor) -> dict:
    """Decision rule for claim 1, from per-prompt shuffle metrics ``(B,)`` (the same prompts and
    derangements): ``lower`` and ``upper``, the trained network's mean over its lower and upper
    half of layers, ``baseline_upper`` the random-init twin's upper half. With the per-prompt
    differences ``D = lower - upper`` and ``E = upper - baseline_upper``:

    * ``holds``: D's 95% interval above 0 (upper layers change less when the demonstrations move)
      and E's below 0 (they are more position-independent than a random network's);
    * ``reversed``: D's interval below 0 (the upper layers are the more positional ones);
    * ``not separated``: otherwise.

    Prompts where any of the three is NaN (logits without spread) are left out."""
    if not (lower.shape == upper.shape == baseline_upper.shape and lower.ndim == 1):
        raise ValueError(f"lower, upper, baseline_upper: shapes {tuple(lower.shape)}, {tuple(upper.shape)}, "
                         f"{tuple(baseline_upper.shape)}; expected three equal (B,) shapes")
    kept = ~(lower.isnan() | upper.isnan() | baseline_upper.isnan())
    if int(kept.sum()) < 2:
        raise ValueError(f"lower, upper, baseline_upper: {int(kept.sum())} prompts without NaN; expected at least 2")
    lower_minus_upper = _mean_with_interval((lower - upper)[kept].double())
    upper_minus_baseline = _mean_with_interval((upper - baseline_upper)[kept].double())
    if lower_minus_upper["ci_low"] > 0 and upper_minus_baseline["ci_high"] < 0:
        decision = "holds"
    elif lower_minus_upper["ci_high"] < 0:
        decision = "reversed"
    else:
        decision = "not separated"
    return {"lower_minus_upper": lower_minus_upper, "upper_minus_random_init": upper_minus_baseline,
            "prompts": int(kept.sum()), "decision": decision}


def peak_interval(results: list[dict]) -> dict:
    """Where a probe curve peaks: ``layer`` (the argmax of the accuracy, first on ties), its
    ``accuracy``, and the layers statistically level with it: ``earliest`` / ``latest``, the
    first / last layer whose interval's upper end reaches the peak accuracy."""
    accuracies = [result["accuracy"] for result in results]
    layer = accuracies.index(max(accuracies))
    level = [index for index, result in enumerate(results) if result["ci_high"] >= accuracies[layer]]
    return {"layer": layer, "accuracy": accuracies[layer], "earliest": level[0], "latest": level[-1]}


def previous_token_rules(trained: dict[int, list[dict]], random_init: dict[int, list[dict]]) -> dict:
    """Decision rules for claim 3 from the probe curves of ``o_{t-k}`` (``{k: [result per layer]}``,
    each with ``accuracy``, ``ci_low``, ``ci_high``), trained and random-init.

    A distance k is *informative* when the trained peak's interval lies above the random-init
    probe's interval at the same layer (otherwise the curve says nothing about the network). On
    the informative distances k1 < k2 < ... (consecutive pairs):

    * ``falls_with_k``: ``holds`` when every pair's peaks are separated downwards (the lower end of
      k's peak above the upper end of the next k's), ``reversed`` when one is separated upwards,
      else ``not separated``;
    * ``peaks_later``: ``holds`` when some pair peaks separably later (the next k's ``earliest``
      level layer after k's ``latest``) and none separably earlier, ``reversed`` in the mirror
      case, else ``not separated``;
    * ``rise_then_fall``: per k, it rose (peak above the embedding's interval) and then fell (the
      last layer's interval below the peak accuracy): ``holds`` when every informative k does,
      ``partly`` when some do, else ``not reproduced``.

    ``decision``: ``holds`` when all three hold, ``not reproduced`` when none does, else ``partly``;
    ``untestable`` with fewer than two informative distances."""
    if sorted(trained) != sorted(random_init):
        raise ValueError(f"random_init: distances {sorted(random_init)}; expected the trained ones {sorted(trained)}")
    peaks = {k: peak_interval(curve) for k, curve in trained.items()}
    informative = [k for k in sorted(trained)
                   if trained[k][peaks[k]["layer"]]["ci_low"] > random_init[k][peaks[k]["layer"]]["ci_high"]]
    report = {"peaks": {str(k): peaks[k] for k in sorted(trained)}, "informative": informative}
    if len(informative) < 2:
        return {**report, "falls_with_k": "untestable", "peaks_later": "untestable", "rise_then_fall": "untestable",
                "decision": "untestable"}
    pairs = list(zip(informative, informative[1:]))

    def separated_down(k: int, following: int) -> bool:
        return trained[k][peaks[k]["layer"]]["ci_low"] > trained[following][peaks[following]["layer"]]["ci_high"]

    if all(separated_down(k, following) for k, following in pairs):
        falls = "holds"
    elif any(separated_down(following, k) for k, following in pairs):
        falls = "reversed"
    else:
        falls = "not separated"
    later = [peaks[following]["earliest"] > peaks[k]["latest"] for k, following in pairs]
    earlier = [peaks[k]["earliest"] > peaks[following]["latest"] for k, following in pairs]
    peaks_later = ("holds" if any(later) and not any(earlier) else
                   "reversed" if any(earlier) and not any(later) else "not separated")

    def rises_and_falls(k: int) -> bool:
        curve, peak = trained[k], peaks[k]
        return curve[0]["ci_high"] < peak["accuracy"] and curve[-1]["ci_high"] < peak["accuracy"]

    shaped = [rises_and_falls(k) for k in informative]
    rise_then_fall = "holds" if all(shaped) else "partly" if any(shaped) else "not reproduced"
    verdicts = [falls, peaks_later, rise_then_fall]
    decision = ("holds" if all(v == "holds" for v in verdicts) else
                "not reproduced" if not any(v == "holds" for v in verdicts) else "partly")
    return {**report, "rise_then_fall_by_k": dict(zip(map(str, informative), shaped)), "falls_with_k": falls,
            "peaks_later": peaks_later, "rise_then_fall": rise_then_fall, "decision": decision}


def per_prompt_half_means(shuffle: dict[str, dict], layers: list[str]) -> torch.Tensor:
    """``(B,)``: each prompt's shuffle metric averaged over ``layers`` (from the summaries'
    ``per_prompt`` lists)."""
    return torch.tensor([shuffle[name]["per_prompt"] for name in layers], dtype=torch.float64).mean(0)


def claims_summary(report: dict, num_layers: int, max_distance: int) -> dict:
    """The numbers and decisions behind the three verdicts of ``docs/analysis.md``, from the
    trained network (and its random-init twin): the shuffle metric of the lower and upper half of
    the layers with :func:`locality_order` (when the report has the shuffle section); for task and
    state the best layer, the first layer reaching 95% of the best accuracy and the crossing of
    95% of the Bayes-optimal ceiling (:func:`first_layer_at_ceiling`, decided by
    :func:`decoding_order`); for each distance k the peak (:func:`peak_interval`) and the last
    layer's accuracy, decided by :func:`previous_token_rules`."""
    layers = [f"layer {layer}" for layer in range(1, num_layers + 1)]
    streams = ["embedding"] + layers
    half = num_layers // 2
    lower, upper = layers[:half], layers[half:]
    probes = report["probes"]

    def first_reaching(values: list[float], fraction: float) -> int:
        return next(index for index, value in enumerate(values) if value >= fraction * max(values))

    timing = {}
    for target in ("task", "state"):
        results = [probes["trained"][target][name] for name in streams]
        values = [result["accuracy"] for result in results]
        ceiling = probes["ceiling"][target]
        timing[target] = {"accuracy_by_layer": values, "best_layer": values.index(max(values)),
                          "first_layer_at_95_percent_of_best": first_reaching(values, 0.95),
                          "ceiling": ceiling,
                          "first_layer_at_95_percent_of_ceiling": first_layer_at_ceiling(results, ceiling["accuracy"])}
    timing["decision"] = decoding_order(timing["task"]["first_layer_at_95_percent_of_ceiling"],
                                        timing["state"]["first_layer_at_95_percent_of_ceiling"])
    curves = {network: {k: [probes[network][f"token {k} back"][name] for name in streams]
                        for k in range(1, max_distance + 1)} for network in ("trained", "random-init")}
    previous = {f"token {k} back": {"accuracy_by_layer": [result["accuracy"] for result in curve],
                                    "last_layer": curve[-1]}
                for k, curve in curves["trained"].items()}
    previous["rules"] = previous_token_rules(curves["trained"], curves["random-init"])
    claims = {"layer_index": "0 = embedding, l = residual stream after layer l",
              "task_vs_state": timing, "previous_tokens": previous}
    if "shuffle" in report:
        shuffle = report["shuffle"]
        claims["shuffle"] = {variant: {"lower_layers": lower, "upper_layers": upper,
                                       "lower_mean": sum(by_layer[name]["mean"] for name in lower) / len(lower),
                                       "upper_mean": sum(by_layer[name]["mean"] for name in upper) / len(upper),
                                       "by_layer": [by_layer[name]["mean"] for name in layers]}
                             for variant, by_layer in shuffle["trained"].items()}
        # Decided on the pairs whose query and key have a full window of context in their own
        # segment: what changes there is due to position alone (docs/analysis.md).
        variant = f"min_context={max_distance}"
        claims["shuffle"]["rule"] = {"variant": variant, **locality_order(
            per_prompt_half_means(shuffle["trained"][variant], lower),
            per_prompt_half_means(shuffle["trained"][variant], upper),
            per_prompt_half_means(shuffle["random-init"][variant], upper))}
    return claims
