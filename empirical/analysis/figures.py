"""Figures of ``hmmtf analyze``: shuffle metric per layer (Figure 2), probe curves (Figure 3a/3b),
attention heat-maps (Figure 7), offset profiles of trained heads beside the hand-built layers.
Every figure puts the trained network, its random-init twin and the hand-built network side by
side; bands and bars are 95% bootstrap intervals (probes) or +- one std over prompts (shuffle)."""
from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.ticker import MaxNLocator

from empirical.plotting import plt
import hmm

NETWORK_TITLES = {
    "trained": "trained RoFormer",
    "random-init": "random-init RoFormer (chance baseline)",
    "hand-built": "hand-built network",
}


def plot_shuffle(shuffle: dict[str, dict[str, dict]], path: Path) -> None:
    """One column per network, one row per pair selection (``min_context``): shuffle metric per
    layer, head-averaged mean +- std over prompts, and each head's mean over prompts as a dot."""
    variants = list(next(iter(shuffle.values())))
    figure, axes = plt.subplots(len(variants), len(shuffle), figsize=(5 * len(shuffle), 3.8 * len(variants)),
                                constrained_layout=True, squeeze=False)
    for column, (network, by_variant) in enumerate(shuffle.items()):
        for row, variant in enumerate(variants):
            axis, layers = axes[row, column], by_variant[variant]
            names = list(layers)
            x = range(len(names))
            axis.errorbar(x, [layers[n]["mean"] for n in names], yerr=[layers[n]["std"] for n in names], fmt="o-",
                          capsize=3, color="tab:blue", label="mean over heads (+- std over prompts)")
            for index, name in enumerate(names):
                heads = layers[name]["per_head_mean"]
                axis.scatter([index] * len(heads), heads, s=10, color="tab:orange", alpha=0.7,
                             label="one head (mean over prompts)" if index == 0 else None)
            axis.set_xticks(list(x), names, rotation=45, ha="right")
            axis.set_ylim(bottom=0)
            axis.set_ylabel("mean |logit change| / std(logits)")
            axis.set_title(f"{NETWORK_TITLES[network]}, pairs {variant}\n({layers[names[0]]['prompts']} prompts)",
                           fontsize=10)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
    figure.suptitle("Shuffle test: change of test-to-demonstration attention logits when the demonstrations are "
                    "reordered (0 = position-free);\nmin_context=c: only tokens with >= c earlier tokens in their segment")
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _probe_curve(axis, results: dict[str, dict], label: str, color, linestyle: str = "-") -> None:
    names = list(results)
    x = range(len(names))
    axis.plot(x, [results[n]["accuracy"] for n in names], linestyle=linestyle, marker="o", markersize=3,
              color=color, label=label)
    axis.fill_between(x, [results[n]["ci_low"] for n in names], [results[n]["ci_high"] for n in names],
                      color=color, alpha=0.2)
    axis.set_xticks(list(x), names, rotation=45, ha="right")


def plot_task_state_probes(probes: dict[str, dict], path: Path) -> None:
    """Figure 3a: probe accuracy for task id and hidden state per layer; trained (solid) beside
    random-init (dashed) in one panel, the hand-built network in the other; majority-class rates
    as dotted lines, the Bayes-optimal decoder's accuracy (the ceiling) as a shaded band."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    colors = {"task": "tab:red", "state": "tab:green"}
    for target, color in colors.items():
        _probe_curve(axes[0], probes["trained"][target], f"{target}: trained", color)
        _probe_curve(axes[0], probes["random-init"][target], f"{target}: random-init", color, "--")
        _probe_curve(axes[1], probes["hand-built"][target], f"{target}: hand-built", color)
        for axis, network in ((axes[0], "trained"), (axes[1], "hand-built")):
            majority = next(iter(probes[network][target].values()))["majority"]
            axis.axhline(majority, color=color, linestyle=":", linewidth=1, label=f"{target}: majority class")
            ceiling = probes["ceiling"][target]
            axis.axhspan(ceiling["ci_low"], ceiling["ci_high"], color=color, alpha=0.15,
                         label=f"{target}: Bayes-optimal decoder")
    for axis, title in zip(axes, ("trained RoFormer vs random init", "hand-built network")):
        axis.set_ylabel("probe accuracy (held-out prompts)")
        axis.set_xlabel("residual stream after")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("Linear probes for the task id and the current hidden state (95% bootstrap bands over prompts)")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_previous_token_probes(probes: dict[str, dict], max_distance: int, path: Path) -> None:
    """Figure 3b: probe accuracy for ``o_{t-k}``, k = 1..max_distance, per layer; trained (solid)
    and random-init (dashed) in one panel, the hand-built network in the other."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    colormap = plt.get_cmap("viridis")
    for k in range(1, max_distance + 1):
        target, color = f"token {k} back", colormap((k - 1) / max(max_distance - 1, 1))
        _probe_curve(axes[0], probes["trained"][target], f"k={k} trained", color)
        _probe_curve(axes[0], probes["random-init"][target], f"k={k} random-init", color, "--")
        _probe_curve(axes[1], probes["hand-built"][target], f"k={k}", color)
    for axis, network in ((axes[0], "trained"), (axes[1], "hand-built")):
        majority = next(iter(probes[network]["token 1 back"].values()))["majority"]
        axis.axhline(majority, color="gray", linestyle=":", linewidth=1, label="majority class (k=1)")
    for axis, title in zip(axes, ("trained RoFormer (solid) vs random init (dashed)", "hand-built network")):
        axis.set_ylabel("probe accuracy for the token k steps back")
        axis.set_xlabel("residual stream after")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, ncol=2)
    figure.suptitle("Linear probes for previous tokens o_{t-k} (95% bootstrap bands over prompts)")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def _segment_ticks(axis, prompt_format: hmm.PromptFormat) -> None:
    """Mark the delimiters (segment borders) on both axes."""
    borders = torch.nonzero(prompt_format.is_delimiter).squeeze(1).tolist()
    axis.set_xticks(borders, [])
    axis.set_yticks(borders, [])


