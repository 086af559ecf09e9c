"""A trained run in one call: :func:`load_run` reads a checkpoint and rebuilds the data it was
trained on, as ``hmmtf evaluate`` and ``hmmtf analyze`` do, for use from Python::

    from empirical.training.runs import load_run
    run = load_run("models/tasks-8192-small", num_prompts=64)
    logits = run.model(run.prompts.tokens)            # (64, 118, 9)

The checkpoint's ``config.json`` names its preset, mixture seed, prompt format and data seed
(:meth:`empirical.training.presets.ExperimentPreset.task`); :func:`empirical.training.presets.preset_from_task`
rebuilds that preset and refuses one whose mixture has changed since.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

import hmm
from empirical.training.checkpoint import CONFIG_FILE, has_checkpoint, load_checkpoint
from empirical.training.data import held_out_prompts
from empirical.training.model import RoFormer
from empirical.training.presets import ExperimentPreset, preset_from_task
from empirical.training.result_files import TRAIN_SUMMARY_FILE
from empirical.training.run_control import LOCK_FILE
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE


class LoadedRun(NamedTuple):
    """What :func:`load_run` returns."""

    model: RoFormer
    """The trained RoFormer, in eval mode."""
    preset: ExperimentPreset
    """The preset it was trained on, with the checkpoint's seeds and prompt format."""
    mixture: hmm.Mixture
    """``preset.build_mixture()``: the mixture of HMMs it was trained on (float64, CPU)."""
    prompts: hmm.Prompts
    """Held-out prompts (:func:`empirical.training.data.held_out_prompts`, the stream ``hmmtf evaluate`` reads), on the CPU."""
    config: dict
    """The checkpoint's ``config.json``: ``model``, ``train``, ``task``, ``step``, ``command``."""
    checkpoint: Path
    """The checkpoint folder read."""

    @property
    def prompt_format(self) -> hmm.PromptFormat:
        """The prompts' layout (demonstrations, their lengths, the test segment)."""
        return self.preset.prompt_format


CHECKPOINT_EXPECTED = (f"a checkpoint folder with {CONFIG_FILE} (models/NAME, runs/NAME/{CHECKPOINT_DIR}) or a run "
                       f"folder with {CHECKPOINT_DIR}/ (runs/NAME)")
"""What :func:`checkpoint_folder` accepts, as its refusals say."""


def checkpoint_folder(path: str | Path, name: str = "path") -> Path:
    """``path`` if it is a checkpoint folder (it holds ``config.json``: ``models/NAME``,
    ``runs/NAME/checkpoint``), ``path/checkpoint`` if it is a run folder of ``hmmtf train``
    (``runs/NAME``). ``FileNotFoundError`` when ``path`` does not exist and ``ValueError`` when it
    holds no checkpoint, naming the argument ``name`` and ``path``; the checkpoint module's
    ``ValueError`` when a save into it was interrupted. :func:`load_run` and every ``hmmtf``
    command that reads a checkpoint (``name`` ``checkpoint``) resolve their argument with it."""
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        return path
    if has_checkpoint(path / CHECKPOINT_DIR):
        return path / CHECKPOINT_DIR
    has_checkpoint(path)  # refuses a checkpoint folder whose save was interrupted, naming the paths to restore
    if not path.exists():
        raise FileNotFoundError(f"{name}: {str(path)!r} does not exist; expected {CHECKPOINT_EXPECTED}")
    raise ValueError(f"{name}: {str(path)!r} holds no checkpoint; expected {CHECKPOINT_EXPECTED}")


RUN_FOLDER_FILES = (METRICS_FILE, TRAIN_SUMMARY_FILE, LOCK_FILE)
"""What a run folder of ``hmmtf train`` holds beside its checkpoint: the training log, the summary, the lock."""


def check_run_folder(run_dir: str | Path, name: str = "--run-dir", own: tuple[str, ...] = ()) -> Path:
    """``run_dir`` as a ``Path`` if a training may write there: a run folder holding a checkpoint
    to resume (:func:`empirical.training.checkpoint.has_checkpoint`, which refuses one whose save
    was interrupted), or, for a new run, a folder that does not exist or holds nothing but
    :data:`RUN_FOLDER_FILES` and the caller's ``own`` files (``hmmtf curve``'s curve): what a run
    killed before its first checkpoint leaves. ``ValueError`` naming ``name`` otherwise: a
    checkpoint folder (``models/NAME``, which holds ``config.json`` itself) or a folder of other
    files (results, a user's), which a new run would mix with its own or replace."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or has_checkpoint(run_dir / CHECKPOINT_DIR):
        return run_dir
    expected = (f"expected a new or empty folder, or a run folder of hmmtf train (holding {CHECKPOINT_DIR}/ or "
                f"{METRICS_FILE})")
    if (run_dir / CONFIG_FILE).is_file():
        raise ValueError(f"{name}: {str(run_dir)!r} is a checkpoint folder (it holds {CONFIG_FILE}: a shipped model, "
                         f"or a run's {CHECKPOINT_DIR}/), not a run folder; {expected}")
    strangers = sorted(entry.name for entry in run_dir.iterdir() if entry.name not in {*RUN_FOLDER_FILES, *own})
    if strangers:
        listed = ", ".join(strangers[:3]) + (f" and {len(strangers) - 3} more" if len(strangers) > 3 else "")
        raise ValueError(f"{name}: {str(run_dir)!r} holds no checkpoint but {listed}, which are not a training run's "
                         f"files; {expected}")
    return run_dir


def load_run(path: str | Path, num_prompts: int | None = None, device: torch.device | str = "cpu") -> LoadedRun:
    """The run at ``path`` (a checkpoint or run folder, :func:`checkpoint_folder`): its model on
    ``device`` in eval mode, its preset and mixture, and ``num_prompts`` held-out prompts (the
    preset's ``eval_prompts`` when None; an integer below 1 is refused, naming ``num_prompts``)."""
    if num_prompts is not None and (isinstance(num_prompts, bool) or not isinstance(num_prompts, int)
                                    or num_prompts < 1):
        raise ValueError(f"num_prompts: {num_prompts!r}; expected an integer >= 1, or None for the preset's eval_prompts")
    folder = checkpoint_folder(path)
    saved = load_checkpoint(folder, device)
    preset = preset_from_task(saved.config["task"])
    mixture = preset.build_mixture()
    count = preset.eval_prompts if num_prompts is None else num_prompts
    prompts = held_out_prompts(mixture, preset.prompt_format, count, preset.data_seed)
    return LoadedRun(saved.model.eval(), preset, mixture, prompts, saved.config, folder)
