"""The name of every file a command writes into its output folder, in one place: the writers name
their files from here, and the output policy (:mod:`hmmtf.options`) reads here which files a
command would write, so that it replaces none it does not own.

A command's files (:class:`ResultFiles`) are its *reports*, JSON files that record what they are
the results of (the checkpoint they measured, or the command line of a study), and their
*companions* (figures, copies, tables), which record nothing and belong to the reports beside
them. :data:`COMMAND_FILES` lists them by subcommand; two commands whose names depend on their
options have a function instead (:func:`calibration_files`, :func:`markov_sweep_files`).
"""
from __future__ import annotations

from dataclasses import dataclass

from empirical.training.train import METRICS_FILE


@dataclass(frozen=True)
class ResultFiles:
    """What a command writes into its output folder: ``reports`` (JSON, each recording what it is
    the result of) and their ``companions``."""

    reports: tuple[str, ...]
    companions: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every file, reports first."""
        return self.reports + self.companions


TRAIN_SUMMARY_FILE = "train_summary.json"
"""What ``hmmtf train`` writes beside its checkpoint and log when the run ends: its summary."""

EVALUATION_FILE = "evaluation.json"
COMPETENCE_FILE = "competence.json"
SIDE_BY_SIDE_FILE = "hand_built.json"
"""The reports of ``hmmtf evaluate``: the evaluation, the competence result, the side-by-side with the hand-built network."""
IN_CONTEXT_FIGURE = "in_context.png"
REGIME_FIGURE = "regime.png"
TRAINING_LOSS_FIGURE = "training_loss.png"
COMPETENCE_FIGURE = "competence.png"
SIDE_BY_SIDE_FIGURE = "hand_built_in_context.png"

ANALYSIS_FILE = "analysis.json"
"""The report of ``hmmtf analyze``."""
SHUFFLE_FIGURE = "shuffle.png"
TASK_STATE_PROBES_FIGURE = "probes_task_state.png"
PREVIOUS_TOKEN_PROBES_FIGURE = "probes_previous_tokens.png"
TRAINED_ATTENTION_FIGURE = "attention_trained.png"
PATTERN_COMPARISON_FIGURE = "attention_hand_built_vs_trained.png"
OFFSET_PROFILES_FIGURE = "offset_profiles.png"
OFFSET_SUMMARY_FIGURE = "offset_summary.png"
STATE_FORCING_FIGURE = "patching_state_forcing.png"
HISTORY_PATCHING_FIGURE = "patching_history.png"
ANALYSIS_FIGURES = (SHUFFLE_FIGURE, TASK_STATE_PROBES_FIGURE, PREVIOUS_TOKEN_PROBES_FIGURE, TRAINED_ATTENTION_FIGURE,
                    PATTERN_COMPARISON_FIGURE, OFFSET_PROFILES_FIGURE, OFFSET_SUMMARY_FIGURE, STATE_FORCING_FIGURE,
                    HISTORY_PATCHING_FIGURE)
"""The figures of the analysis's sections (:mod:`empirical.analysis.report_figures`)."""

NGRAM_VERDICT_FILE = "ngram-verdict.json"
NGRAM_VERDICT_FIGURE = "ngram-verdict.png"

EXPORT_CONFIG_FILE = "config.json"
EXPORT_WEIGHTS_FILE = "model.safetensors"
"""A TransformerLens export: the HookedTransformer's config (with the checkpoint it came from) and its parameters."""

CURVE_FIGURE = "curve.png"
"""The learning curve ``hmmtf curve`` draws into its run folder (its log and baselines: :mod:`empirical.yardsticks.curves`)."""

LADDER_FILE = "ladder.json"
PLATEAU_FILE = "plateau.json"
DEPTH_FILE = "depth.json"


def _measure(name: str) -> ResultFiles:
    """A measurement of one checkpoint (``hmmtf heads``, ``klmap``, ``beliefs``): ``NAME.json``, ``NAME.png``."""
    return ResultFiles((f"{name}.json",), (f"{name}.png",))


COMMAND_FILES: dict[str, ResultFiles] = {
    "evaluate": ResultFiles((EVALUATION_FILE, COMPETENCE_FILE, SIDE_BY_SIDE_FILE),
                            (IN_CONTEXT_FIGURE, REGIME_FIGURE, METRICS_FILE, TRAINING_LOSS_FIGURE, COMPETENCE_FIGURE,
                             SIDE_BY_SIDE_FIGURE)),
    "analyze": ResultFiles((ANALYSIS_FILE,), ANALYSIS_FIGURES),
    "heads": _measure("heads"),
    "klmap": _measure("klmap"),
    "beliefs": _measure("beliefs"),
    "ngram-verdict": ResultFiles((NGRAM_VERDICT_FILE,), (NGRAM_VERDICT_FIGURE,)),
    "export": ResultFiles((EXPORT_CONFIG_FILE,), (EXPORT_WEIGHTS_FILE,)),
    "signal": ResultFiles(("signal.json",), ("signal.png",)),
    "family-calibration": ResultFiles(("family_calibration.json",), ("family_calibration.png",)),
    "curves": ResultFiles(("curves.json",), ("curves.png",)),
    "plateau": ResultFiles((PLATEAU_FILE,), ("plateau.png",)),
    "depth": ResultFiles((DEPTH_FILE,), ("depth.png",)),
    "ladder": ResultFiles((LADDER_FILE,), ("ladder.md", "ladder_regime.png", "ladder_claim1.png", "ladder_claim2.png",
                                           "ladder_claim3.png", "ladder_learning_curves.png")),
    "markov-incontext": ResultFiles(("results.json",), ("incontext.png",)),
}
"""The files each subcommand writes into its ``--out`` (every one it may write, whatever its options)."""


def calibration_files(preset: str) -> ResultFiles:
    """What ``hmmtf calibrate --preset PRESET`` writes: ``PRESET.json`` and ``PRESET.png``."""
    return ResultFiles((f"{preset}.json",), (f"{preset}.png",))


MARKOV_SWEEP_FIGURES = ("phase_diagram.png", "read_back.png", "plateau_survival.png")


def markov_sweep_files(inits: tuple[str, ...]) -> ResultFiles:
    """What ``hmmtf markov-sweep`` writes: ``results.json``, its figures, one loss-curve figure per initialisation."""
    return ResultFiles(("results.json",), (*MARKOV_SWEEP_FIGURES, *(loss_curves_figure(init) for init in inits)))


def loss_curves_figure(init: str) -> str:
    """The Markov sweep's figure of the loss curves of the runs initialised with ``init``."""
    return f"loss_curves_{init}.png"
