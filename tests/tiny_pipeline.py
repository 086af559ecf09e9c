"""The tiny preset's pipeline (``hmmtf train``, ``evaluate``, ``analyze``) as the command-line
tests run it, made once per pytest process by the session fixtures of ``conftest.py``.

Training, evaluation and analysis are each a few seconds; four test modules read their outputs
(the commands' JSONs and figures, the ladder's points, the patching section's checkpoint). Their
tests carry ``pytest.mark.xdist_group(GROUP)``, so that ``make test`` (``--dist loadgroup``) runs
them on one worker and each command runs once in the suite.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import NamedTuple

GROUP = "tiny-pipeline"
STEPS = 40
HAND_BUILT_PROMPTS = 4
HAND_BUILT_L = (2, 1)
HAND_BUILT_T = (2, 3)
EVALUATE_PROMPTS = 16
FRESH_TASKS, REFERENCE_TASKS = 32, 64
CEILING_PARTICLES = 16


def train_argv(run_dir: Path) -> list[str]:
    return ["train", "--preset", "tiny", "--steps", str(STEPS), "--run-dir", str(run_dir), "--no-progress"]


def evaluate_argv(checkpoint: Path, out: Path) -> list[str]:
    """Every section: the in-context curves, the hand-built side by side, the regime diagnostic, the
    competence result."""
    return ["evaluate", str(checkpoint), "--num-prompts", str(EVALUATE_PROMPTS), "--out", str(out),
            "--hand-built-prompts", str(HAND_BUILT_PROMPTS), "--hand-built-L", *map(str, HAND_BUILT_L),
            "--hand-built-T", *map(str, HAND_BUILT_T),
            "--fresh-tasks", str(FRESH_TASKS), "--reference-tasks", str(REFERENCE_TASKS),
            "--ceiling-particles", str(CEILING_PARTICLES)]


def analyze_argv(checkpoint: Path, out: Path) -> list[str]:
    """The shuffle, probe and offset sections (patching: tests/test_empirical_patching.py)."""
    return ["analyze", str(checkpoint), "--out", str(out), "--probe-train-prompts", "48",
            "--probe-test-prompts", "24", "--shuffle-prompts", "16", "--hand-built-prompts", "8",
            "--max-distance", "3", "--max-offset", "4", "--batch-size", "16",
            "--sections", "shuffle", "probes", "offsets"]


class CommandRun(NamedTuple):
    """A command the pipeline ran: its output folder, its arguments and what it printed."""

    out: Path
    argv: list[str]
    stdout: str


def run_on_checkpoint(command_argv, run_dir: Path, out: Path) -> CommandRun:
    """``hmmtf`` run with ``argv = command_argv(checkpoint of run_dir, out)`` (:func:`evaluate_argv`,
    :func:`analyze_argv`), which must succeed."""
    import hmmtf

    argv = command_argv(run_dir / "checkpoint", out)
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert hmmtf.main(argv) == 0
    return CommandRun(out, argv, stdout.getvalue())
