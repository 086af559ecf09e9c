"""Figures of an evaluation (the paper's Figure 1 beside the Bayes-optimal and unigram
predictors), of a training run's loss curve, and of a calibration of the Dirichlet concentration."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

STYLES = {
    "model": {"color": "tab:blue", "marker": "o", "label": "RoFormer"},
    "bayes": {"color": "black", "marker": "s", "label": "Bayes-optimal"},
    "unigram": {"color": "tab:gray", "marker": "^", "label": "unigram"},
}


def _draw_curves(axis, curve: dict, x_key: str, metric: str) -> None:
    x = curve[x_key]
    for name, style in STYLES.items():
        if name not in curve:
            continue
        mean = curve[name][metric]
        stderr = curve[name][f"{metric}_stderr"]
        axis.errorbar(x, mean, yerr=stderr, capsize=2, linestyle="-", markersize=4, **style)


def plot_in_context(evaluation: dict, path: Path) -> None:
    """2 x 2 panels: top-1 accuracy and loss vs number of demonstrations and vs position in the
    test sequence, for every predictor of ``evaluation`` (from :func:`evaluate_predictors`)."""
    figure, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    panels = [
        ("by_demonstrations", "num_demonstrations", "number of demonstrations"),
        ("by_test_position", "position", "position in the test sequence"),
    ]
    for column, (key, x_key, x_label) in enumerate(panels):
        for row, (metric, y_label) in enumerate((("accuracy", "top-1 accuracy"), ("loss", "loss (nats/token)"))):
            axis = axes[row, column]
            _draw_curves(axis, evaluation[key], x_key, metric)
            axis.set_xlabel(x_label)
            axis.set_ylabel(y_label)
            axis.grid(alpha=0.3)
    axes[0, 0].legend()
    fmt = evaluation["prompt_format"]
    figure.suptitle(
        f"{evaluation['num_prompts']} held-out prompts, {fmt['num_demos']} demonstrations of "
        f"{fmt['demo_length']} tokens, test sequence of {fmt['test_length']} (mean +- s.e.)"
    )
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_training_loss(metrics_path: Path, evaluation: dict, path: Path) -> None:
    """Training loss (JSON-lines log) vs step, with the held-out Bayes-optimal and unigram losses
    over all predicted positions as horizontal lines."""
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    figure, axis = plt.subplots(figsize=(6, 4), constrained_layout=True)
    axis.plot([r["step"] for r in records], [r["loss"] for r in records], color=STYLES["model"]["color"],
              label="RoFormer (training batches)")
    scope = evaluation["excess_all_positions"]
    axis.axhline(scope["bayes_loss"], color=STYLES["bayes"]["color"], linestyle="--", label="Bayes-optimal (held out)")
    axis.axhline(scope["unigram_loss"], color=STYLES["unigram"]["color"], linestyle=":", label="unigram (held out)")
    axis.set_xlabel("step")
    axis.set_ylabel("loss (nats/token)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_calibration(report: dict, path: Path) -> None:
    """Bayes-optimal top-1 accuracy (left) and Bayes-optimal and unigram losses (right) vs number of
    demonstrations, one curve per concentration of ``report`` (from :func:`empirical.calibrate.calibrate`)."""
    figure, (accuracy_axis, loss_axis) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for entry in report["results"]:
        label = f"Dirichlet({entry['concentration']:g})"
        accuracy_axis.errorbar(entry["num_demonstrations"], entry["bayes_accuracy"], yerr=entry["bayes_accuracy_stderr"], marker="o", capsize=2, label=label)
        line = loss_axis.plot(entry["num_demonstrations"], entry["bayes_loss"], marker="o", label=f"{label} Bayes")[0]
        loss_axis.plot(entry["num_demonstrations"], entry["unigram_loss"], linestyle=":", color=line.get_color(), label=f"{label} unigram")
    accuracy_axis.set(xlabel="number of demonstrations", ylabel="Bayes-optimal top-1 accuracy")
    loss_axis.set(xlabel="number of demonstrations", ylabel="loss (nats/token)")
    for axis in (accuracy_axis, loss_axis):
        axis.grid(alpha=0.3)
    accuracy_axis.legend()
    loss_axis.legend(fontsize=7, ncol=2)
    figure.suptitle(f"In-context signal of the '{report['preset']}' mixture vs Dirichlet concentration ({report['num_prompts']} prompts, mean +- s.e.)")
    figure.savefig(path, dpi=130)
    plt.close(figure)