def plot_trained_attention(patterns: torch.Tensor, tokens: torch.Tensor, prompt_format: hmm.PromptFormat,
                           path: Path) -> None:
    """Figure 7: attention weights ``(L, H, N, N)`` of every head of the trained network on one
    prompt; ticks mark the delimiters."""
    layers, heads = patterns.shape[:2]
    figure, axes = plt.subplots(layers, heads, figsize=(2.6 * heads, 2.6 * layers), constrained_layout=True,
                                squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer, head]
            image = axis.imshow(patterns[layer, head].numpy(), cmap="magma", vmin=0, vmax=1)
            _segment_ticks(axis, prompt_format)
            axis.set_title(f"layer {layer + 1}, head {head}", fontsize=9)
        axes[layer, 0].set_ylabel("query position")
    for head in range(heads):
        axes[-1, head].set_xlabel("key position")
    figure.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    figure.suptitle(f"Trained RoFormer, attention on one held-out prompt of {len(tokens)} tokens "
                    "(ticks: delimiters)")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_pattern(axis, patterns: torch.Tensor, batch: int, head: int, title: str, window: int,
                 difference: bool = False):
    """Heat-map of ``patterns[batch, head]`` (any network's attention in TransformerLens's
    ``hook_pattern`` layout ``(batch, head, query, key)``) on the last ``window`` queries and keys
    (all of them on a shorter prompt), positions ``-n..-1`` from the end on both axes, integer
    ticks; ``difference`` draws signed values on a diverging scale. Returns the image (for a
    colorbar)."""
    matrix = patterns[batch, head, -window:, -window:].double().cpu().numpy()
    shown = matrix.shape[-1]
    style = {"cmap": "RdBu_r", "vmin": -1, "vmax": 1} if difference else {"cmap": "magma", "vmin": 0, "vmax": 1}
    image = axis.imshow(matrix, extent=(-shown - 0.5, -0.5, -0.5, -shown - 0.5), **style)
    for positions in (axis.xaxis, axis.yaxis):
        positions.set_major_locator(MaxNLocator(integer=True))
    axis.set_title(title, fontsize=9)
    axis.set_xlabel("key (position from the end)", fontsize=8)
    axis.set_ylabel("query (position from the end)", fontsize=8)
    return image


