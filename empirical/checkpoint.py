"""Checkpoints: a directory with ``model.safetensors``, ``optimizer.safetensors`` and
``config.json`` (model config, training config, the caller's task description, step, command).

Everything that determines the rest of a run is stored: weights, AdamW moments and step counts,
the optimizer's hyper-parameters, the step and (written by :func:`empirical.train.train`) the sums of
the metrics log's averaging window. The data of step ``s`` is a function of the seed
and ``s`` (see :mod:`empirical.data`) and the model has no dropout, so a resumed run repeats the
uninterrupted one bit for bit.

A save never leaves a half-written checkpoint: it writes ``<dir>.tmp``, renames the previous
checkpoint ``<dir>`` to ``<dir>.old``, renames ``<dir>.tmp`` to ``<dir>`` and deletes ``<dir>.old``.
A crash between the two renames leaves no ``<dir>`` but ``<dir>.old`` (the previous checkpoint)
and a complete ``<dir>.tmp`` (the new one); :func:`load_checkpoint` and :func:`has_checkpoint`
refuse that state, with the paths to restore, rather than let a run restart from step 0.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from empirical.model import RoFormer, RoFormerConfig

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
CONFIG_FILE = "config.json"


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns."""

    model: RoFormer
    config: dict
    """The JSON config: ``model``, ``train``, ``task``, ``step``, ``command``."""
    optimizer_state: dict | None
    """A ``torch.optim.Optimizer.state_dict()``, or None when the checkpoint has none."""


def _flatten_optimizer_state(state: dict) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Split ``optimizer.state_dict()`` into tensors ``state.{param}.{name}`` and JSON groups."""
    tensors = {
        f"state.{index}.{name}": value.detach().contiguous().cpu()
        for index, per_param in state["state"].items()
        for name, value in per_param.items()
    }
    groups = [{key: list(value) if isinstance(value, tuple) else value for key, value in group.items()}
              for group in state["param_groups"]]
    return tensors, groups


def _unflatten_optimizer_state(tensors: dict[str, torch.Tensor], groups: list[dict]) -> dict:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    param_groups = [{key: tuple(value) if key == "betas" else value for key, value in group.items()}
                    for group in groups]
    return {"state": state, "param_groups": param_groups}


def _staging(directory: Path) -> Path:
    return directory.with_name(directory.name + ".tmp")


def _previous(directory: Path) -> Path:
    return directory.with_name(directory.name + ".old")


def _check_not_interrupted(directory: Path) -> None:
    """``ValueError`` if a save was interrupted between its two renames (see the module docstring)."""
    if not directory.exists() and _previous(directory).is_dir():
        raise ValueError(
            f"checkpoint: {str(directory)!r} is missing but {str(_previous(directory))!r} exists: a save was "
            f"interrupted between renaming the previous checkpoint away and renaming the new one "
            f"({str(_staging(directory))!r}, complete if present) into place; expected {str(directory)!r}: rename "
            f"{str(_staging(directory))!r} (the new checkpoint) or {str(_previous(directory))!r} (the previous one) to it"
        )


def has_checkpoint(directory: Path) -> bool:
    """Whether ``directory`` holds a checkpoint to resume; ``ValueError`` after an interrupted save."""
    directory = Path(directory)
    _check_not_interrupted(directory)
    return directory.is_dir()


def save_checkpoint(directory: Path, model: RoFormer, optimizer: torch.optim.Optimizer | None, config: dict) -> None:
    """Write ``model`` (unwrapped: not DDP, not compiled), ``optimizer`` and ``config`` to ``directory``."""
    directory = Path(directory)
    _check_not_interrupted(directory)
    staging, previous = _staging(directory), _previous(directory)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_model(model, str(staging / MODEL_FILE))
    full_config = dict(config, model=model.config.to_dict())
    if optimizer is not None:
        tensors, groups = _flatten_optimizer_state(optimizer.state_dict())
        save_file(tensors, str(staging / OPTIMIZER_FILE))
        full_config["optimizer_param_groups"] = groups
    (staging / CONFIG_FILE).write_text(json.dumps(full_config, indent=2) + "\n")
    if directory.exists():
        shutil.rmtree(previous, ignore_errors=True)  # left by a crash after the last save's renames
        os.replace(directory, previous)
    os.replace(staging, directory)
    shutil.rmtree(previous, ignore_errors=True)


def load_checkpoint(directory: Path, device: torch.device | str = "cpu") -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`; the model is on ``device``."""
    directory = Path(directory)
    _check_not_interrupted(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise ValueError(f"checkpoint: {str(directory)!r} has no {CONFIG_FILE}; expected a checkpoint directory")
    config = json.loads(config_path.read_text())
    model = RoFormer(RoFormerConfig.from_dict(config["model"]))
    load_model(model, str(directory / MODEL_FILE), device="cpu")
    model.to(device)
    optimizer_state = None
    if (directory / OPTIMIZER_FILE).is_file():
        # On the CPU: ``Optimizer.load_state_dict`` moves the moments to their parameters' device
        # and keeps AdamW's ``step`` counters on the CPU, where non-capturable AdamW expects them.
        tensors = load_file(str(directory / OPTIMIZER_FILE), device="cpu")
        optimizer_state = _unflatten_optimizer_state(tensors, config["optimizer_param_groups"])
    return Checkpoint(model, config, optimizer_state)
