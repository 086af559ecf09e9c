"""The figures of an analysis report's sections (``hmmtf analyze``, ``hmmtf reproduce``'s analysis
stages), each drawn by :mod:`empirical.analysis.figures` or :mod:`empirical.analysis.patching_figures`."""
from __future__ import annotations

from pathlib import Path

import hmm
from empirical.analysis.figures import (
    plot_offset_profiles,
    plot_offset_summary,
    plot_pattern_comparison,
    plot_previous_token_probes,
    plot_shuffle,
    plot_task_state_probes,
    plot_trained_attention,
)
from empirical.analysis.patching_figures import plot_history_patching, plot_state_forcing
from empirical.analysis.report import Analysis
from empirical.training.result_files import (HISTORY_PATCHING_FIGURE, OFFSET_PROFILES_FIGURE, OFFSET_SUMMARY_FIGURE,
                                             PATTERN_COMPARISON_FIGURE, PREVIOUS_TOKEN_PROBES_FIGURE, SHUFFLE_FIGURE,
                                             STATE_FORCING_FIGURE, TASK_STATE_PROBES_FIGURE, TRAINED_ATTENTION_FIGURE)


def write_figures(analysis: Analysis, prompt_format: hmm.PromptFormat, max_distance: int, out: Path) -> None:
    """The figures of the report's sections into ``out``: the seven of :mod:`empirical.analysis.figures`
    and the two of :mod:`empirical.analysis.patching_figures`."""
    report = analysis.report
    if "shuffle" in report:
        plot_shuffle(report["shuffle"], out / SHUFFLE_FIGURE)
    if "probes" in report:
        plot_task_state_probes(report["probes"], out / TASK_STATE_PROBES_FIGURE)
        plot_previous_token_probes(report["probes"], max_distance, out / PREVIOUS_TOKEN_PROBES_FIGURE)
    if "offsets" in report:
        plot_trained_attention(analysis.trained_patterns, analysis.example, prompt_format,
                               out / TRAINED_ATTENTION_FIGURE)
        trained = {f"layer {layer + 1}": patterns[None] for layer, patterns in enumerate(analysis.trained_patterns)}
        ideal = {name: composed[None, None] for name, composed in analysis.hand_built_composed.items()}
        plot_pattern_comparison(trained, ideal, report["offsets"]["best_match_composed"],
                                report["offsets"]["best_match_composed_random_init"],
                                out / PATTERN_COMPARISON_FIGURE)
        plot_offset_profiles(report["offsets"], out / OFFSET_PROFILES_FIGURE)
        plot_offset_summary(report["offsets"]["summary"], out / OFFSET_SUMMARY_FIGURE)
    if "patching" in report:
        write_patching_figures(report["patching"], out)


def write_patching_figures(patching: dict, out: Path) -> None:
    """The two figures of the patching section (:func:`empirical.analysis.report.patching_report`) into ``out``."""
    plot_state_forcing(patching["state_forcing"], out / STATE_FORCING_FIGURE)
    plot_history_patching(patching["history"], out / HISTORY_PATCHING_FIGURE)
