"""Figures of the patching section of ``hmmtf analyze`` (:mod:`empirical.analysis.patching`):
state forcing (KL to the exact counterfactual per layer, beside the four controls) and history
patching (recovered fraction per layer and distance, hand-built beside trained). Error bars and
bands are 95% prompt-level bootstrap intervals."""
from __future__ import annotations

import textwrap
from pathlib import Path

from empirical.analysis.patching import CENTROID, CONTROLS, FRACTION_TO_USE
from empirical.plotting import plt

CONDITION_STYLES = {
    CENTROID: ("tab:blue", "o"),
    CONTROLS[0]: ("tab:red", "s"),
    CONTROLS[1]: ("tab:orange", "^"),
    CONTROLS[2]: ("tab:purple", "v"),
    CONTROLS[3]: ("tab:brown", "D"),
}


def plot_state_forcing(forcing: dict, path: Path) -> None:
    """KL from the exact counterfactual ``(T_k O_k)[s]`` to the network's next-token distribution
    per layer, after patching the state-s centroid and each control (points slightly offset so
    that the intervals do not overlap), with the unpatched KL and the own-state floor as bands; a
    section that was not run (no item) is drawn as its reason."""
    figure, axis = plt.subplots(figsize=(10.5, 4.8), constrained_layout=True)
    if "not_run" in forcing:
        axis.axis("off")
        axis.text(0.5, 0.5, "State forcing not run:\n" + textwrap.fill(forcing["not_run"], 90), ha="center",
                  va="center", fontsize=10, transform=axis.transAxes)
    else:
        _forcing_curves(axis, forcing)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def _forcing_curves(axis, forcing: dict) -> None:
    """The KL of every condition per layer, the two bands, the verdicts and the title. The legend
    says what the lines, bands and bars are: means, and bootstrap 95% intervals over prompts."""
    layers = list(forcing["by_layer"])
    references = []
    for name, color, style in (("before", "gray", "-"), ("own_state_floor", "tab:green", "--")):
        summary = forcing[name]
        label = ("unpatched" if name == "before" else "unpatched, against its own\nstate's (T_k O_k)[s0] (floor)")
        line = axis.axhline(summary["mean"], color=color, linestyle=style)
        band = axis.axhspan(summary["ci_low"], summary["ci_high"], color=color, alpha=0.15)
        references.append(((band, line), f"{label}: mean (line),\n95% interval (band)"))
    for index, (condition, (color, marker)) in enumerate(CONDITION_STYLES.items()):
        shift = (index - 2) * 0.06
        values = [forcing["by_layer"][layer]["kl"][condition] for layer in layers]
        means = [value["mean"] for value in values]
        errors = [[m - v["ci_low"] for m, v in zip(means, values)], [v["ci_high"] - m for m, v in zip(means, values)]]
        axis.errorbar([x + shift for x in range(len(layers))], means, yerr=errors, color=color, marker=marker,
                      linewidth=2.5 if condition == CENTROID else 1, capsize=3,
                      label=f"patched: {condition}" + (" (s' != s)" if condition == CONTROLS[0] else ""))
    axis.set_yscale("log")
    axis.set_xticks(range(len(layers)), [f"{layer}\nuses the state: {'yes' if forcing['by_layer'][layer]['uses_state'] else 'no'}"
                                         for layer in layers])
    axis.set_xlabel("residual stream patched: after layer l (blocks.{l-1}.hook_resid_post), with the verdict of the "
                    "decision rule")
    axis.set_ylabel("KL((T_k O_k)[s] || network), nats")
    axis.grid(alpha=0.3, which="both")
    handles, labels = axis.get_legend_handles_labels()
    axis.legend([handle for handle, _ in references] + handles, [label for _, label in references] + labels,
                fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                title="means; bands and bars: bootstrap\n95% intervals over prompts", title_fontsize=8)
    axis.set_title(f"State forcing: {forcing['items']} test positions of {forcing['prompts_with_items']} prompts, "
                   f"state posterior >= {forcing['threshold']}", fontsize=10)


def _fraction_curves(axis, by_distance: dict, reference: str) -> None:
    """One curve per distance r of the recovered fraction against ``reference`` (``exact`` or
    ``own``) over layers, with its interval as a band."""
    colormap = plt.get_cmap("viridis")
    distances = list(by_distance)
    for index, distance in enumerate(distances):
        results = by_distance[distance][reference]
        layers = list(results)
        x = range(len(layers))
        color = colormap(index / max(len(distances) - 1, 1))
        axis.plot(x, [results[n]["fraction"] for n in layers], marker="o", markersize=3, color=color, label=distance)
        axis.fill_between(x, [results[n]["ci_low"] for n in layers], [results[n]["ci_high"] for n in layers],
                          color=color, alpha=0.15)
        axis.set_xticks(list(x), layers, rotation=45, ha="right")
    axis.axhline(0, color="black", linewidth=0.8)
    axis.axhline(1, color="gray", linewidth=0.8, linestyle=":")
    axis.grid(alpha=0.3)


def plot_history_patching(history: dict, path: Path) -> None:
    """Two columns (hand-built, trained) and two rows: the fraction of the exact change
    recovered by swapping the last position's stream after each layer (top; dashed: the decision
    threshold), and the fraction of the network's own response to the modified token (bottom)."""
    figure, axes = plt.subplots(2, 2, figsize=(12, 8), constrained_layout=True,
                                gridspec_kw={"width_ratios": [1.6, 1]})
    for column, network in enumerate(("hand-built", "trained")):
        for row, (reference, label) in enumerate((("exact", "fraction of the exact change recovered"),
                                                  ("own", "fraction of the network's own change"))):
            axis = axes[row, column]
            _fraction_curves(axis, history[network]["by_distance"], reference)
            axis.set_ylabel(label)
            axis.set_xlabel("last position's stream swapped after")
            axis.set_ylim(-0.6, 1.3)
            if reference == "exact":
                axis.axhline(FRACTION_TO_USE, color="tab:red", linestyle="--", linewidth=1, label="decision threshold")
            axis.legend(fontsize=7, title="token r back", title_fontsize=7, loc="upper left")
            steps = f", {history[network]['gd_steps']} GD steps" if "gd_steps" in history[network] else ""
            axis.set_title(f"{network} network ({history[network]['prompts']} prompts{steps})", fontsize=10)
    figure.suptitle("History patching: the token r steps before the last position replaced; the stream of the last "
                    "position after each layer\ntaken from the run on the modified prompt (bands: 95% bootstrap over "
                    "prompts, clipped to the axes)", fontsize=10)
    figure.savefig(path, dpi=120)
    plt.close(figure)
