"""From run records (:func:`empirical.markov.runs.train_and_evaluate`) to per-cell summaries: how
many seeds were trapped, and how long runs stayed on the unigram plateau."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from empirical.markov.criterion import is_trapped, reference_lines


def aggregate_cells(runs: list[dict]) -> list[dict]:
    """One record per ``(architecture, p, q)``: reference losses, the number of seeds, how many
    were trapped (:func:`is_trapped` of their ``relative_excess``), the trapped fraction, and the
    per-seed relative excesses, memory coordinates and escape steps, in seed order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        groups[(run["architecture"], run["p"], run["q"])].append(run)
    cells = []
    for (architecture, p, q), members in groups.items():
        members = sorted(members, key=lambda run: run["seed"])
        references = reference_lines(p, q)
        trapped = sum(is_trapped(run["relative_excess"]) for run in members)
        cells.append({
            "architecture": architecture,
            "p": p,
            "q": q,
            "bigram_loss": references.bigram,
            "unigram_loss": references.unigram,
            "seeds": len(members),
            "trapped": trapped,
            "trapped_fraction": trapped / len(members),
            "relative_excess": [run["relative_excess"] for run in members],
            "memory_coordinate": [run["memory_coordinate"] for run in members],
            "escape_step": [run["escape_step"] for run in members],
        })
    return cells


def median_escape_step(cell: dict, steps: int) -> float:
    """Median over seeds of the escape step, a run that never escaped counting as ``steps``."""
    return float(np.median([steps if step is None else step for step in cell["escape_step"]]))


def plateau_survival(runs: list[dict], steps: list[int]) -> list[float]:
    """Fraction of ``runs`` still on the unigram plateau after each of ``steps``: those whose
    ``escape_step`` (:func:`empirical.markov.criterion.escape_step`) is later than the step, or None."""
    return [sum(run["escape_step"] is None or run["escape_step"] > step for run in runs) / len(runs)
            for step in steps]
