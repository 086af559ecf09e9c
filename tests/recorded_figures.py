"""Figures saved but not drawn, for the command tests whose figures another test draws, and
figures kept for the tests that inspect their axes.

Drawing is most of a small command's time (matplotlib's layout and rasterisation: 6 of the tiny
``hmmtf analyze``'s 9.6 s on one core), and every figure function is drawn for real somewhere in
the suite: the analysis, patching and in-context figures by the paper-mini pipeline
(``tests/test_empirical_reproduce.py``), the Markov sweep's by its short run
(``tests/test_markov_sweep.py``), the others by their own command's test. A command test that
only needs to know which figures its command writes records them instead.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import matplotlib.figure
import pytest


@contextlib.contextmanager
def figures_recorded_not_drawn():
    """Within the block ``Figure.savefig`` draws nothing: it writes an empty file at the path it
    is given and adds the path to the yielded list."""
    saved: list[Path] = []

    def record(figure, path, **options) -> None:
        saved.append(Path(path))
        Path(path).touch()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", record)
        yield saved


@contextlib.contextmanager
def figures_kept():
    """Within the block ``Figure.savefig`` writes nothing and keeps the figure: the yielded list
    gets ``(path, figure)``, laid out as a save would (to inspect its axes, ticks and legends)."""
    kept: list[tuple[Path, matplotlib.figure.Figure]] = []

    def keep(figure, path, **options) -> None:
        figure.draw_without_rendering()
        kept.append((Path(path), figure))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", keep)
        yield kept
