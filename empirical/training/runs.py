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
from empirical.training.train import CHECKPOINT_DIR


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


def checkpoint_folder(path: str | Path) -> Path:
    """``path`` if it is a checkpoint folder (it holds ``config.json``: ``models/NAME``,
    ``runs/NAME/checkpoint``), ``path/checkpoint`` if it is a run folder of ``hmmtf train``
    (``runs/NAME``); ``ValueError`` naming ``path`` otherwise."""
    path = Path(path)
    if (path / CONFIG_FILE).is_file():
        return path
    if has_checkpoint(path / CHECKPOINT_DIR):
        return path / CHECKPOINT_DIR
    raise ValueError(
        f"path: {str(path)!r} holds no checkpoint; expected a checkpoint folder with {CONFIG_FILE} "
        f"(models/NAME, runs/NAME/{CHECKPOINT_DIR}) or a run folder with {CHECKPOINT_DIR}/ (runs/NAME)"
    )


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
