"""The scale ladder (``hmmtf ladder``): the regime statistic and the three claims' statistics and
decisions of every trained ladder point (task count x model, :data:`empirical.training.presets.LADDER_TASK_COUNTS`
and :data:`~empirical.training.presets.LADDER_MODELS`), gathered from the points' ``evaluation.json``
(``hmmtf evaluate``, with its ``regime`` section) and ``analysis.json`` (``hmmtf analyze
--sections shuffle probes``) into ``ladder.json`` and one figure per claim
(:mod:`empirical.studies.ladder_figures`).

Per point (docs/empirical.md, "Regimes", and docs/analysis.md, "Decision rules"):

* regime: memorisation as a fraction of the training gap with its 95% interval and verdict; the
  excess loss over the training mixture's Bayes predictor as a fraction of the unigram-to-Bayes
  gap (the paper's Figure 1 measure); on fresh HMMs the model's loss beside the oracle and the
  two finite-mixture Bayes predictors that bracket the in-context ceiling;
* claim 1: ``lower - upper`` shuffle metric (position-only pairs) with its interval, decision;
* claim 2: the layers where the task and the state probes cross 95% of their ceilings (with
  their interval), each probe's best accuracy as a fraction of its ceiling, decision;
* claim 3: the accuracy lost after the peak of the ``o_{t-1}`` probe, the peak layers of every
  distance, the three sub-decisions and the decision.
"""
from __future__ import annotations

import json
from pathlib import Path

from empirical.training.result_files import ANALYSIS_FILE, EVALUATION_FILE


def regime_statistics(evaluation: dict) -> dict:
    """The regime part of a point's statistics, from its ``evaluation.json``."""
    if "regime" not in evaluation:
        raise ValueError(f"evaluation: {evaluation.get('checkpoint')!r} has no 'regime' section; expected an "
                         f"evaluation by `hmmtf evaluate` with --fresh-tasks > 0")
    regime = evaluation["regime"]
    memorisation = regime["memorisation"]["all_positions"]
    gap = memorisation["training_gap"]
    fresh = regime["fresh_hmms"]["all_positions"]
    return {
        "excess_over_gap": evaluation["excess_all_positions"]["model"]["excess_over_gap"],
        "excess_over_gap_test_sequence": evaluation["excess_test_sequence"]["model"]["excess_over_gap"],
        "memorisation_fraction_of_gap": memorisation["fraction_of_gap"],
        "memorisation_interval_fraction_of_gap": [value / gap for value in memorisation["interval_95"]],
        "memorisation_verdict": memorisation["verdict"],
        "fresh_loss": {name: fresh[name]["loss"] for name in ("model", "oracle", "bayes_training", "bayes_reference",
                                                              "unigram")},
        "training_loss": {name: evaluation["all_positions"][name]["loss"] for name in ("model", "oracle", "bayes",
                                                                                      "unigram")},
    }


def claim_statistics(analysis: dict) -> dict:
    """The three claims' statistics and decisions, from a point's ``analysis.json`` (its
    ``claims`` section, made with the shuffle and probe sections)."""
    claims = analysis.get("claims", {})
    if "shuffle" not in claims:
        raise ValueError(f"analysis: {analysis.get('checkpoint')!r} has no shuffle claims; expected `hmmtf analyze` "
                         f"with --sections shuffle probes")
    locality = claims["shuffle"]["rule"]
    timing = claims["task_vs_state"]
    rules = claims["previous_tokens"]["rules"]
    first = claims["previous_tokens"]["token 1 back"]
    peak = rules["peaks"]["1"]
    return {
        "claim1": {"decision": locality["decision"], "lower_minus_upper": locality["lower_minus_upper"],
                   "upper_minus_random_init": locality["upper_minus_random_init"]},
        "claim2": {
            "decision": timing["decision"],
            **{f"{target}_crossing": timing[target]["first_layer_at_95_percent_of_ceiling"]
               for target in ("task", "state")},
            **{f"{target}_best_fraction_of_ceiling":
               max(timing[target]["accuracy_by_layer"]) / timing[target]["ceiling"]["accuracy"]
               for target in ("task", "state")},
        },
        "claim3": {
            "decision": rules["decision"],
            **{rule: rules[rule] for rule in ("falls_with_k", "peaks_later", "rise_then_fall")},
            "informative": rules["informative"],
            "peak_layers": {k: result["layer"] for k, result in rules["peaks"].items()},
            "drop_after_peak_k1": peak["accuracy"] - first["last_layer"]["accuracy"],
            "drop_after_peak_k1_interval": [peak["accuracy"] - first["last_layer"]["ci_high"],
                                            peak["accuracy"] - first["last_layer"]["ci_low"]],
        },
    }


