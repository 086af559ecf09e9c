"""From run records (:func:`empirical.studies.markov.runs.train_and_evaluate`) to summaries: trapped seeds
per arm and cell with Wilson intervals, the same pooled over each side of ``p + q = 1``, and how
long runs stayed on the unigram plateau (escape steps, right-censored at the budget)."""
from __future__ import annotations

import math
from collections import defaultdict

from empirical.studies.markov.criterion import reference_lines

WILSON_Z = 1.96
"""Normal quantile of the 95% Wilson score intervals."""

SIDES = {"p + q < 1": lambda p, q: p + q < 1, "p + q > 1": lambda p, q: p + q > 1}
"""The two sides of the i.i.d. line, by name: the paper claims the trap for ``p + q > 1`` only."""


def wilson_interval(successes: int, trials: int, z: float = WILSON_Z) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``k / n`` (Wilson 1927)::

        centre = (k + z^2 / 2) / (n + z^2),
        half   = z sqrt(k (n - k) / n + z^2 / 4) / (n + z^2),

    returned as ``(centre - half, centre + half)``; unlike ``k/n +- z sqrt(k(n-k)/n^3)`` it stays
    inside ``[0, 1]`` and is not empty at ``k = 0`` or ``k = n``."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials: {trials!r}; expected an integer >= 1")
    if isinstance(successes, bool) or not isinstance(successes, int) or not 0 <= successes <= trials:
        raise ValueError(f"successes: {successes!r}; expected an integer in [0, trials = {trials}]")
    centre = (successes + z**2 / 2) / (trials + z**2)
    half = z * math.sqrt(successes * (trials - successes) / trials + z**2 / 4) / (trials + z**2)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def count_record(runs: list[dict]) -> dict:
    """Trapped and censored counts of ``runs`` with their Wilson intervals: ``seeds``,
    ``trapped``, ``trapped_fraction``, ``trapped_interval``, ``censored`` (runs whose escape step
    is None: still on the unigram plateau at the budget) and ``censored_interval``."""
    trapped = sum(run["trapped"] for run in runs)
    censored = sum(run["escape_step"] is None for run in runs)
    return {
        "seeds": len(runs),
        "trapped": trapped,
        "trapped_fraction": trapped / len(runs),
        "trapped_interval": list(wilson_interval(trapped, len(runs))),
        "censored": censored,
        "censored_interval": list(wilson_interval(censored, len(runs))),
    }


def aggregate_cells(runs: list[dict]) -> list[dict]:
    """One record per ``(init, architecture, p, q)``, in the order of first appearance: reference
    losses, :func:`count_record`, and the per-seed relative excesses, memory coordinates, escape
    steps and read-back transition probabilities ``P(1|0)``, ``P(0|1)`` with their spreads, in
    seed order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        groups[(run["init"], run["architecture"], run["p"], run["q"])].append(run)
    cells = []
    for (init, architecture, p, q), members in groups.items():
        members = sorted(members, key=lambda run: run["seed"])
        references = reference_lines(p, q)
        cells.append({
            "init": init,
            "architecture": architecture,
            "p": p,
            "q": q,
            "bigram_loss": references.bigram,
            "unigram_loss": references.unigram,
            **count_record(members),
            "relative_excess": [run["relative_excess"] for run in members],
            "memory_coordinate": [run["memory_coordinate"] for run in members],
            "escape_step": [run["escape_step"] for run in members],
            "p_hat": [run["read_back_kernel"][0][1] for run in members],
            "p_hat_spread": [run["read_back_spread"][0][1] for run in members],
            "q_hat": [run["read_back_kernel"][1][0] for run in members],
            "q_hat_spread": [run["read_back_spread"][1][0] for run in members],
        })
    return cells


def aggregate_sides(runs: list[dict]) -> list[dict]:
    """One record per ``(init, architecture, side)`` with runs on that side of ``p + q = 1``
    (:data:`SIDES`): :func:`count_record` of the pooled runs, and the range of the trapped runs'
    relative excess (``None`` when none is trapped)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        for side, on_side in SIDES.items():
            if on_side(run["p"], run["q"]):
                groups[(run["init"], run["architecture"], side)].append(run)
    records = []
    for (init, architecture, side), members in groups.items():
        trapped_excess = [run["relative_excess"] for run in members if run["trapped"]]
        records.append({
            "init": init, "architecture": architecture, "side": side, **count_record(members),
            "trapped_relative_excess": [min(trapped_excess), max(trapped_excess)] if trapped_excess else None,
        })
    return records


