"""Checkpoints: a directory with ``model.safetensors``, ``optimizer.safetensors`` and
``config.json`` (model config, training config, the caller's task description, step, command).

Everything that determines the rest of a run is stored: weights, AdamW moments and step counts,
the optimizer's hyper-parameters, the step and (written by :func:`empirical.training.train.train`) the sums of
the metrics log's averaging window. The data of step ``s`` is a function of the seed
and ``s`` (see :mod:`empirical.training.data`) and the model has no dropout, so a resumed run repeats the
uninterrupted one bit for bit.

A save never leaves a half-written checkpoint: it writes ``<dir>.tmp``, renames the previous
checkpoint ``<dir>`` to ``<dir>.old``, renames ``<dir>.tmp`` to ``<dir>`` and deletes ``<dir>.old``.
A crash between the two renames leaves no ``<dir>`` but ``<dir>.old`` (the previous checkpoint)
and a complete ``<dir>.tmp`` (the new one); :func:`load_checkpoint` and :func:`has_checkpoint`
refuse that state, with the paths to restore, rather than let a run restart from step 0.

A load never runs a network other than the one saved. :func:`save_checkpoint` stores the model
config in the weights file's metadata too (under :data:`MODEL_CONFIG_KEY`), and
:func:`load_checkpoint` refuses, with a ``ValueError`` naming the files:

* a weights or optimizer file that is not a complete safetensors file (truncated, overwritten);
* a ``config.json`` whose model section differs from the config stored with the weights, naming
  each field and both values: also the fields that change no shape (``rotary_base``,
  ``init_std``, ``tie_embeddings``); likewise its task section (``mixture_seed``, ``data_seed``:
  the data the weights were trained on, which ``hmmtf evaluate`` rebuilds), for weights saved since
  the task is stored with them (:data:`TASK_KEY`);
* weights whose names or shapes differ from the network the model section describes, naming the
  tensor and both shapes. This is the only check for weights saved before the metadata existed
  (the committed ``models/tasks-8192-small``), which keep loading.

The bytes of the tensors carry no checksum: a change inside them that keeps the file's length is
not detected.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from empirical.training.model import RoFormer, RoFormerConfig

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
CONFIG_FILE = "config.json"
MODEL_CONFIG_KEY = "model_config"
"""Key of the model config (JSON) in the metadata of ``model.safetensors``."""
TASK_KEY = "task"
"""Key of the task (JSON: preset, mixture, mixture seed, prompt format, data seed) in the metadata
of ``model.safetensors``: the data the weights were trained on."""
SAVED_SECTIONS = {"model": MODEL_CONFIG_KEY, "task": TASK_KEY}
"""The sections of ``config.json`` stored with the weights too, by their metadata keys."""


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


def restore_command(directory: Path) -> str:
    """The command that writes back, from git history, the tensors a committed checkpoint folder
    lacks (:mod:`empirical.training.checkpoint_history`)."""
    return f"`hmmtf restore-checkpoint {directory}`"


def require_optimizer_state(checkpoint: Checkpoint, directory: Path, purpose: str) -> dict:
    """The optimizer state of ``checkpoint`` (loaded from ``directory``), which ``purpose`` (``"resuming
    it"``) needs; ``ValueError`` naming the folder and the command that restores a committed one
    when the checkpoint has none (weights only: a shipped model, or a committed run folder whose
    AdamW state the tree no longer holds)."""
    if checkpoint.optimizer_state is None:
        raise ValueError(f"checkpoint: {str(directory)!r} has no {OPTIMIZER_FILE} (AdamW state), which {purpose} "
                         f"needs; expected a training run's checkpoint (a committed run's state is in git history: "
                         f"{restore_command(directory)})")
    return checkpoint.optimizer_state


def has_checkpoint(directory: Path) -> bool:
    """Whether ``directory`` holds a checkpoint to resume; ``ValueError`` after an interrupted save."""
    directory = Path(directory)
    _check_not_interrupted(directory)
    return directory.is_dir()


def with_umask_mode(path: Path) -> None:
    """Give the file ``path`` the mode a file created under the process's umask has
    (``0o666 & ~umask``): safetensors writes its files with mode 0600 whatever the umask, so a
    checkpoint or export would be unreadable to the group that can read the rest of the folder."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def save_checkpoint(directory: Path, model: RoFormer, optimizer: torch.optim.Optimizer | None, config: dict) -> None:
    """Write ``model`` (unwrapped: not DDP, not compiled), ``optimizer`` and ``config`` to ``directory``.
    A write that fails (a full disk) removes ``<dir>.tmp`` and raises an ``OSError`` naming the
    folder, the previous checkpoint left as it was."""
    directory = Path(directory)
    _check_not_interrupted(directory)
    staging, previous = _staging(directory), _previous(directory)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _write_staging(staging, model, optimizer, config)
    except (OSError, SafetensorError) as error:  # a full disk, a quota (safetensors' writer raises its own error)
        shutil.rmtree(staging, ignore_errors=True)
        kept = (f"the last complete one, {str(directory)!r}, is kept" if directory.is_dir()
                else f"there is no earlier one in {str(directory.parent)!r}")
        raise OSError(f"checkpoint: writing {str(staging)!r} failed ({getattr(error, 'strerror', None) or error}); the partial "
                      f"checkpoint was removed and {kept}; expected room for a checkpoint in "
                      f"{str(directory.parent)!r} (free space there and rerun the same command to resume)") from error
    if directory.exists():
        shutil.rmtree(previous, ignore_errors=True)  # left by a crash after the last save's renames
        os.replace(directory, previous)
    os.replace(staging, directory)
    shutil.rmtree(previous, ignore_errors=True)


def _write_staging(staging: Path, model: RoFormer, optimizer: torch.optim.Optimizer | None, config: dict) -> None:
    """The files of :func:`save_checkpoint` into the folder ``staging`` (created)."""
    staging.mkdir(parents=True)
    metadata = {MODEL_CONFIG_KEY: json.dumps(model.config.to_dict(), allow_nan=False)}
    if config.get("task"):
        metadata[TASK_KEY] = json.dumps(config["task"], allow_nan=False)
    save_model(model, str(staging / MODEL_FILE), metadata=metadata)
    with_umask_mode(staging / MODEL_FILE)
    full_config = dict(config, model=model.config.to_dict())
    if optimizer is not None:
        tensors, groups = _flatten_optimizer_state(optimizer.state_dict())
        save_file(tensors, str(staging / OPTIMIZER_FILE))
        with_umask_mode(staging / OPTIMIZER_FILE)
        full_config["optimizer_param_groups"] = groups
    (staging / CONFIG_FILE).write_text(json.dumps(full_config, indent=2, allow_nan=False) + "\n")


def _read_config(directory: Path) -> dict:
    """``config.json`` of the checkpoint ``directory``; ``FileNotFoundError`` or ``ValueError``
    naming the folder or file when it is missing, not JSON, or has no model section."""
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint: {str(directory)!r} does not exist; expected a checkpoint folder "
                                f"(RUN_DIR/checkpoint of hmmtf train, or a folder of models/)")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"checkpoint: {str(directory)!r} has no {CONFIG_FILE}; expected a checkpoint folder")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"checkpoint: {str(path)!r} is not JSON ({error}); expected the config save_checkpoint "
                         f"wrote") from error
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise ValueError(f"checkpoint: {str(path)!r} has no 'model' section; expected the config save_checkpoint wrote")
    return config


