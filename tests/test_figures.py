"""Figures a reader can trust: axes span the data drawn (the attention figure on a prompt shorter
than its window), legends sit outside every panel (or off the curves), axes of counts
(demonstrations, positions, memory lengths) carry integer ticks only, log axes several labelled
ticks, lines that would lie on each other are told apart, bands are explained, and titles speak
the ledger's verdict words. The figures of committed results are drawn from their JSON (read only)."""
import json
import re
from pathlib import Path

import pytest
import torch
from recorded_figures import figures_kept

from bounds.figures import theorem1_terms
from empirical.analysis.figures import plot_pattern_comparison
from empirical.analysis.patching_figures import plot_state_forcing
from empirical.reports.plots import plot_calibration, plot_competence, plot_in_context, plot_regime

DEMONSTRATIONS = [0, 1, 2]
"""Few points: matplotlib's default locator ticks such an axis at 0, 0.25, 0.5, ..."""


def ticks_inside(axis, which: str = "x") -> list[float]:
    low, high = sorted(axis.get_xlim() if which == "x" else axis.get_ylim())
    values = axis.get_xticks() if which == "x" else axis.get_yticks()
    return [value for value in values if low <= value <= high]


def assert_integer_ticks(axis, which: str = "x") -> None:
    ticks = ticks_inside(axis, which)
    assert ticks and all(value == round(value) for value in ticks), ticks


def assert_legend_outside_every_panel(figure) -> None:
    """No panel has a legend of its own, the figure has one, and it overlaps no panel."""
    assert all(axis.get_legend() is None for axis in figure.axes)
    (legend,) = figure.legends
    box = legend.get_window_extent()
    for axis in figure.axes:
        panel = axis.get_window_extent()
        assert box.y1 <= panel.y0 or box.y0 >= panel.y1 or box.x1 <= panel.x0 or box.x0 >= panel.x1
    labels = [text.get_text() for text in legend.get_texts()]
    assert len(labels) == len(set(labels)), labels


@pytest.mark.parametrize(("length", "shown"), [(35, 35), (60, 40)])
def test_the_attention_figure_spans_the_positions_it_draws(tmp_path, length, shown):
    """The last 40 positions of a longer prompt, every position of a shorter one: 35 positions
    are labelled -35..-1, not -40..-1."""
    generator = torch.Generator().manual_seed(0)
    trained = {"layer 1": torch.rand(1, 2, length, length, generator=generator)}
    ideal = {"history.1": torch.rand(1, 1, length, length, generator=generator)}
    match = {"history.1": {"layer": 1, "head": 0, "similarity": 0.5}}
    with figures_kept() as kept:
        plot_pattern_comparison(trained, ideal, match, match, tmp_path / "attention.png")
    [(_, figure)] = kept
    panels = [axis for axis in figure.axes if axis.images]
    assert len(panels) == 3
    edge = -shown - 0.5
    for axis in panels:
        (image,) = axis.images
        assert image.get_array().shape == (shown, shown)
        assert list(image.get_extent()) == [edge, -0.5, -0.5, edge]
        assert axis.get_xlim() == (edge, -0.5) and axis.get_ylim() == (-0.5, edge)
        for which in ("x", "y"):
            assert_integer_ticks(axis, which)
            assert min(ticks_inside(axis, which)) >= -shown
    assert f"last {shown} positions" in figure._suptitle.get_text()


def curves(names: list[str], x_key: str, x: list[int]) -> dict:
    """An ``evaluate_predictors``-style curve: every predictor's accuracy and loss at ``x``."""
    curve = {x_key: x}
    for index, name in enumerate(names):
        values = [1.0 + 0.1 * index - 0.05 * k for k in range(len(x))]
        curve[name] = dict.fromkeys(("accuracy", "loss"), values) | {
            f"{metric}_stderr": [0.01] * len(x) for metric in ("accuracy", "loss")}
    return curve


TRAINING = ["model", "bayes", "unigram", "oracle"]
FRESH = ["model", "bayes_training", "bayes_reference", "unigram", "oracle"]


def test_the_regime_figure_keeps_its_legend_off_the_curves_and_counts_demonstrations_in_integers(tmp_path):
    evaluation = {"by_demonstrations": curves(TRAINING, "num_demonstrations", DEMONSTRATIONS), "regime": {
        "training_tasks": 8, "fresh_tasks": 32, "reference_tasks": 64,
        "fresh_hmms": {"by_demonstrations": curves(FRESH, "num_demonstrations", DEMONSTRATIONS)},
        "memorisation": {"all_positions": {"memorisation": 0.01, "interval_95": [0.0, 0.02], "fraction_of_gap": 0.1,
                                           "verdict": "in context"}}}}
    with figures_kept() as kept:
        plot_regime(evaluation, tmp_path / "regime.png")
    [(_, figure)] = kept
    assert_legend_outside_every_panel(figure)
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["RoFormer", "Bayes of the training mixture", "unigram", "oracle (the prompt's own HMM)",
                      "Bayes of the reference mixture"]
    for axis in figure.axes:
        assert_integer_ticks(axis)


