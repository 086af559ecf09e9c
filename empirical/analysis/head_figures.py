"""The figure of ``hmmtf heads`` (:mod:`empirical.analysis.heads`): the head map, every score of
every head of the trained RoFormer beside its random-init twin, and the ablation table as bars."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.patches import Rectangle

from empirical.plotting import plt

NETWORK_TITLES = {"trained": "trained", "random-init": "random-init"}
SCOPE_TITLES = {"all_positions": "all positions", "test_sequence": "test sequence"}
GROUP_COLORS = {"previous-token": "tab:blue", "induction": "tab:orange"}


def _head_map(axis, scores: list[list[float]] | None, title: str):
    """One score of every head as a (layer x head) heat-map with its values written in."""
    matrix = np.full((1, 1), np.nan) if scores is None else np.array(scores, dtype=float)
    image = axis.imshow(matrix, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (layer, head), value in np.ndenumerate(matrix):
        axis.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=7,
                  color="black" if value > 0.6 else "white")
    axis.set_xticks(range(matrix.shape[1]), [str(head) for head in range(matrix.shape[1])])
    axis.set_yticks(range(matrix.shape[0]), [str(layer + 1) for layer in range(matrix.shape[0])])
    axis.set_xlabel("head")
    axis.set_ylabel("layer")
    axis.set_title(title, fontsize=9)
    return image


def _outline(axis, selection: dict, name: str) -> None:
    """Red frames around the heads selected by the family of the score ``name``."""
    for group, chosen in selection.items():
        if name.startswith(f"{group} "):
            for head in chosen["heads"]:
                axis.add_patch(Rectangle((head["head"] - 0.5, head["layer"] - 1.5), 1, 1, fill=False, edgecolor="red",
                                         linewidth=2))


def _ablation_bars(axis, ablation: dict, scope: str) -> None:
    """Per reference, the change of the mean KL when each group is ablated and when as many random
    heads are (hatched; dots: the single random sets), with paired 95% intervals."""
    references = ablation["references"]
    groups = ablation["groups"]
    bars = [(group, kind) for group in groups for kind in ("change", "random_change")]
    width = 0.8 / len(bars)
    x = np.arange(len(references))
    for index, (group, kind) in enumerate(bars):
        position = x - 0.4 + width * (index + 0.5)
        entries = [groups[group][scope][name][kind] for name in references]
        means = np.array([entry["mean"] for entry in entries])
        intervals = np.array([entry["interval_95"] for entry in entries]).T
        heads = ", ".join(f"L{h['layer']}h{h['head']}" for h in groups[group]["heads"])
        label = f"{group} heads ({heads})" if kind == "change" else f"{len(groups[group]['heads'])} random heads outside the {group} group"
        axis.bar(position, means, width, color=GROUP_COLORS.get(group, "tab:gray"),
                 alpha=1.0 if kind == "change" else 0.45, hatch=None if kind == "change" else "//", label=label,
                 yerr=np.abs(intervals - means), capsize=2, error_kw={"linewidth": 0.8})
        if kind == "random_change":
            draws = np.array([[draw["mean"] for draw in groups[group][scope][name]["random_change_by_draw"]]
                              for name in references])
            axis.scatter(np.repeat(position, draws.shape[1]), draws.ravel(), s=6, color="black", zorder=3,
                         label="one random set" if index == len(bars) - 1 else None)
    before = ablation["before"][scope]
    axis.set_xticks(x, [f"{name}\n(before {before[name]['mean']:.3f})" for name in references], fontsize=8)
    axis.axhline(0.0, color="gray", linewidth=0.8)
    axis.set_ylabel("KL(reference || model): after - before (nats)")
    axis.set_title(f"mean-ablation, {SCOPE_TITLES.get(scope, scope)} (per-prompt paired 95% intervals)", fontsize=9)
    axis.grid(axis="y", alpha=0.3)


def plot_heads(report: dict, path: Path) -> None:
    """Top: a (layer x head) heat-map of each score, trained (first row) beside random-init
    (second row), chance level in the titles. Bottom: the ablation table as bars, one panel per
    scope (``report``: :func:`empirical.analysis.heads.heads_report`)."""
    scores = report["scores"]
    names = list(scores["trained"])
    scopes = [scope for scope in SCOPE_TITLES if scope in report["ablation"]["before"]]
    figure = plt.figure(figsize=(max(3.2 * len(names), 12), 11), constrained_layout=True)
    top, bottom = figure.subfigures(2, 1, height_ratios=[1.1, 1])
    maps = top.subplots(len(scores), len(names), squeeze=False)
    for row, (network, by_name) in enumerate(scores.items()):
        for column, name in enumerate(names):
            chance = by_name[name]["chance"]
            chance_text = "no query" if chance is None else f"chance {chance:.3f}"
            image = _head_map(maps[row, column], by_name[name]["score"],
                              f"{NETWORK_TITLES.get(network, network)}: {name}\n({chance_text})")
            if network == "trained":
                _outline(maps[row, column], report["selection"], name)
    top.colorbar(image, ax=maps, shrink=0.7, label="mean attention mass on the scored keys")
    top.suptitle("Head scores: previous-token d = mass on key i - d; induction n = mass on the keys that followed "
                 "the n tokens ending at i (red: the heads ablated)", fontsize=10)
    panels = bottom.subplots(1, len(scopes), squeeze=False)[0]
    for axis, scope in zip(panels, scopes):
        _ablation_bars(axis, report["ablation"], scope)
    handles, labels = panels[0].get_legend_handles_labels()
    bottom.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), fontsize=8)
    figure.savefig(path, dpi=110)
    plt.close(figure)
