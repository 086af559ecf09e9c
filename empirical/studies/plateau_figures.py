"""The plateau study's figure (:mod:`empirical.studies.plateau`): per family, every run's
test-sequence loss minus the in-context bigram's on fresh HMMs, with its 95% paired interval,
against the training budget (below 0 with its interval is the escape the study times), and the
bound on the family's ceiling where the study has one (dashed: no predictor goes below the
ceiling, which lies at or below it); and each
arm's escape range against its family's in-context signal."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

from empirical.plotting import plt
from empirical.studies.plateau import ESCAPE_BASELINE, ESCAPE_SCOPE

SEED_STYLES = ("-", "--", ":", "-.")
BUDGET_TICKS = (0.125, 0.25, 0.5, 1, 2, 4, 8)
"""The escape panel's budget ticks (x the paper's): the study's range, doubling."""


def plot_plateau(study: dict, path: Path) -> None:
    """One panel per family (:func:`plot_family`), then the escape against the signal
    (:func:`plot_escape_against_signal`); arms by colour throughout."""
    families = sorted(study["families"], key=lambda family: study["families"][family]["signal_nats"])
    arms = list(dict.fromkeys(row["arm"] for row in study["arms"]))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    arm_colors = {arm: colors[index % len(colors)] for index, arm in enumerate(arms)}
    figure, axes = plt.subplots(1, len(families) + 1, figsize=(6.0 * (len(families) + 1), 4.5), squeeze=False,
                                constrained_layout=True)
    for axis, family in zip(axes[0], families):
        plot_family(axis, study, family, arm_colors)
    plot_escape_against_signal(axes[0][-1], study, arm_colors)
    figure.suptitle("The plateau study: when a network leaves the in-context unigram counter, per training recipe",
                    fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_family(axis, study: dict, family: str, arm_colors: dict[str, str]) -> None:
    """Each run of ``family``: its ``model - bigram`` (test sequence) against its budget in units of
    the paper's, its interval shaded, its escape marked by a star; seeds by line style."""
    budget = study["paper_budget_tokens"]
    for row in (row for row in study["arms"] if row["family"] == family):
        color = arm_colors[row["arm"]]
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
    signal = study["families"][family]["signal_nats"]
    ceiling = study["families"][family].get("ceiling")
    if ceiling is not None:
        axis.axhline(ceiling["bound_minus_bigram"], color="black", linestyle="--", linewidth=1,
                     label=f"ceiling <= this (collapsed SMC, {ceiling['replicates']} runs averaged)")
    axis.axhline(0, color="black", linewidth=0.8)
    if ceiling is not None:  # keep the bound's line off the frame
        low, high = axis.get_ylim()
        axis.set_ylim(min(low, ceiling["bound_minus_bigram"] - 0.06 * (high - low)), high)
    axis.set_xlabel("training budget (x the paper's 131,072 prompts)")
    axis.set_ylabel("test-sequence loss - in-context bigram's (nats/token)")
    axis.set_title(f"{family} (signal {signal:.3f} nats): below 0 with its interval = escape (star)", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)


def plot_escape_against_signal(axis, study: dict, arm_colors: dict[str, str]) -> None:
    """Each arm's escape range (a bar over its seeds' brackets) at its family's signal, both axes
    logarithmic; an arrow marks an open end: down from a range that starts at 0 (escaped at the
    first point), up from the budget an arm not yet escaped has passed. Arms are spread a little
    around their family's signal, so that they do not hide one another."""
    arms = list(arm_colors)
    for row in study["arms"]:
        color = arm_colors[row["arm"]]
        spread = 1 + 0.03 * (arms.index(row["arm"]) - (len(arms) - 1) / 2)
        signal = study["families"][row["family"]]["signal_nats"] * spread
        escape = row["escape"]
        if escape["escaped"] and escape["range"][0] > 0:
            axis.plot([signal, signal], escape["range"], color=color, linewidth=5, alpha=0.7, solid_capstyle="butt",
                      label=row["arm"])
            continue
        end, factor, label = ((escape["range"][1], 1 / 1.6, row["arm"]) if escape["escaped"]
                              else (escape["after"], 1.6, f"{row['arm']} (not yet)"))
        axis.annotate("", xy=(signal, end * factor), xytext=(signal, end),
                      arrowprops={"arrowstyle": "->", "color": color, "linewidth": 2})
        axis.plot([signal], [end], marker="_", markersize=14, color=color, label=label)
    axis.set_xscale("log")
    axis.set_yscale("log")
    signals = {family: record["signal_nats"] for family, record in study["families"].items()}
    axis.set_xticks(list(signals.values()), [f"{family}\n{signal:.3f}" for family, signal in signals.items()],
                    fontsize=7)
    axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axis.set_yticks(BUDGET_TICKS, [f"{budget:g}" for budget in BUDGET_TICKS])
    axis.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axis.set_xlabel("family's in-context signal: loss(unigram) - loss(bigram), nats/token")
    axis.set_ylabel("escape budget (x the paper's)")
    axis.set_title("escape against signal (bar: (previous point, escape] over seeds)", fontsize=9)
    axis.grid(alpha=0.3, which="both")
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axis.legend(unique.values(), unique.keys(), fontsize=7)