def test_the_in_context_and_calibration_figures_keep_their_legends_off_the_curves(tmp_path):
    evaluation = {"by_demonstrations": curves(["model", "bayes", "unigram"], "num_demonstrations", DEMONSTRATIONS),
                  "by_test_position": curves(["model", "bayes", "unigram"], "position", [0, 1, 2]),
                  "num_prompts": 4, "prompt_format": {"num_demos": 2, "demo_length": 3, "test_length": 3}}
    calibration = {"preset": "tiny", "num_prompts": 4, "results": [
        {"concentration": concentration, "num_demonstrations": DEMONSTRATIONS, "bayes_accuracy": [0.3, 0.4, 0.5],
         "bayes_accuracy_stderr": [0.01] * 3, "bayes_loss": [1.2, 1.1, 1.0], "unigram_loss": [1.3] * 3}
        for concentration in (1.0, 0.1)]}
    with figures_kept() as kept:
        plot_in_context(evaluation, tmp_path / "in_context.png")
        plot_calibration(calibration, tmp_path / "calibration.png")
    for _, figure in kept:
        assert_legend_outside_every_panel(figure)
        for axis in figure.axes:
            assert_integer_ticks(axis)


ROOT = Path(__file__).resolve().parents[1]


def committed(path: str) -> dict:
    """A committed result (read, never rewritten)."""
    return json.loads((ROOT / path).read_text())


def overlaps(first, second) -> bool:
    return not (first.x1 <= second.x0 or first.x0 >= second.x1 or first.y1 <= second.y0 or first.y0 >= second.y1)


def test_the_theorem1_figure_keeps_the_generalization_legend_off_its_panel_labels_its_log_axis_and_tells_the_bounds_apart(
        tmp_path):
    with figures_kept() as kept:
        theorem1_terms(committed("figures/verification/report.json"), tmp_path / "theorem1_terms.png")
    [(_, figure)] = kept
    approximation, generalization, optimization, construction = figure.axes
    assert not overlaps(generalization.get_legend().get_window_extent(), generalization.get_window_extent())
    low, high = generalization.get_ylim()
    labelled = [tick for tick in generalization.yaxis.get_major_ticks()
                if low <= tick.get_loc() <= high and tick.label1.get_text()]
    assert len(labelled) >= 3, [tick.label1.get_text() for tick in labelled]
    bounds = [line for line, label in zip(*construction.get_legend_handles_labels()) if label.startswith("bound")]
    assert len(bounds) == 2
    assert bounds[0]._unscaled_dash_pattern != bounds[1]._unscaled_dash_pattern
    labels = [label for label in construction.get_legend_handles_labels()[1] if label.startswith("bound")]
    assert labels[0] == "bound p A eps(beta)"
    assert re.fullmatch(r"bound p A eps\(beta\)\n\(within \d+% of prompt 0's: drawn on it\)", labels[1]), labels[1]


@pytest.mark.parametrize(("path", "words"), [
    ("figures/ladder/tasks-64-small/competence.json",
     ["at the in-context-unigram level (competent, beats the in-context bigram: not reproduced)",
      "closes none of the in-context-unigram-to-ceiling gap (0.052 nats): its loss is above the in-context "
      "unigram's by 133% [118%, 149%] of it"]),
    ("figures/ladder/tasks-8192-deep/competence.json", ["closes 2% [-1%, 5%] of", ": not resolved from none"]),
    ("figures/paper/4x4x64/competence.json",
     ["beats the in-context bigram (competent, beats the in-context bigram: holds)",
      "closes 77% [75%, 80%] of the in-context-unigram-to-ceiling gap"]),
    ("figures/paper-scale/cpu/paper-2x4x64-4x/competence.json",
     ["closes 90% [88%, 92%] of the gap from the in-context unigram to the ceiling's upper bound",
      "of the gap to the ceiling, at most that", "ceiling's upper bound: collapsed SMC, 16 runs x 128 particles"]),
])
def test_the_competence_title_speaks_the_ledgers_words_and_the_bigram_is_not_hidden_by_the_trigram(tmp_path, path,
                                                                                                    words):
    competence = committed(path)
    with figures_kept() as kept:
        plot_competence(competence, tmp_path / "competence.png")
    [(_, figure)] = kept
    title = figure._suptitle.get_text()
    assert all(word in title for word in words), title
    assert "closes -" not in title
    axis = figure.axes[0]
    lines = {container.get_label(): container.lines[0] for container in axis.containers}
    assert ("upper bound on the ceiling (collapsed SMC)" in lines) == ("upper_bound" in competence["ceiling"])
    bigram, trigram = lines["in-context bigram"], lines["in-context trigram"]
    assert bigram.get_zorder() > trigram.get_zorder()
    assert (bigram.get_marker(), bigram.get_linestyle()) != (trigram.get_marker(), trigram.get_linestyle())
    assert trigram.get_fillstyle() == "none"
    assert list(trigram.get_xdata()) == [x + 0.15 for x in bigram.get_xdata()]


def test_the_state_forcing_legend_explains_its_bands(tmp_path):
    forcing = committed("figures/patching/analysis.json")["patching"]["state_forcing"]
    with figures_kept() as kept:
        plot_state_forcing(forcing, tmp_path / "patching_state_forcing.png")
    [(_, figure)] = kept
    legend = figure.axes[0].get_legend()
    labels = [text.get_text() for text in legend.get_texts()]
    assert [label for label in labels if label.endswith("mean (line),\n95% interval (band)")] == labels[:2]
    assert legend.get_title().get_text() == "means; bands and bars: bootstrap\n95% intervals over prompts"
