"""Figures of a Markov sweep, one panel per arm (rows: initialisations, columns: architectures)
unless stated: the phase diagram of the trapped fraction over the ``(p, q)`` grid, the transition
probabilities read back from the trained models against the true kernels, the survival of the
unigram plateau, and, per initialisation, every run's training loss against the two lines; and the
figure of the in-context chains (``hmmtf markov-incontext``, :func:`plot_incontext`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from empirical.plotting import plt
from empirical.studies.markov.aggregate import SIDES, plateau_survival, wilson_interval
from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.criterion import TRAP_Z, reference_lines
from empirical.studies.markov.incontext import PREDICTORS


def _grid_edges(values: list[float]) -> np.ndarray:
    """Cell boundaries for ``pcolormesh``: midpoints between sorted values, half a gap beyond the ends."""
    values = np.array(sorted(values), dtype=float)
    if len(values) == 1:
        return np.array([values[0] - 0.05, values[0] + 0.05])
    middles = (values[1:] + values[:-1]) / 2
    return np.concatenate([[2 * values[0] - middles[0]], middles, [2 * values[-1] - middles[-1]]])


def _arm_axes(config: MarkovSweepConfig, panel_size: tuple[float, float], **settings):
    """A figure with one panel per arm: rows ``config.inits``, columns ``config.architectures``."""
    rows, columns = len(config.inits), len(config.architectures)
    return plt.subplots(rows, columns, figsize=(panel_size[0] * columns, panel_size[1] * rows),
                        constrained_layout=True, squeeze=False, **settings)


def _draw_grid(axis, values: dict, labels: dict, config: MarkovSweepConfig, colour_map: str, limits: tuple):
    """``values[(p, q)]`` as coloured cells on the ``(p, q)`` grid with ``labels[(p, q)]`` written
    in them (white on the darkest third of the colour scale), i.i.d. cells marked, and the line
    ``p + q = 1``; returns the colour mesh."""
    p_values, q_values = sorted(config.p_values), sorted(config.q_values)
    p_edges, q_edges = _grid_edges(p_values), _grid_edges(q_values)
    grid = np.full((len(q_values), len(p_values)), np.nan)
    for (p, q), value in values.items():
        grid[q_values.index(q), p_values.index(p)] = value
        dark = (value - limits[0]) > 2 / 3 * (limits[1] - limits[0])
        axis.text(p, q, labels[(p, q)], ha="center", va="center", fontsize=8, color="white" if dark else "black")
    for p, q in sorted(config.iid_cells()):
        axis.text(p, q, "i.i.d.", ha="center", va="center", fontsize=8, color="gray", zorder=3,
                  bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    mesh = axis.pcolormesh(p_edges, q_edges, np.ma.masked_invalid(grid), cmap=colour_map, vmin=limits[0],
                           vmax=limits[1])
    line = np.array([min(p_edges[0], 1 - q_edges[-1]), max(p_edges[-1], 1 - q_edges[0])])
    axis.plot(line, 1 - line, color="black", linewidth=1.5, label="p + q = 1")
    axis.set_xlim(p_edges[0], p_edges[-1])
    axis.set_ylim(q_edges[0], q_edges[-1])
    axis.set_xticks(p_values)
    axis.set_yticks(q_values)
    axis.set_xlabel("p = P(1 | 0)")
    axis.set_ylabel("q = P(0 | 1)")
    return mesh


def plot_phase_diagram(cells: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """Per arm, the ``(p, q)`` grid coloured by the fraction of seeds trapped at the end of the
    budget (:func:`empirical.studies.markov.criterion.is_trapped`), each cell annotated ``trapped/seeds``
    and its 95% Wilson interval; i.i.d. cells marked, the line ``p + q = 1`` drawn."""
    figure, axes = _arm_axes(config, (3.9, 3.5))
    for row, init in enumerate(config.inits):
        for column, architecture in enumerate(config.architectures):
            members = [c for c in cells if (c["init"], c["architecture"]) == (init, architecture)]
            fractions = {(c["p"], c["q"]): c["trapped_fraction"] for c in members}
            labels = {(c["p"], c["q"]): "{}/{}\n[{:.2f}, {:.2f}]".format(c["trapped"], c["seeds"], *c["trapped_interval"])
                      for c in members}
            mesh = _draw_grid(axes[row, column], fractions, labels, config, "YlOrRd", (0, 1))
            axes[row, column].set_title(f"init {init}, {architecture}", fontsize=10)
    axes[0, -1].legend(loc="upper right", fontsize=8)
    figure.colorbar(mesh, ax=axes[:, -1], label="fraction of seeds trapped", shrink=0.6)
    figure.suptitle(f"Trapped at step {config.steps}: held-out excess over the bigram line > {TRAP_Z:g} sd of "
                    f"its sampling noise; k/n [95% Wilson]\ninit std {config.init_std}, low-rank rank {config.init_rank}, "
                    f"width {config.width}", fontsize=10)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_read_back(runs: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """Per arm, the transition probabilities read back from every trained model,
    ``(P_hat(1|0), P_hat(0|1))`` (mean over positions, bars = their standard deviation over
    positions), beside the true kernel ``(p, q)`` (cross) and the unigram solution
    ``(pi_1, pi_0)`` (ring) of each cell; memoryless predictors lie on ``P_hat(1|0) + P_hat(0|1) = 1``.
    Each panel states how many of its runs are trapped."""
    cells = config.cells()
    colours = plt.get_cmap("tab10")(np.arange(len(cells)) % 10)
    figure, axes = _arm_axes(config, (3.6, 3.6), sharex=True, sharey=True)
    for row, init in enumerate(config.inits):
        for column, architecture in enumerate(config.architectures):
            axis = axes[row, column]
            axis.plot([0, 1], [1, 0], color="gray", linewidth=0.8, linestyle="--")
            arm_runs = [run for run in runs if (run["init"], run["architecture"]) == (init, architecture)]
            for colour, (p, q) in zip(colours, cells):
                members = [run for run in arm_runs if (run["p"], run["q"]) == (p, q)]
                estimates = np.array([[run["read_back_kernel"][0][1], run["read_back_kernel"][1][0]] for run in members])
                spreads = np.array([[run["read_back_spread"][0][1], run["read_back_spread"][1][0]] for run in members])
                axis.plot(p, q, marker="x", markersize=13, markeredgewidth=1.5, color=colour, alpha=0.6, zorder=1,
                          label=f"({p}, {q})")
                axis.plot(p / (p + q), q / (p + q), marker="o", markersize=13, fillstyle="none", color=colour,
                          alpha=0.6, zorder=1)
                axis.errorbar(estimates[:, 0], estimates[:, 1], xerr=spreads[:, 0], yerr=spreads[:, 1], fmt="o",
                              markersize=4, color=colour, markeredgecolor="black", markeredgewidth=0.5, linewidth=1,
                              zorder=3)
            trapped = sum(run["trapped"] for run in arm_runs)
            axis.text(0.03, 0.03, f"trapped {trapped}/{len(arm_runs)}", transform=axis.transAxes, fontsize=8)
            axis.set_xlim(0, 1)
            axis.set_ylim(0, 1)
            axis.set_aspect("equal")
            axis.grid(alpha=0.3)
            axis.set_title(f"init {init}, {architecture}", fontsize=10)
            axis.set_xlabel("read-back P(1 | 0)")
            axis.set_ylabel("read-back P(0 | 1)")
    axes[0, -1].legend(title="true (p, q)", fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    figure.suptitle(f"Read-back kernels at step {config.steps}: dots = runs (bars: sd over positions)\n"
                    f"x = true kernel, ring = unigram solution (shared by cells with equal pi)\n"
                    f"dashed: memoryless predictors", fontsize=10)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_plateau_survival(runs: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """Per arm, the fraction of runs still on the unigram plateau (training loss above the
    midpoint of the two lines) vs training step (:func:`empirical.studies.markov.aggregate.plateau_survival`,
    the Kaplan-Meier estimate under censoring at the budget), pooled over the cells on each side of
    ``p + q = 1``; the legend gives the censored runs (still on the plateau at the budget) with
    their 95% Wilson interval."""
    steps = list(range(0, config.steps + 1, config.log_every))
    figure, axes = _arm_axes(config, (3.9, 2.9), sharey=True)
    colours = {"p + q < 1": "tab:blue", "p + q > 1": "tab:red"}
    for row, init in enumerate(config.inits):
        for column, architecture in enumerate(config.architectures):
            axis = axes[row, column]
            for side, on_side in SIDES.items():
                members = [run for run in runs if (run["init"], run["architecture"]) == (init, architecture)
                           and on_side(run["p"], run["q"])]
                if members:
                    censored = sum(run["escape_step"] is None for run in members)
                    low, high = wilson_interval(censored, len(members))
                    axis.step(steps, plateau_survival(members, steps), where="post", color=colours[side],
                              label=f"{side}: {censored}/{len(members)} on it at the end [{low:.2f}, {high:.2f}]")
            axis.set_title(f"init {init}, {architecture}", fontsize=10)
            axis.set_xlabel("training step")
            axis.set_ylim(-0.03, 1.4)  # the legend sits above the curves, which stay in [0, 1]
            axis.set_yticks(np.linspace(0, 1, 6))
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7, loc="upper right")
        axes[row, 0].set_ylabel("fraction on the plateau")
    figure.suptitle(f"Unigram plateau: runs whose training loss is still above the midpoint of the two lines\n"
                    f"(right-censored at the budget, {config.steps} steps)", fontsize=10)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_loss_curves(runs: list[dict], config: MarkovSweepConfig, init: str, path: Path) -> None:
    """For initialisation ``init``: every run's training loss vs step, one panel per
    (architecture, cell) titled with its trapped runs, beside the bigram (entropy rate) and
    unigram (stationary entropy) lines, which are drawn under the runs so that a run on the unigram
    line stays visible; trapped runs in red."""
    cells = config.cells()
    figure, axes = plt.subplots(len(config.architectures), len(cells),
                                figsize=(3.3 * len(cells), 2.7 * len(config.architectures)),
                                constrained_layout=True, squeeze=False)
    for row, architecture in enumerate(config.architectures):
        for column, (p, q) in enumerate(cells):
            axis = axes[row, column]
            references = reference_lines(p, q)
            members = [run for run in runs
                       if (run["init"], run["architecture"], run["p"], run["q"]) == (init, architecture, p, q)]
            for run in members:
                colour = "tab:red" if run["trapped"] else "tab:blue"
                axis.plot(run["loss_curve"]["step"], run["loss_curve"]["loss"], color=colour, alpha=0.7, linewidth=1.2,
                          zorder=3 if run["trapped"] else 2)
            axis.axhline(references.unigram, color="gray", linestyle="--", linewidth=1, zorder=1, label="unigram H(pi)")
            axis.axhline(references.bigram, color="black", linestyle=":", linewidth=1, zorder=1, label="bigram H(x'|x)")
            gap = references.unigram - references.bigram
            axis.set_ylim(references.bigram - 0.5 * gap, references.unigram + 1.5 * gap)
            trapped = sum(run["trapped"] for run in members)
            axis.set_title(f"{architecture}, p = {p}, q = {q}: {trapped}/{len(members)} trapped", fontsize=9,
                           color="tab:red" if trapped else "black")
            axis.grid(alpha=0.3)
        axes[row, 0].set_ylabel("training loss (nats/token)")
    for axis in axes[-1]:
        axis.set_xlabel("step")
    axes[0, 0].legend(fontsize=7)
    figure.suptitle(f"init {init}: training loss of every run (red: trapped at step {config.steps}, blue: reached "
                    f"bigram)", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_incontext(document: dict, path: Path) -> None:
    """Three panels: training loss per depth beside the held-out losses of the reference
    predictors; the deepest model's order-1 induction score per head against its random-init
    control and chance; per depth, the change in KL to the Bayes predictor when the top induction
    heads are mean-ablated, against as many random heads (95% intervals)."""
    models = document["models"]
    deepest = max(models, key=lambda name: int(name.split("-")[0]))
    figure, (curves, heads, ablation) = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, measured in models.items():
        curve = measured["training_curve"]
        curves.plot(curve["step"], curve["loss"], label=f"{name} (training loss)")
    any_model = next(iter(models.values()))
    for predictor, style in zip(PREDICTORS, (":", "--", "-.")):
        curves.axhline(any_model["losses"][predictor], color="grey", linestyle=style,
                       label=f"{predictor} (held out)")
    curves.set(xlabel="step", ylabel="loss (nats/token)", title="fresh kernel per sequence")
    curves.legend(fontsize=7)

    score = np.array(models[deepest]["scores"]["induction 1"]["score"])
    control = np.array(models[deepest]["random_init_scores"]["induction 1"]["score"])
    chance = models[deepest]["scores"]["induction 1"]["chance"]
    layers, per_layer = score.shape
    positions = np.arange(layers * per_layer)
    heads.bar(positions - 0.2, score.ravel(), width=0.4, label="trained")
    heads.bar(positions + 0.2, control.ravel(), width=0.4, label="random init")
    heads.axhline(chance, color="grey", linestyle=":", label="chance (uniform attention)")
    heads.set_xticks(positions, [f"L{layer + 1}H{head}" for layer in range(layers) for head in range(per_layer)],
                     fontsize=7, rotation=90)
    heads.set(ylabel="attention on keys after an earlier x_t", title=f"induction score (order 1), {deepest}")
    heads.legend(fontsize=7)

    names = list(models)
    for offset, (key, label) in zip((-0.15, 0.15), (("change", "top induction heads"),
                                                     ("random_change", "as many random heads"))):
        means = [models[name]["ablation"]["induction"]["bayes"][key]["mean"] for name in names]
        low, high = zip(*(models[name]["ablation"]["induction"]["bayes"][key]["interval_95"] for name in names))
        ablation.errorbar(np.arange(len(names)) + offset, means,
                          yerr=[np.subtract(means, low), np.subtract(high, means)], fmt="o", capsize=3, label=label)
    ablation.axhline(0, color="grey", linewidth=0.5)
    ablation.set_xticks(np.arange(len(names)), names)
    ablation.set(ylabel="change in KL(Bayes || model), nats/token", title="mean-ablation")
    ablation.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