def point_statistics(evaluation: dict, analysis: dict) -> dict:
    """Everything the ladder reports about one trained point."""
    if evaluation["checkpoint"] != analysis["checkpoint"] or evaluation["step"] != analysis["step"]:
        raise ValueError(f"analysis: checkpoint {analysis['checkpoint']!r} at step {analysis['step']}; expected the "
                         f"evaluated {evaluation['checkpoint']!r} at step {evaluation['step']}")
    model, train, task = evaluation["model"], evaluation["train"], evaluation["task"]
    summary = evaluation.get("train_summary") or {}
    tasks = task["mixture_spec"]["num_tasks"]
    return {
        "preset": task["preset"],
        "tasks": tasks,
        "model": {key: model[key] for key in ("num_layers", "num_heads", "width")},
        "parameters": summary.get("parameters"),
        "steps": evaluation["step"],
        "prompts_per_task": evaluation["step"] * train["batch_size"] / tasks,
        "train_wall_time_s": summary.get("wall_time_s"),
        "commands": {"train": summary.get("command"), "evaluate": evaluation["command"],
                     "analyze": analysis["command"]},
        "git_commits": {"evaluate": evaluation.get("git_commit"), "analyze": analysis.get("git_commit")},
        **regime_statistics(evaluation),
        **claim_statistics(analysis),
    }


def collect_points(root: Path) -> list[dict]:
    """The statistics of every folder under ``root`` that holds both JSONs, ordered by model
    depth, width and task count."""
    folders = sorted(folder for folder in Path(root).iterdir()
                     if (folder / EVALUATION_FILE).is_file() and (folder / ANALYSIS_FILE).is_file())
    if not folders:
        raise ValueError(f"root: {str(root)!r} has no folder with both {EVALUATION_FILE} and {ANALYSIS_FILE}; "
                         f"expected one per ladder point")
    points = [point_statistics(json.loads((folder / EVALUATION_FILE).read_text()),
                               json.loads((folder / ANALYSIS_FILE).read_text())) | {"folder": folder.name}
              for folder in folders]
    return sorted(points, key=lambda point: (point["model"]["num_layers"], point["model"]["width"], point["tasks"]))


def ladder_table(points: list[dict]) -> str:
    """The points as a markdown table: regime, and each claim's statistic with its interval and
    decision (``ladder.md``, quoted by docs/analysis.md and docs/empirical.md)."""
    def span(value: float, low: float, high: float, digits: int = 2) -> str:
        return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    def crossing(result: dict) -> str:
        return "never" if result["estimate"] is None else f"{result['estimate']}"

    rows = ["| tasks | model | prompts per task | training (s) | excess / gap | memorisation / gap | claim 1: "
            "lower - upper shuffle | claim 2: task, state at 95% of ceiling (layer) | claim 3: falls, later, "
            "rise-fall |",
            "|---|---|---|---|---|---|---|---|---|"]
    for point in points:
        model = point["model"]
        low, high = point["memorisation_interval_fraction_of_gap"]
        locality = point["claim1"]["lower_minus_upper"]
        claim2, claim3 = point["claim2"], point["claim3"]
        wall = point["train_wall_time_s"]
        rows.append(
            f"| {point['tasks']} | {model['num_layers']}x{model['num_heads']}x{model['width']} | "
            f"{point['prompts_per_task']:.0f} | {'-' if wall is None else f'{wall:.0f}'} | "
            f"{point['excess_over_gap']:.2f} | {span(point['memorisation_fraction_of_gap'], low, high)} "
            f"**{point['memorisation_verdict']}** | {span(locality['mean'], locality['ci_low'], locality['ci_high'])} "
            f"**{point['claim1']['decision']}** | {crossing(claim2['task_crossing'])}, "
            f"{crossing(claim2['state_crossing'])} of {model['num_layers']} **{claim2['decision']}** | "
            f"{claim3['falls_with_k']}, {claim3['peaks_later']}, {claim3['rise_then_fall']} "
            f"**{claim3['decision']}** |")
    return "\n".join(rows) + "\n"
