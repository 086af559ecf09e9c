"""The figure of ``hmmtf beliefs`` (:mod:`empirical.analysis.beliefs`): per target, the held-out
R^2 of the linear probes by layer, trained network against its random-init twin and against the
shuffled-target control; below, the KL of the distribution targets beside the constant predictor's."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from empirical.plotting import plt

R2_BOTTOM = -0.3
"""Lower end of the R^2 axes: a worse probe (a control fitting noise on few prompts) leaves the axis."""
STYLES = {"trained": {"color": "tab:blue", "linestyle": "-", "marker": "o"},
          "random-init": {"color": "tab:gray", "linestyle": "--", "marker": "s"},
          "shuffled targets": {"color": "tab:red", "linestyle": ":", "marker": "^"}}


def _curve(axis, by_layer: dict, metric: str, network: str) -> None:
    """One network's ``metric`` by layer with its 95% interval as a band."""
    layers = list(by_layer)
    values = np.array([by_layer[layer][metric] for layer in layers])
    intervals = np.array([by_layer[layer][f"{metric}_interval_95"] for layer in layers])
    x = np.arange(len(layers))
    axis.plot(x, values, label=network, markersize=4, **STYLES[network])
    axis.fill_between(x, intervals[:, 0], intervals[:, 1], color=STYLES[network]["color"], alpha=0.15, linewidth=0)


def _layer_axis(axis, layers: list[str]) -> None:
    axis.set_xticks(range(len(layers)), ["emb" if layer == "embedding" else layer.removeprefix("layer ")
                                         for layer in layers])
    axis.set_xlabel("layer (emb = embedding)")
    axis.grid(alpha=0.3)


def plot_beliefs(report: dict, path: Path) -> None:
    """``beliefs.png`` from the ``report`` of :func:`empirical.analysis.beliefs.beliefs_report`."""
    probes = report["probes"]
    targets = list(report["targets"])
    layers = list(probes["trained"])
    distributions = [name for name in targets if report["targets"][name]["distribution"]]
    figure, axes = plt.subplots(2, len(targets), figsize=(2.7 * len(targets), 6.0), squeeze=False)
    for column, target in enumerate(targets):
        axis = axes[0, column]
        for network, by_layer in probes.items():
            _curve(axis, {layer: results[target] for layer, results in by_layer.items()}, "r2", network)
        axis.axhline(0, color="black", linewidth=0.6)
        axis.set_ylim(R2_BOTTOM, 1.02)
        axis.set_title(target, fontsize=10)
        _layer_axis(axis, layers)
        kl_axis = axes[1, column]
        if target not in distributions:
            kl_axis.axis("off")
            continue
        for network in ("trained", "random-init"):
            _curve(kl_axis, {layer: results[target] for layer, results in probes[network].items()}, "kl", network)
        constant = report["targets"][target]["training_mean"]["kl"]
        kl_axis.axhline(constant, color="black", linewidth=0.8, linestyle="-.", label="training mean")
        kl_axis.set_ylim(0, 1.1 * max(constant, kl_axis.get_ylim()[1]))
        _layer_axis(kl_axis, layers)
    axes[0, 0].set_ylabel("held-out R$^2$")
    axes[1, 0].set_ylabel("held-out KL(target || probe), nats")
    for axis in axes[1]:
        if axis.axison:
            axis.set_ylabel(axis.get_ylabel() or "KL, nats")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    kl_handles = [handle for handle, label in zip(*axes[1, 0].get_legend_handles_labels()) if label == "training mean"]
    figure.legend(handles + kl_handles, labels + ["training mean (constant predictor), KL only"][:len(kl_handles)],
                  loc="lower center", ncol=4, fontsize=9, frameon=False)
    model = report["model"]
    figure.suptitle(f"Linear probes of beliefs and predictive distributions, {report['checkpoint']} "
                    f"({model['num_layers']} layers, width {model['width']}): {report['prompts']['split']['held_out']} "
                    f"held-out prompts of fresh HMMs, 95% bootstrap bands; R$^2$ below {R2_BOTTOM} off the axis",
                    fontsize=10)
    figure.tight_layout(rect=(0, 0.05, 1, 0.96))
    figure.savefig(path, dpi=120)
    plt.close(figure)