def _tensor_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """``({name: shape}, metadata)`` from the header of the safetensors file ``path``, which
    declares the length of every tensor: ``ValueError`` naming the file when it is missing, or
    its length or header is not what a complete file has (truncated, overwritten)."""
    if not path.is_file():
        raise ValueError(f"checkpoint: {str(path)!r} does not exist; expected the file save_checkpoint wrote "
                         f"(a committed run folder keeps its tensors in git history: {restore_command(path.parent)})")
    try:
        with safe_open(str(path), framework="pt") as weights:
            return ({name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()},
                    weights.metadata() or {})
    except SafetensorError as error:
        raise ValueError(f"checkpoint: {str(path)!r} is not a complete safetensors file ({error}); expected the "
                         f"file save_checkpoint wrote (restore it, or train again)") from error


def _check_saved_config(config: dict, metadata: dict[str, str], config_path: Path, weights_path: Path) -> None:
    """``ValueError`` naming every field where a section of ``config.json`` (:data:`SAVED_SECTIONS`:
    the model, the task) differs from the one the weights were saved with (in their metadata;
    nothing to compare for a section without it: weights saved before it was stored)."""
    absent = "(absent)"
    for section, key in SAVED_SECTIONS.items():
        if key not in metadata:
            continue
        saved, written = json.loads(metadata[key]), config.get(section)
        written = written if isinstance(written, dict) else {}
        changed = [f"{field} = {written.get(field, absent)!r} there but {saved.get(field, absent)!r} in the weights"
                   for field in sorted(set(saved) | set(written)) if field not in saved or field not in written
                   or saved[field] != written[field]]
        if changed:
            raise ValueError(f"checkpoint: the {section} section of {str(config_path)!r} differs from the config "
                             f"{str(weights_path)!r} was saved with: {'; '.join(changed)}; expected the config saved "
                             f"with the weights (undo the edit)")


