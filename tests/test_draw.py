"""``hmmtf draw`` (hmmtf/commands/draw.py): the figures the tracked tree does not keep are linked from
no page and are drawn, by the plotting function their command calls, from the committed report
beside them; the figures it can draw that the tree keeps are linked from a page or read by a result."""
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

import hmmtf
from hmmtf.commands.draw import DRAWINGS, draw, drawable
from ledger.provenance import matches_producers
from ledger.results import RESULTS

ROOT = Path(__file__).resolve().parents[1]
PAGE_SUFFIXES = (".md", ".ipynb")
"""The pages that link figures: README.md, docs/ (docs/claims.md renders every claim's figure),
models/README.md, the quickstart notebook."""


def _tracked() -> list[str] | None:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    return [path for path in listing.stdout.split("\0") if path] if listing.returncode == 0 else None


TRACKED = _tracked()
FIGURES = drawable(ROOT)
pytestmark = pytest.mark.skipif(TRACKED is None, reason=f"{ROOT} is not a git checkout: no tracked tree to compare")


def _pages_text() -> str:
    return "\n".join((ROOT / path).read_text() for path in TRACKED or () if path.endswith(PAGE_SUFFIXES))


def _absent() -> dict[str, object]:
    return {figure: drawing for figure, drawing in FIGURES.items() if figure not in set(TRACKED or ())}


def test_the_tree_leaves_out_figures_that_it_can_draw():
    """The design holds at all: some figures are drawn on demand, so the tree lacks them."""
    assert _absent(), "every drawable figure is tracked"


def test_a_figure_the_tree_does_not_keep_is_linked_from_no_page():
    pages = _pages_text()
    linked = sorted(figure for figure in _absent() if figure.removeprefix("figures/") in pages)
    assert not linked, f"linked from a page but not in the tree (commit them, 'hmmtf draw FIGURE'): {linked}"


def test_a_drawable_figure_the_tree_keeps_is_linked_from_a_page_or_read_by_a_result():
    """Else it is bytes the tree need not hold: leave it out (git rm), 'hmmtf draw' draws it."""
    pages = _pages_text()
    kept = sorted(figure for figure in FIGURES if figure in set(TRACKED or ())
                  and figure.removeprefix("figures/") not in pages
                  and not any(matches_producers(figure, result.producers) for result in RESULTS))
    assert not kept, f"tracked, drawable, linked from no page and read by no result: {kept}"


def _one_absent_figure_per_drawing() -> list[tuple[str, object]]:
    """For every drawing that has figures the tree lacks, the one whose report is smallest."""
    chosen = {}
    for figure, drawing in _absent().items():
        size = sum(path.stat().st_size for path in (ROOT / figure).parent.glob("*.json"))
        if drawing not in chosen or size < chosen[drawing][1]:
            chosen[drawing] = (figure, size)
    return sorted((figure, drawing) for drawing, (figure, _) in chosen.items())


@pytest.mark.long_running
@pytest.mark.parametrize("figure, drawing", _one_absent_figure_per_drawing(),
                         ids=[figure for figure, _ in _one_absent_figure_per_drawing()])
def test_a_figure_the_tree_lacks_is_drawn_from_its_committed_report(figure, drawing, tmp_path):
    path = draw(figure, drawing, ROOT, tmp_path)
    assert path == tmp_path / figure
    pixels = imread(str(path))
    assert pixels.ndim == 3 and min(pixels.shape[:2]) >= 200, f"{figure}: {pixels.shape}"
    assert np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0).shape[0] > 2, f"{figure} is blank"


def test_every_drawing_names_a_figure_file_and_a_report_pattern_under_figures():
    for drawing in DRAWINGS:
        assert drawing.figure.endswith(".png") and "/" not in drawing.figure
        assert drawing.report.startswith("figures/") and drawing.report.endswith(".json")


def test_the_command_lists_the_figures_and_refuses_one_it_cannot_draw_in_one_line(capsys):
    assert hmmtf.main(["draw", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(FIGURES)
    assert {line.split()[0] for line in listed if line.endswith("(not drawn)")} == {
        figure for figure in FIGURES if not (ROOT / figure).is_file()}
    assert hmmtf.main(["draw", "figures/nowhere/missing.png"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("hmmtf draw: error: figure: 'figures/nowhere/missing.png' is not a figure hmmtf draw can draw; "
                    "expected one that 'hmmtf draw --list' lists (a figure beside the report it is drawn from)")
