"""The depth study's figure (:mod:`empirical.studies.depth`): a row per family, three panels.

1. The test-sequence loss's distance to the ceiling's upper bound (``model - ceiling``, circles)
   and to the variable-order predictor (``model - variable order``, squares) against the number of
   layers, each with its 95% interval; filled where the network is competent.
2. The previous-token probes (tokens 1 to 3 back) and the hidden-state probe against the layer as a
   share of the network's depth (0: the embedding), a colour per depth; the dotted line is the
   rule's threshold.
3. The best head's previous-token and induction score above chance at each layer, against the
   same share of depth.
"""
from __future__ import annotations

from pathlib import Path

from empirical.plotting import plt
from empirical.studies.depth import HELD, PROBE_TOKENS

PROBE_STYLES = {PROBE_TOKENS[0]: "-", PROBE_TOKENS[1]: "--", PROBE_TOKENS[2]: ":", "state": "-."}
HEAD_STYLES = {"previous-token": "-", "induction": "--"}
DISTANCES = {"minus_ceiling_bound": ("o", "C0", "model - ceiling's upper bound"),
             "minus_variable_order": ("s", "C3", "model - variable order (CTW)")}


def plot_depth(study: dict, path: Path) -> None:
    """The three panels (:func:`plot_distances`, :func:`plot_probes`, :func:`plot_heads`) per family."""
    families = list(study["families"])
    depths = sorted({row["layers"] for family in families for row in study["families"][family]["networks"]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    depth_colors = {depth: colors[index % len(colors)] for index, depth in enumerate(depths)}
    figure, axes = plt.subplots(len(families), 3, figsize=(16.0, 4.2 * len(families)), squeeze=False,
                                constrained_layout=True)
    for row_axes, family in zip(axes, families):
        networks = study["families"][family]["networks"]
        plot_distances(row_axes[0], family, networks)
        plot_probes(row_axes[1], family, networks, depth_colors)
        plot_heads(row_axes[2], family, networks, depth_colors)
    figure.suptitle("What depth changes at 128 states: the loss's distance to the ceiling's bound, the probes and the "
                    "history heads, per number of layers", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_distances(axis, family: str, networks: list[dict]) -> None:
    for key, (marker, color, label) in DISTANCES.items():
        points = [row for row in networks if row[key] is not None]
        axis.plot([row["layers"] for row in points], [row[key]["mean"] for row in points], color=color,
                  linewidth=1, label=label)
        for row in points:
            value = row[key]
            low, high = value["interval_95"]
            axis.errorbar([row["layers"]], [value["mean"]], yerr=[[value["mean"] - low], [high - value["mean"]]],
                          marker=marker, color=color, capsize=3, linestyle="none",
                          markerfacecolor=color if row["competent"] else "white")
    axis.axhline(0.0, color="grey", linewidth=0.8)
    axis.set_xscale("log", base=2)
    layers = sorted(row["layers"] for row in networks)
    axis.set_xticks(layers, labels=[str(depth) for depth in layers])
    axis.set_xlabel("layers")
    axis.set_ylabel("test-sequence loss difference (nats)")
    axis.set_title(f"{family}: distance to the bound and to CTW (hollow: not competent)", fontsize=9)
    axis.legend(fontsize=7)


def _share_axis(axis, title: str, ylabel: str) -> None:
    axis.set_xlabel("layer / number of layers (0: embedding)")
    axis.set_ylabel(ylabel)
    axis.set_xlim(-0.03, 1.03)
    axis.set_title(title, fontsize=9)


def plot_probes(axis, family: str, networks: list[dict], depth_colors: dict[int, str]) -> None:
    measured = [row for row in networks if row["probes"] is not None]
    for row in measured:
        shares = [layer / row["layers"] for layer in range(row["layers"] + 1)]
        for name, style in PROBE_STYLES.items():
            axis.plot(shares, row["probes"]["curves"][name], linestyle=style, color=depth_colors[row["layers"]],
                      marker=".", label=f"{row['layers']} layers: {name}")
    axis.axhline(HELD, color="grey", linestyle=":", linewidth=0.8)
    axis.set_ylim(0.0, 1.02)
    _share_axis(axis, f"{family}: probe accuracy per layer ({len(measured)} of {len(networks)} networks probed)",
                "probe test accuracy")
    if measured:
        axis.legend(fontsize=6, ncol=2)


def plot_heads(axis, family: str, networks: list[dict], depth_colors: dict[int, str]) -> None:
    measured = [row for row in networks if row["heads"] is not None]
    for row in measured:
        shares = [layer / row["layers"] for layer in range(1, row["layers"] + 1)]
        for kind, style in HEAD_STYLES.items():
            axis.plot(shares, row["heads"][kind]["excess_per_layer"], linestyle=style, marker="o",
                      color=depth_colors[row["layers"]], label=f"{row['layers']} layers: {kind}")
    axis.set_ylim(-0.05, 1.02)
    _share_axis(axis, f"{family}: best head per layer ({len(measured)} of {len(networks)} networks scored)",
                "score - chance")
    if measured:
        axis.legend(fontsize=6)