def _check_shapes(model: RoFormer, shapes: dict[str, tuple[int, ...]], config_path: Path, weights_path: Path) -> None:
    """``ValueError`` naming the first tensor of ``model`` (the network ``config.json`` describes)
    that the weights lack or hold with another shape, or a tensor of the weights it has no place
    for. Tensors the network shares (tied embeddings) are saved once, under any of their names."""
    tensors = model.state_dict()
    shared: dict[int, list[str]] = {}
    for name, tensor in tensors.items():
        shared.setdefault(tensor.data_ptr(), []).append(name)
    for names in shared.values():
        stored = [name for name in names if name in shapes]
        expected = list(tensors[names[0]].shape)
        if not stored:
            raise ValueError(f"checkpoint: the network {str(config_path)!r} describes has tensor {names[0]!r} of shape "
                             f"{expected}, which {str(weights_path)!r} lacks; expected the config saved with "
                             f"these weights")
        if len(stored) > 1:
            raise ValueError(f"checkpoint: {str(weights_path)!r} holds separate tensors {stored}, one shared tensor "
                             f"in the network {str(config_path)!r} describes; expected the config saved with these "
                             f"weights")
        if list(shapes[stored[0]]) != expected:
            raise ValueError(f"checkpoint: tensor {stored[0]!r} has shape {list(shapes[stored[0]])} in "
                             f"{str(weights_path)!r} but {expected} in the network {str(config_path)!r} describes; "
                             f"expected the config saved with these weights")
    unexpected = sorted(set(shapes) - set(tensors))
    if unexpected:
        raise ValueError(f"checkpoint: {str(weights_path)!r} holds tensors {unexpected} that the network "
                         f"{str(config_path)!r} describes does not have; expected the config saved with these weights")


def load_checkpoint(directory: Path, device: torch.device | str = "cpu") -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`; the model is on ``device``. Refuses a
    checkpoint whose files are incomplete or do not match each other (module docstring)."""
    directory = Path(directory)
    _check_not_interrupted(directory)
    config = _read_config(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / MODEL_FILE
    shapes, metadata = _tensor_shapes(weights_path)
    _check_saved_config(config, metadata, config_path, weights_path)
    try:
        model = RoFormer(RoFormerConfig.from_dict(config["model"]))
    except (TypeError, ValueError) as error:  # TypeError: a required field is missing
        raise ValueError(f"checkpoint: {str(config_path)!r}, model section: {error}") from error
    _check_shapes(model, shapes, config_path, weights_path)
    load_model(model, str(weights_path), device="cpu")
    model.to(device)
    optimizer_state = None
    optimizer_path = directory / OPTIMIZER_FILE
    if optimizer_path.is_file():
        _tensor_shapes(optimizer_path)
        if "optimizer_param_groups" not in config:
            raise ValueError(f"checkpoint: {str(config_path)!r} has no 'optimizer_param_groups' for "
                             f"{str(optimizer_path)!r}; expected the config save_checkpoint wrote")
        # On the CPU: ``Optimizer.load_state_dict`` moves the moments to their parameters' device
        # and keeps AdamW's ``step`` counters on the CPU, where non-capturable AdamW expects them.
        tensors = load_file(str(optimizer_path), device="cpu")
        optimizer_state = _unflatten_optimizer_state(tensors, config["optimizer_param_groups"])
    return Checkpoint(model, config, optimizer_state)