def plot_pattern_comparison(trained: dict[str, torch.Tensor], ideal: dict[str, torch.Tensor], best_match: dict[str, dict],
                            random_init_match: dict[str, dict], path: Path, batch: int = 0, window: int = 40) -> None:
    """For each hand-built history layer r, on prompt ``batch``: the best-matching trained head's
    attention, the ideal pattern (the layer's composed attention ``C_r``, all mass at offset -r)
    and their difference, drawn by :func:`draw_pattern` from ``(batch, head, query, key)`` tensors:
    ``trained`` ``{layer l: (B, H, N, N)}`` and ``ideal`` ``{history.r: (B, 1, N, N)}``. Titles give
    the matching score (1 - TV of offset profiles) of the trained head and of the best random-init head."""
    figure, axes = plt.subplots(len(ideal), 3, figsize=(10, 3 * len(ideal) + 1.6), constrained_layout=True,
                                squeeze=False)
    for row, (name, pattern) in enumerate(ideal.items()):
        match, chance = best_match[name], random_init_match[name]
        head_pattern = trained[f"layer {match['layer']}"][:, match["head"] : match["head"] + 1]
        weights = draw_pattern(axes[row, 0], head_pattern, batch, 0,
                               f"trained layer {match['layer']} head {match['head']}: score {match['similarity']:.2f}\n"
                               f"(best random-init head: {chance['similarity']:.2f})", window)
        draw_pattern(axes[row, 1], pattern, batch, 0, f"ideal for {name}:\nall mass at offset -{name.split('.')[1]}",
                     window)
        signed = draw_pattern(axes[row, 2], head_pattern - pattern, batch, 0, "difference:\ntrained - ideal", window,
                              difference=True)
    figure.colorbar(weights, ax=axes[-1, :2], location="bottom", shrink=0.6, label="attention weight")
    figure.colorbar(signed, ax=axes[-1, 2], location="bottom", shrink=0.9, label="trained - ideal")
    shown = min(window, next(iter(ideal.values())).shape[-1])
    figure.suptitle(f"Hand-built history layers: best-matching trained head, ideal pattern and difference\n"
                    f"(last {shown} positions of one held-out prompt; score = 1 - TV of offset profiles)")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_offset_profiles(offsets: dict, path: Path) -> None:
    """Three heat-maps sharing the offset axis: the trained heads' profiles (rows layer.head), the
    hand-built history layers' composed and direct profiles, and the similarity (1 - TV) of every
    trained head to every composed hand-built profile."""
    labels = [str(offset) for offset in offsets["offsets"]]
    trained = torch.tensor(offsets["trained"])
    layers, heads = trained.shape[:2]
    head_names = [f"L{layer + 1} h{head}" for layer in range(layers) for head in range(heads)]
    composed, direct = offsets["hand-built"]["composed"], offsets["hand-built"]["direct"]
    hand_names = [f"{name} composed" for name in composed] + [f"{name} own" for name in direct]
    hand = torch.tensor([*composed.values(), *direct.values()])
    similarity = torch.tensor([match["similarity_by_head"] for match in offsets["best_match_composed"].values()])
    figure, axes = plt.subplots(1, 3, figsize=(16, max(4.5, 0.3 * len(head_names))), constrained_layout=True,
                                gridspec_kw={"width_ratios": [1, 1, 1.1]})
    for axis, matrix, rows, title in ((axes[0], trained.flatten(0, 1), head_names, "trained heads"),
                                      (axes[1], hand, hand_names, "hand-built layers")):
        image = axis.imshow(matrix.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        axis.set_xticks(range(len(labels)), labels)
        axis.set_yticks(range(len(rows)), rows, fontsize=7)
        axis.set_xlabel("key offset j - i")
        axis.set_title(f"{title}: mean attention mass by offset")
    figure.colorbar(image, ax=axes[:2], shrink=0.6, label="attention mass")
    image = axes[2].imshow(similarity.flatten(1).T.numpy(), cmap="cividis", vmin=0, vmax=1, aspect="auto")
    axes[2].set_xticks(range(len(composed)), list(composed), rotation=45, ha="right")
    axes[2].set_yticks(range(len(head_names)), head_names, fontsize=7)
    axes[2].set_xlabel("hand-built layer (composed profile)")
    axes[2].set_title("similarity 1 - TV of profiles")
    for column, match in enumerate(offsets["best_match_composed"].values()):
        axes[2].scatter(column, (match["layer"] - 1) * heads + match["head"], marker="*", color="red", s=60)
    figure.colorbar(image, ax=axes[2], shrink=0.6, label="similarity (star: best trained head)")
    figure.suptitle("Relative-offset attention profiles: trained heads beside the hand-built history layers")
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_offset_summary(summary: dict, path: Path) -> None:
    """The whole trained network by relative offset: one column per layer, mean attention weight
    (top, log scale) and mean centred logit (bottom) at offsets ``0..-K``, one line per head, dotted
    lines a whole number of segments back (``summary`` = the ``offsets.summary`` section of
    ``analysis.json``)."""
    offsets = summary["offsets"]
    attention, logit = torch.tensor(summary["attention"]), torch.tensor(summary["logit"])
    layers, heads = attention.shape[:2]
    figure, axes = plt.subplots(2, layers, figsize=(3.4 * layers, 5.6), constrained_layout=True, sharex=True,
                                sharey="row", squeeze=False)
    colors = plt.get_cmap("tab10")
    for layer in range(layers):
        for head in range(heads):
            style = {"color": colors(head), "linewidth": 1.2, "label": f"head {head}"}
            axes[0, layer].plot(offsets, attention[layer, head].numpy(), **style)
            axes[1, layer].plot(offsets, logit[layer, head].numpy(), **style)
        axes[0, layer].set_title(f"layer {layer + 1}")
        axes[1, layer].set_xlabel("key offset j - i")
        axes[1, layer].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[1, layer].axhline(0.0, color="gray", linewidth=0.6)
        for axis in axes[:, layer]:
            axis.grid(alpha=0.3)
            for back in range(summary["segment_length"], -offsets[-1] + 1, summary["segment_length"]):
                axis.axvline(-back, color="black", linestyle=":", linewidth=1)
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_ylabel("mean attention weight")
    axes[1, 0].set_ylabel("mean logit - query's mean logit")
    axes[0, 0].legend(fontsize=7)
    figure.suptitle(f"Trained RoFormer by relative offset ({summary['queries_per_prompt']} queries per prompt, "
                    f"each with >= {-offsets[-1]} earlier positions; dotted: one and two segments back)")
    figure.savefig(path, dpi=120)
    plt.close(figure)
