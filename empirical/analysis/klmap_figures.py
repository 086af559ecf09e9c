"""The figure of ``hmmtf klmap`` (:mod:`empirical.analysis.klmap`): the KL map of every scope as a
heat-map with its values written in, each predictor's loss beside its name, the model's nearest
predictors framed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.patches import Rectangle

from empirical.plotting import plt

SCOPE_TITLES = {"test_sequence": "test sequence", "all_positions": "all positions"}
COLOR_GAMMA = 0.4
"""Exponent of the colour scale: the cells span 0 to a few nats, and the small ones (the model
against its neighbours) are the ones to tell apart."""
FRAMES = {"as_row": ("red", "nearest to the model as its row: min KL(model || q)"),
          "as_column": ("magenta", "nearest to the model as its column: min KL(q || model)")}


def _map_panel(axis, section: dict, names: list[str], title: str, vmax: float):
    """One scope's ``kl[row][column]`` means as a heat-map, values written in, rows labelled with
    their loss; the model's nearest cells framed (:data:`FRAMES`)."""
    matrix = np.array([[section["kl"][row][column]["mean"] for column in names] for row in names])
    norm = PowerNorm(COLOR_GAMMA, vmin=0, vmax=vmax)
    image = axis.imshow(matrix, cmap="magma_r", norm=norm)
    for (row, column), value in np.ndenumerate(matrix):
        text = "0" if row == column else f"{value:.3f}" if value < 10 else f"{value:.1f}"
        axis.text(column, row, text, ha="center", va="center", fontsize=6.5,
                  color="white" if norm(value) > 0.45 else "black")
    loss = section["loss"]
    axis.set_yticks(range(len(names)), [f"{name} ({loss[name]['mean']:.3f})" for name in names], fontsize=8)
    axis.set_xticks(range(len(names)), names, fontsize=8, rotation=45, ha="right", rotation_mode="anchor")
    axis.set_xlabel("column q")
    axis.set_ylabel("row r (its loss, nats)")
    placement = section["placement"]
    if placement is not None:
        model = names.index("model")
        for direction, (color, _) in FRAMES.items():
            other = names.index(placement[direction]["nearest"])
            row, column = (model, other) if direction == "as_row" else (other, model)
            axis.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor=color, linewidth=2))
    axis.set_title(f"{title}: {section['rows_per_prompt']['mean']:.0f} rows per prompt", fontsize=10)
    return image


def plot_klmap(report: dict, path: Path) -> None:
    """One heat-map of mean ``KL(row || column)`` per scope of ``report``
    (:func:`empirical.analysis.klmap.klmap_report`), side by side on one colour scale."""
    names = report["predictors"]
    scopes = [scope for scope in SCOPE_TITLES if scope in report["scopes"]]
    vmax = max(entry["mean"] for scope in scopes for row in report["scopes"][scope]["kl"].values()
               for entry in row.values())
    size = 0.55 * len(names) + 2.5
    figure, axes = plt.subplots(1, len(scopes), figsize=(2 * size + 1.5, 0.85 * size + 1), squeeze=False,
                                constrained_layout=True)
    for axis, scope in zip(axes[0], scopes):
        image = _map_panel(axis, report["scopes"][scope], names, SCOPE_TITLES[scope], vmax)
    figure.colorbar(image, ax=axes[0], shrink=0.8, label="mean over prompts of KL(row || column), nats")
    hand_built = report["hand_built"]
    handles = [Rectangle((0, 0), 1, 1, fill=False, edgecolor=color, linewidth=2, label=label)
               for color, label in FRAMES.values()]
    figure.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8)
    figure.suptitle(f"KL map on {report['settings']['prompts']} fresh-HMM prompts, common rows of every predictor "
                    f"(hand-built: T = {hand_built['gd_steps']} GD layers)", fontsize=11)
    figure.savefig(path, dpi=120)
    plt.close(figure)
