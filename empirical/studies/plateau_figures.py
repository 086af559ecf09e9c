"""The plateau study's figure (:mod:`empirical.studies.plateau`): per family, every run's
test-sequence loss minus the in-context bigram's on fresh HMMs, with its 95% paired interval,
against the training budget; below 0 with its interval is the escape the study times."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from empirical.studies.plateau import ESCAPE_BASELINE, ESCAPE_SCOPE  # noqa: E402

SEED_STYLES = ("-", "--", ":", "-.")


def plot_plateau(study: dict, path: Path) -> None:
    """One panel per family: each run's ``model - bigram`` (test sequence) against its budget in
    units of the paper's, its interval shaded, its escape marked by a star; arms by colour, seeds by
    line style."""
    families = sorted({row["family"] for row in study["arms"]})
    arms = list(dict.fromkeys(row["arm"] for row in study["arms"]))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    figure, axes = plt.subplots(1, len(families), figsize=(6.5 * len(families), 4.5), squeeze=False,
                                constrained_layout=True)
    budget = study["paper_budget_tokens"]
    for axis, family in zip(axes[0], families):
        for row in (row for row in study["arms"] if row["family"] == family):
            color = colors[arms.index(row["arm"]) % len(colors)]
            seeds = sorted({run["seed"] for run in row["runs"]})
            for run in row["runs"]:
                differences = [point[ESCAPE_SCOPE]["model_minus"][ESCAPE_BASELINE] for point in run["points"]]
                budgets = [point["tokens"] / budget for point in run["points"]]
                axis.plot(budgets, [difference["mean"] for difference in differences], color=color,
                          linestyle=SEED_STYLES[seeds.index(run["seed"]) % len(SEED_STYLES)], marker="o", markersize=2.5,
                          label=f"{row['arm']} (seed {run['seed']})")
                axis.fill_between(budgets, [difference["interval_95"][0] for difference in differences],
                                  [difference["interval_95"][1] for difference in differences], color=color, alpha=0.12)
                if run["escape"]["escaped"]:
                    index = [point["step"] for point in run["points"]].index(run["escape"]["step"])
                    axis.plot(budgets[index], differences[index]["mean"], marker="*", markersize=12, color=color,
                              markeredgecolor="black")
        axis.axhline(0, color="black", linewidth=0.8)
        axis.set_xlabel("training budget (x the paper's 131,072 prompts)")
        axis.set_ylabel("test-sequence loss - in-context bigram's (nats/token)")
        axis.set_title(f"{family}: below 0 with its interval = escape (star)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("The plateau study: when a network leaves the in-context unigram counter, per training recipe",
                    fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)