def plateau_survival(runs: list[dict], steps: list[int]) -> list[float]:
    """Fraction of ``runs`` still on the unigram plateau after each of ``steps``: those whose
    ``escape_step`` (:func:`empirical.studies.markov.criterion.escape_step`) is later than the step, or None.

    Every run of a sweep is censored at the same time (the budget), so this empirical fraction
    is the Kaplan-Meier estimate of ``P(escape step > t)`` for ``t`` below the budget, and its
    value at the budget is the censored fraction."""
    return [sum(run["escape_step"] is None or run["escape_step"] > step for run in runs) / len(runs)
            for step in steps]


def hardest_cell(runs: list[dict]) -> tuple[float, float]:
    """The cell of ``runs`` with the largest ``p + q`` (ties: the larger ``p``): the chain farthest
    on the side of ``p + q = 1`` where the paper places the trap; ``(0.9, 0.9)`` on the default grid."""
    if not runs:
        raise ValueError("runs: empty; expected at least one run record")
    return max({(run["p"], run["q"]) for run in runs}, key=lambda cell: (cell[0] + cell[1], cell))


def median_escape_step(runs: list[dict]) -> int | None:
    """Kaplan-Meier median of the escape steps of ``runs``: the first escape step at which at most
    half of the runs are still on the plateau (:func:`plateau_survival`); None ("never") when more
    than half are censored at the budget."""
    steps = sorted({run["escape_step"] for run in runs if run["escape_step"] is not None})
    return next((step for step, alive in zip(steps, plateau_survival(runs, steps)) if alive <= 0.5), None)


def escape_record(runs: list[dict]) -> dict:
    """The escape steps of ``runs``: ``median`` (:func:`median_escape_step`), ``first`` and ``last``
    of those that escaped (None if none did), ``censored`` (still on the plateau at the budget) and ``seeds``."""
    escaped = [run["escape_step"] for run in runs if run["escape_step"] is not None]
    return {"median": median_escape_step(runs), "first": min(escaped, default=None), "last": max(escaped, default=None),
            "censored": len(runs) - len(escaped), "seeds": len(runs)}


def verdict_counts(runs: list[dict]) -> list[dict]:
    """The numbers of the verdict, one record per arm ``(init, architecture)`` in order of first
    appearance: :func:`count_record` of its runs on each side of ``p + q = 1`` (keys of
    :data:`SIDES`; None where the sweep has no cell on that side) and at the sweep's
    :func:`hardest_cell` (``at_hardest_cell``, None if the arm has no run there), and
    :func:`escape_record` of every cell with ``p + q > 1`` (``escape``, in ``(p, q)`` order)."""
    hardest = hardest_cell(runs)
    arms: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        arms[(run["init"], run["architecture"])].append(run)
    records = []
    for (init, architecture), members in arms.items():
        on_side = {side: [run for run in members if rule(run["p"], run["q"])] for side, rule in SIDES.items()}
        at_hardest = [run for run in members if (run["p"], run["q"]) == hardest]
        cells = sorted({(run["p"], run["q"]) for run in on_side["p + q > 1"]})
        records.append({
            "init": init,
            "architecture": architecture,
            **{side: count_record(side_runs) if side_runs else None for side, side_runs in on_side.items()},
            "hardest_cell": list(hardest),
            "at_hardest_cell": count_record(at_hardest) if at_hardest else None,
            "escape": [{"p": p, "q": q, **escape_record([run for run in members if (run["p"], run["q"]) == (p, q)])}
                       for p, q in cells],
        })
    return records
