"""Figures of the scale ladder (:mod:`empirical.studies.ladder`): one per claim (its statistic against
the number of training tasks, one line per model, the paper's stated result marked), the regime
statistics, and the learning curves the ladder's size was chosen from."""
from __future__ import annotations

import json
from pathlib import Path

from empirical.plotting import plt
from empirical.yardsticks.regime import MEMORISATION_TOLERANCE

MODEL_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")
PAPER_STYLE = {"color": "tab:green", "alpha": 0.12}
"""Shading of the region where the paper's stated result lies."""


def model_label(model: dict) -> str:
    return f"{model['num_layers']} layers x {model['num_heads']} heads x {model['width']}"


def by_model(points: list[dict]) -> dict[str, list[dict]]:
    """The points grouped by model (label -> points in order of task count)."""
    groups: dict[str, list[dict]] = {}
    for point in points:
        groups.setdefault(model_label(point["model"]), []).append(point)
    return {label: sorted(group, key=lambda point: point["tasks"]) for label, group in groups.items()}


def task_axis(axis, points: list[dict]) -> None:
    """Log-2 x axis ticked at the ladder's task counts."""
    counts = sorted({point["tasks"] for point in points})
    axis.set_xscale("log", base=2)
    axis.set_xticks(counts, [str(count) for count in counts])
    axis.minorticks_off()
    axis.set_xlabel("training tasks (HMMs)")
    axis.grid(alpha=0.3)


def draw_interval_lines(axis, points: list[dict], value, interval, **style) -> None:
    """One error-bar line per model: ``value(point)`` with ``interval(point) = (low, high)``."""
    for color, (label, group) in zip(MODEL_COLORS, by_model(points).items()):
        x = [point["tasks"] for point in group]
        y = [value(point) for point in group]
        low = [y_i - interval(point)[0] for y_i, point in zip(y, group)]
        high = [interval(point)[1] - y_i for y_i, point in zip(y, group)]
        axis.errorbar(x, y, yerr=[low, high], color=color, marker="o", capsize=3, label=label, **style)


def plot_regime_ladder(points: list[dict], path: Path) -> None:
    """Memorisation (fraction of the training gap, 95% interval) with the rule's bar; excess over
    the training mixture's Bayes predictor (fraction of the gap); on fresh HMMs, the excess over
    the oracle of the model and of the two finite-mixture Bayes predictors."""
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.3), constrained_layout=True)
    draw_interval_lines(axes[0], points, lambda p: p["memorisation_fraction_of_gap"],
                        lambda p: p["memorisation_interval_fraction_of_gap"])
    axes[0].axhline(MEMORISATION_TOLERANCE, color="black", linestyle="--", linewidth=1,
                    label=f"rule's bar ({MEMORISATION_TOLERANCE:.0%} of the gap)")
    axes[0].set_ylabel("fresh minus training excess over the oracle\n(fraction of the unigram-to-Bayes gap)")
    axes[0].set_title("memorisation (below the bar: in context)", fontsize=10)
    for color, (label, group) in zip(MODEL_COLORS, by_model(points).items()):
        x = [point["tasks"] for point in group]
        axes[1].plot(x, [point["excess_over_gap"] for point in group], color=color, marker="o", label=label)
        axes[2].plot(x, [point["fresh_loss"]["model"] - point["fresh_loss"]["oracle"] for point in group],
                     color=color, marker="o", label=f"RoFormer {label}")
    axes[1].set_ylabel("excess loss over Bayes (training mixture)\n(fraction of the unigram-to-Bayes gap)")
    axes[1].set_title("the paper's Figure 1 measure, training HMMs", fontsize=10)
    reference = sorted(points, key=lambda point: point["tasks"])
    x = [point["tasks"] for point in reference]
    axes[2].plot(x, [p["fresh_loss"]["bayes_training"] - p["fresh_loss"]["oracle"] for p in reference],
                 color="black", linestyle="--", marker="s", label="Bayes of the training mixture")
    axes[2].plot(x, [p["fresh_loss"]["bayes_reference"] - p["fresh_loss"]["oracle"] for p in reference],
                 color="tab:purple", linestyle=":", marker="D", label="Bayes of the reference mixture")
    axes[2].set_ylabel("loss minus oracle loss on fresh HMMs (nats/token)")
    axes[2].set_title("fresh HMMs: above the oracle, the ceiling lies below\nthe best valid predictor", fontsize=10)
    for axis in axes:
        task_axis(axis, points)
        axis.legend(fontsize=7)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_claim1_ladder(points: list[dict], path: Path) -> None:
    """Claim 1: lower-half minus upper-half shuffle metric (position-only pairs) with its 95%
    interval; the paper's result is above 0."""
    figure, axis = plt.subplots(figsize=(6.5, 4.3), constrained_layout=True)
    draw_interval_lines(axis, points, lambda p: p["claim1"]["lower_minus_upper"]["mean"],
                        lambda p: (p["claim1"]["lower_minus_upper"]["ci_low"], p["claim1"]["lower_minus_upper"]["ci_high"]))
    axis.axhline(0, color="black", linewidth=1)
    top = max(0.1, *(p["claim1"]["lower_minus_upper"]["ci_high"] for p in points)) * 1.2
    axis.axhspan(0, top, **PAPER_STYLE, label="paper: lower layers more positional")
    axis.set_ylim(top=top)
    for point in points:
        axis.annotate(point["claim1"]["decision"], (point["tasks"], point["claim1"]["lower_minus_upper"]["mean"]),
                      textcoords="offset points", xytext=(4, 4), fontsize=7)
    axis.set_ylabel("shuffle metric, lower minus upper half of the layers")
    axis.set_title("Claim 1 (Figure 2): lower layers local, upper position-independent", fontsize=10)
    task_axis(axis, points)
    axis.legend(fontsize=7)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def crossing_value(crossing: dict, key: str, num_layers: int) -> float:
    """A crossing layer as a fraction of the depth; a probe that never crosses is drawn at 1.15."""
    return 1.15 if crossing[key] is None else crossing[key] / num_layers


