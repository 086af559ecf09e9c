"""Figures of a Markov sweep: the phase diagram over the ``(p, q)`` grid, training-loss curves
against the two reference lines, and the survival of the unigram plateau."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from empirical.markov.aggregate import median_escape_step, plateau_survival  # noqa: E402
from empirical.markov.config import MarkovSweepConfig  # noqa: E402
from empirical.markov.criterion import TRAP_THRESHOLD, reference_lines, unigram_bigram_gap  # noqa: E402


def _grid_edges(values: list[float]) -> np.ndarray:
    """Cell boundaries for ``pcolormesh``: midpoints between sorted values, half a gap beyond the ends."""
    values = np.array(sorted(values), dtype=float)
    if len(values) == 1:
        return np.array([values[0] - 0.05, values[0] + 0.05])
    middles = (values[1:] + values[:-1]) / 2
    return np.concatenate([[2 * values[0] - middles[0]], middles, [2 * values[-1] - middles[-1]]])


def _draw_grid(axis, values: dict, labels: dict, config: MarkovSweepConfig, colour_map: str, limits: tuple):
    """``values[(p, q)]`` as coloured cells on the ``(p, q)`` grid with ``labels[(p, q)]`` written
    in them, i.i.d. cells marked, and the line ``p + q = 1``; returns the colour mesh."""
    p_values, q_values = sorted(config.p_values), sorted(config.q_values)
    p_edges, q_edges = _grid_edges(p_values), _grid_edges(q_values)
    grid = np.full((len(q_values), len(p_values)), np.nan)
    for (p, q), value in values.items():
        grid[q_values.index(q), p_values.index(p)] = value
        axis.text(p, q, labels[(p, q)], ha="center", va="center", fontsize=9)
    for p, q in sorted(config.iid_cells()):
        axis.text(p, q, "i.i.d.", ha="center", va="center", fontsize=8, color="gray")
    mesh = axis.pcolormesh(p_edges, q_edges, np.ma.masked_invalid(grid), cmap=colour_map, vmin=limits[0],
                           vmax=limits[1])
    line = np.array([min(p_edges[0], 1 - q_edges[-1]), max(p_edges[-1], 1 - q_edges[0])])
    axis.plot(line, 1 - line, color="black", linewidth=1.5, label="p + q = 1")
    axis.set_xlim(p_edges[0], p_edges[-1])
    axis.set_ylim(q_edges[0], q_edges[-1])
    axis.set_xlabel("p = P(1 | 0)")
    axis.set_ylabel("q = P(0 | 1)")
    axis.legend(loc="upper right", fontsize=8)
    return mesh


def plot_phase_diagram(cells: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """One column per architecture. Top: the ``(p, q)`` grid coloured by the trapped fraction,
    each cell annotated ``trapped/seeds``. Bottom: the median step at which training left the
    unigram plateau (:func:`empirical.markov.criterion.escape_step`). i.i.d. cells are marked, the
    line ``p + q = 1`` drawn."""
    columns = len(config.architectures)
    figure, axes = plt.subplots(2, columns, figsize=(4.2 * columns, 8.2), constrained_layout=True, squeeze=False)
    for column, architecture in enumerate(config.architectures):
        members = [cell for cell in cells if cell["architecture"] == architecture]
        fractions = {(c["p"], c["q"]): c["trapped_fraction"] for c in members}
        counts = {(c["p"], c["q"]): f"{c['trapped']}/{c['seeds']}" for c in members}
        trapped_mesh = _draw_grid(axes[0, column], fractions, counts, config, "coolwarm", (0, 1))
        axes[0, column].set_title(f"{architecture}: trapped at unigram")
        escapes = {(c["p"], c["q"]): median_escape_step(c, config.steps) for c in members}
        labels = {cell: f"{value:.0f}" for cell, value in escapes.items()}
        escape_mesh = _draw_grid(axes[1, column], escapes, labels, config, "viridis", (0, config.steps))
        axes[1, column].set_title(f"{architecture}: median escape step")
    figure.colorbar(trapped_mesh, ax=axes[0, -1], label="fraction of seeds trapped at unigram")
    figure.colorbar(escape_mesh, ax=axes[1, -1], label=f"first step below the midpoint ({config.steps} = never)")
    figure.suptitle(f"Trapped: final relative excess >= {TRAP_THRESHOLD}; {config.steps} steps, "
                    f"init std {config.init_std}, width {config.width}")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_loss_curves(runs: list[dict], cells: list[tuple[float, float]], architectures: tuple[str, ...],
                     path: Path) -> None:
    """Training loss vs step of every seed, one panel per (architecture, cell), beside the bigram
    (entropy rate) and unigram (stationary entropy) lines; trapped seeds are drawn in red."""
    figure, axes = plt.subplots(len(architectures), len(cells), figsize=(4.5 * len(cells), 3.2 * len(architectures)),
                                constrained_layout=True, squeeze=False)
    for row, architecture in enumerate(architectures):
        for column, (p, q) in enumerate(cells):
            axis = axes[row, column]
            references = reference_lines(p, q)
            for run in runs:
                if (run["architecture"], run["p"], run["q"]) == (architecture, p, q):
                    colour = "tab:red" if run["trapped"] else "tab:blue"
                    axis.plot(run["loss_curve"]["step"], run["loss_curve"]["loss"], color=colour, alpha=0.7,
                              linewidth=1)
            axis.axhline(references.unigram, color="gray", linestyle="--", label="unigram H(pi)")
            axis.axhline(references.bigram, color="black", linestyle=":", label="bigram H(x'|x)")
            gap = references.unigram - references.bigram
            axis.set_ylim(references.bigram - 0.5 * gap, references.unigram + 1.5 * gap)
            axis.set_title(f"{architecture}, p = {p}, q = {q}", fontsize=10)
            axis.set_xlabel("step")
            axis.set_ylabel("training loss (nats/token)")
            axis.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_plateau_survival(runs: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """One panel per architecture: fraction of runs still on the unigram plateau vs training
    step, pooled over the cells with ``p + q < 1`` and, separately, ``p + q > 1``. The trapped
    fraction of a budget of ``s`` steps is read off at ``s``: a plateau that lasts longer than
    the budget looks like a trap."""
    steps = list(range(0, config.steps + 1, config.log_every))
    figure, axes = plt.subplots(1, len(config.architectures), figsize=(4.2 * len(config.architectures), 3.4),
                                constrained_layout=True, squeeze=False, sharey=True)
    for axis, architecture in zip(axes[0], config.architectures):
        for label, side, colour in (("p + q < 1", lambda run: run["p"] + run["q"] < 1, "tab:blue"),
                                    ("p + q > 1", lambda run: run["p"] + run["q"] > 1, "tab:red")):
            members = [run for run in runs if run["architecture"] == architecture and side(run)]
            if members:
                axis.step(steps, plateau_survival(members, steps), where="post", color=colour,
                          label=f"{label} ({len(members)} runs)")
        axis.set_title(architecture)
        axis.set_xlabel("training step")
        axis.set_ylim(-0.03, 1.03)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0, 0].set_ylabel("fraction still on the unigram plateau")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def loss_curve_cells(config: MarkovSweepConfig) -> list[tuple[float, float]]:
    """Two cells to draw: the trained cell with the largest unigram-bigram gap on each side of
    ``p + q = 1`` (where one exists)."""
    chosen = []
    for side in (lambda p, q: p + q < 1, lambda p, q: p + q > 1):
        candidates = [(p, q) for p, q in config.cells() if side(p, q)]
        if candidates:
            chosen.append(max(candidates, key=lambda cell: unigram_bigram_gap(*cell)))
    return chosen