def plot_claim2_ladder(points: list[dict], path: Path) -> None:
    """Claim 2: each probe's best accuracy as a fraction of its Bayes-optimal ceiling (the rule's
    bar at 0.95), and the layer (fraction of the depth) where it first reaches the bar, with that
    layer's interval; the paper's result is the state first."""
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.3), constrained_layout=True)
    for color, (label, group) in zip(MODEL_COLORS, by_model(points).items()):
        x = [point["tasks"] for point in group]
        for target, style in (("task", "-"), ("state", "--")):
            axes[0].plot(x, [point["claim2"][f"{target}_best_fraction_of_ceiling"] for point in group], color=color,
                         linestyle=style, marker="o", label=f"{target}, {label}")
            depth = [point["model"]["num_layers"] for point in group]
            crossings = [point["claim2"][f"{target}_crossing"] for point in group]
            y = [crossing_value(c, "estimate", d) for c, d in zip(crossings, depth)]
            low = [max(0.0, y_i - crossing_value(c, "earliest", d)) for y_i, c, d in zip(y, crossings, depth)]
            high = [max(0.0, crossing_value(c, "latest", d) - y_i) for y_i, c, d in zip(y, crossings, depth)]
            axes[1].errorbar(x, y, yerr=[low, high], color=color, linestyle=style, marker="o", capsize=3,
                             label=f"{target}, {label}")
    axes[0].axhline(0.95, color="black", linestyle=":", linewidth=1, label="the rule's bar (95% of the ceiling)")
    axes[0].set_ylabel("best probe accuracy / Bayes-optimal ceiling")
    axes[0].set_ylim(0, 1.05)
    axes[0].set_title("how close each probe gets to its ceiling", fontsize=10)
    axes[1].axhline(1.15, color="gray", linestyle=":", linewidth=1)
    axes[1].text(min(p["tasks"] for p in points), 1.17, "never reaches 95% of its ceiling", fontsize=7)
    axes[1].set_ylabel("first layer at 95% of the ceiling / number of layers")
    axes[1].set_ylim(-0.05, 1.25)
    axes[1].set_title("where (paper: the state before the task)", fontsize=10)
    for axis in axes:
        task_axis(axis, points)
        axis.legend(fontsize=7)
    decisions = ", ".join(f"{p['tasks']}/{p['model']['num_layers']}L: {p['claim2']['decision']}" for p in points)
    figure.suptitle(f"Claim 2 (Figure 3a). Rule: {decisions}", fontsize=9)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_claim3_ladder(points: list[dict], path: Path) -> None:
    """Claim 3: accuracy lost after the peak of the o_{t-1} probe (95% interval; the paper: > 0,
    rise then fall), and the peak layer of every distance k (the paper: later for larger k)."""
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.3), constrained_layout=True)
    draw_interval_lines(axes[0], points, lambda p: p["claim3"]["drop_after_peak_k1"],
                        lambda p: p["claim3"]["drop_after_peak_k1_interval"])
    axes[0].axhline(0, color="black", linewidth=1)
    top = max(0.05, *(p["claim3"]["drop_after_peak_k1_interval"][1] for p in points)) * 1.2
    axes[0].axhspan(0, top, **PAPER_STYLE, label="paper: rises then falls")
    axes[0].set_ylim(top=top)
    axes[0].set_ylabel("peak minus last-layer accuracy, o_{t-1} probe")
    axes[0].set_title("rise then fall", fontsize=10)
    for color, (label, group) in zip(MODEL_COLORS, by_model(points).items()):
        for offset, point in enumerate(group):
            peaks = point["claim3"]["peak_layers"]
            distances = sorted(peaks, key=int)
            axes[1].plot([int(k) for k in distances], [peaks[k] / point["model"]["num_layers"] for k in distances],
                         color=color, marker="o", alpha=0.35 + 0.65 * (offset + 1) / len(group),
                         label=f"{label}, {point['tasks']} tasks")
    distances = sorted({int(k) for point in points for k in point["claim3"]["peak_layers"]})
    axes[1].set_xticks(distances)
    axes[1].set_xlabel("distance k of the o_{t-k} probe")
    axes[1].set_ylabel("peak layer / number of layers")
    axes[1].set_title("peak layer by k (paper: later for larger k); darker = more tasks", fontsize=10)
    axes[1].grid(alpha=0.3)
    axes[1].legend(fontsize=6, ncol=2)
    task_axis(axes[0], points)
    axes[0].legend(fontsize=7)
    decisions = ", ".join(f"{p['tasks']}/{p['model']['num_layers']}L: {p['claim3']['decision']}" for p in points)
    figure.suptitle(f"Claim 3 (Figure 3b). Rule: {decisions}", fontsize=9)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_learning_curves(points: list[dict], root: Path, path: Path) -> None:
    """Training loss against step of every point (its ``metrics.jsonl``), one panel per task
    count, with the held-out Bayes-optimal (training mixture) and oracle losses."""
    counts = sorted({point["tasks"] for point in points})
    figure, axes = plt.subplots(1, len(counts), figsize=(4 * len(counts), 3.8), sharey=True, constrained_layout=True,
                                squeeze=False)
    colors = dict(zip(by_model(points), MODEL_COLORS))
    for axis, count in zip(axes[0], counts):
        for point in (p for p in points if p["tasks"] == count):
            records = [json.loads(line) for line in (Path(root) / point["folder"] / "metrics.jsonl").read_text()
                       .splitlines() if line.strip()]
            axis.plot([r["step"] for r in records], [r["loss"] for r in records], linewidth=0.8,
                      color=colors[model_label(point["model"])], label=model_label(point["model"]))
        point = next(p for p in points if p["tasks"] == count)
        axis.axhline(point["training_loss"]["bayes"], color="black", linestyle="--", linewidth=1, label="Bayes")
        axis.axhline(point["training_loss"]["oracle"], color="tab:green", linestyle="--", linewidth=1, label="oracle")
        axis.axhline(point["training_loss"]["unigram"], color="gray", linestyle=":", linewidth=1, label="unigram")
        axis.set_title(f"{count} tasks ({point['prompts_per_task']:.0f} prompts per task)", fontsize=10)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=6)
    axes[0][0].set_ylabel("training loss (nats/token)")
    figure.savefig(path, dpi=130)
    plt.close(figure)
