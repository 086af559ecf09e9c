"""A generic training loop for :class:`~empirical.training.model.RoFormer` on any stream of token batches.

The caller supplies a model config, a :class:`TrainConfig` and a *batch function*
``batch_fn(step) -> Batch`` returning the **global** batch of that step; the loop does the rest:
AdamW with linear warm-up and cosine decay (or a constant rate and a final linear decay, into which
a constant run branches: :func:`branch_run`), gradient clipping, bf16 autocast on CUDA, optional
``torch.compile``, a JSON-lines metrics log, tqdm progress, and checkpoints that resume bit-exactly.
The run folder is locked while the loop writes to it, and a stop request (SIGINT or SIGTERM, through
:mod:`empirical.training.run_control`) ends the run at the next step boundary with a checkpoint.

Objective: mean cross-entropy (nats/token) over the entries of ``targets`` that are not
:data:`IGNORE_INDEX`, over the whole global batch.

Distributed data parallel: when ``torch.distributed`` is initialised (e.g. by ``torchrun``, see
:func:`init_distributed`), rank ``r`` of ``W`` trains on rows ``[r B/W, (r+1) B/W)`` of the global
batch. Each rank's loss is its *sum* of token losses times ``W / (targets counted in the global
batch)``; DDP averages gradients over ranks, so the gradient equals the single-process gradient
of the global mean whatever the split of counted targets across ranks.
"""
from __future__ import annotations

import gc
import json
import math
import os
import shlex
import shutil
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from empirical.training.checkpoint import has_checkpoint, load_checkpoint, require_optimizer_state, save_checkpoint
from empirical.training.configs import JSONConfig, check_integers
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.run_control import RunFolderLocked, run_folder_lock

IGNORE_INDEX = -100
"""Target value of positions that are not trained (``F.cross_entropy``'s ignore index)."""

PRECISIONS = ("fp32", "bf16", "bf16-cpu")
"""``fp32``: float32 everywhere; ``bf16``: bf16 autocast on CUDA, float32 on the CPU (where bf16
matrix products are slow); ``bf16-cpu``: bf16 autocast on the CPU too, a rehearsal of the CUDA
run's dtypes on a machine without one."""
CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"
BRANCHED_FROM = "branched_from"
"""The checkpoint config's record of the run and step a branched run started from (:func:`branch_run`)."""
TOKENS_READ = "tokens_read"
"""The checkpoint config's count of the tokens of every global batch trained on so far (the
``tokens`` of ``metrics.jsonl``'s records)."""


class Batch(NamedTuple):
    """One batch: ``inputs (B, N)`` int64 tokens and ``targets (B, N)`` int64, where ``targets[b, t]``
    is the token the model must predict after ``inputs[b, :t+1]``, or :data:`IGNORE_INDEX`; and
    optionally ``target_probs (B, N, V)``, a distribution over the next token at every position,
    which then replaces the one-hot of ``targets`` in the loss (still counted where ``targets`` is
    not :data:`IGNORE_INDEX`): the Rao-Blackwellised targets of ``TrainConfig.soft_targets``."""

    inputs: torch.Tensor
    targets: torch.Tensor
    target_probs: torch.Tensor | None = None


BatchFunction = Callable[[int], Batch]
"""``batch_fn(step) -> Batch``: the global batch of ``step``, a pure function of ``step``."""


@dataclass(frozen=True)
class TrainConfig(JSONConfig):
    """Hyper-parameters of :func:`train`; validated on construction.

    Learning rate at step ``s`` (0-based), with ``w = warmup_steps``, ``S = steps`` and
    ``d = decay_steps``::

        lr(s) = lr_max (s + 1) / w                                       for s < w
        lr(s) = lr_min + (lr_max - lr_min) (1 + cos(pi (s - w) / (S - w))) / 2   otherwise, if d = 0

    and, if ``d > 0`` (warm-up, stable, decay: a constant rate, then a linear decay over the last
    ``d`` steps)::

        lr(s) = lr_max                                                   for w <= s < S - d
        lr(s) = lr_max + (lr_min - lr_max) (s - (S - d)) / d             for s >= S - d

    with ``lr_min = min_lr_ratio * lr_max``. A constant run (``min_lr_ratio = 1``) takes the same
    rates as a decaying one over its stable steps, so it can be branched into its decay
    (:func:`branch_run`).

    The last six fields shape the objective and the data, and are read by the prompt stream
    (:func:`empirical.training.streams.training_stream`), not by this loop (plateau study, issue 51):

    - ``soft_targets``: the loss is the cross-entropy against each prompt's own HMM's next-token
      distribution (its forward filter) instead of the sampled next token. Since the loss is
      linear in the target and ``E[one_hot(x_{t+1}) | x_{<=t}, task] = P(x_{t+1} | x_{<=t}, task)``,
      the expected gradient is unchanged and the target's sampling noise is gone.
    - ``curriculum_mixture``, ``curriculum_steps``, ``curriculum_share``: at step ``s`` a share
      ``curriculum_share * max(0, 1 - s / curriculum_steps)`` of each batch (rounded to prompts)
      comes from another mixture of the same tokens (an easier family), annealed linearly to none
      at ``curriculum_steps``; ``""``: no curriculum.
    - ``context_curriculum_steps``, ``context_curriculum_demos``: a curriculum on context length.
      With ``K = context_curriculum_steps > 0``, ``d0 = context_curriculum_demos`` and ``D`` the
      prompt format's demonstrations, the prompts of step ``s`` hold ::

          d(s) = min(D, d0 + floor((D - d0 + 1) s / K))   demonstrations for s < K,  D after,

      so that each count from ``d0`` to ``D`` takes an equal share of the first ``K`` steps (the
      test sequence is always there); ``K = 0``: no curriculum.
    """

    steps: int
    batch_size: int
    learning_rate: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 0
    decay_steps: int = 0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 0
    precision: str = "bf16"
    compile: bool = False
    soft_targets: bool = False
    curriculum_mixture: str = ""
    curriculum_steps: int = 0
    curriculum_share: float = 0.5
    context_curriculum_steps: int = 0
    context_curriculum_demos: int = 1

    def __post_init__(self) -> None:
        check_integers(self, ("steps", "batch_size", "log_every"), minimum=1)
        check_integers(self, ("warmup_steps", "decay_steps", "checkpoint_every", "curriculum_steps",
                              "context_curriculum_steps", "context_curriculum_demos"), minimum=0)
        if self.checkpoint_every % self.log_every:
            raise ValueError(
                f"checkpoint_every: {self.checkpoint_every}; expected a multiple of log_every = {self.log_every} "
                f"(or 0), so that periodic checkpoints fall on the boundaries of the log's averaging windows"
            )
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps: {self.warmup_steps}; expected fewer than steps = {self.steps}")
        if self.decay_steps > self.steps - self.warmup_steps:
            raise ValueError(f"decay_steps: {self.decay_steps}; expected at most steps - warmup_steps = "
                             f"{self.steps - self.warmup_steps}")
        if not 0 < self.learning_rate < math.inf:
            raise ValueError(f"learning_rate: {self.learning_rate!r}; expected a finite number > 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio: {self.min_lr_ratio!r}; expected a number in [0, 1]")
        if not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"weight_decay: {self.weight_decay!r}; expected a finite number >= 0")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name}: {getattr(self, name)!r}; expected a number in [0, 1)")
        if not 0 < self.grad_clip < math.inf:
            raise ValueError(f"grad_clip: {self.grad_clip!r}; expected a finite number > 0")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: {self.precision!r}; expected one of {PRECISIONS}")
        if not 0 <= self.curriculum_share <= 1:
            raise ValueError(f"curriculum_share: {self.curriculum_share!r}; expected a number in [0, 1]")
        if bool(self.curriculum_mixture) != bool(self.curriculum_steps):
            raise ValueError(f"curriculum_steps: {self.curriculum_steps} with curriculum_mixture "
                             f"{self.curriculum_mixture!r}; expected both set (a mixture and steps > 0) or neither")


def learning_rate(config: TrainConfig, step: int) -> float:
    """``lr(step)`` of the schedule in :class:`TrainConfig`."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    lowest = config.min_lr_ratio * config.learning_rate
    if config.decay_steps:
        decay_start = config.steps - config.decay_steps
        if step < decay_start:
            return config.learning_rate
        return config.learning_rate + (lowest - config.learning_rate) * (step - decay_start) / config.decay_steps
    progress = (step - config.warmup_steps) / (config.steps - config.warmup_steps)
    return lowest + (config.learning_rate - lowest) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(model: RoFormer, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases and LayerNorm gains)."""
    unique = {id(p): p for p in model.parameters()}.values()
    decay = [p for p in unique if p.ndim >= 2]
    no_decay = [p for p in unique if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.beta1, config.beta2))


class DistributedContext(NamedTuple):
    rank: int
    world_size: int


def distributed_context() -> DistributedContext:
    """Rank and world size of the initialised process group, ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return DistributedContext(dist.get_rank(), dist.get_world_size())
    return DistributedContext(0, 1)


def init_distributed() -> torch.device:
    """Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) initialise the process group
    (NCCL on CUDA, gloo on CPU) and return this rank's device; otherwise return the default
    device (CUDA if available, else CPU) without a process group."""
    cuda = torch.cuda.is_available()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
        if cuda:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local_rank)
            return torch.device("cuda", local_rank)
    return torch.device("cuda" if cuda else "cpu")


def shutdown_distributed() -> None:
    """Destroy the process group, if any, once nothing refers to a DDP ``Reducer`` any more.

    A reducer freed after ``destroy_process_group`` (e.g. by a later garbage collection of a
    reference cycle) joins gloo threads of a group already torn down and can hang at exit.
    """
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def _local_rows(batch: Batch, context: DistributedContext) -> Batch:
    rows = batch.inputs.shape[0] // context.world_size
    start = context.rank * rows
    return Batch(*(None if part is None else part[start:start + rows] for part in batch))


def _autocast(device: torch.device, precision: str):
    """bf16 autocast as :data:`PRECISIONS` says for ``precision`` on ``device``."""
    if precision == "bf16-cpu" or (device.type == "cuda" and precision == "bf16"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


def loss_sum_and_count(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over counted targets of ``-log softmax(logits)[target]``, or with ``batch.target_probs``
    ``q`` of ``-sum_k q_k log softmax(logits)_k`` (in float32, or float64 for a float64 model), and
    their number."""
    logits = model(batch.inputs)
    scores = logits.flatten(0, 1).to(torch.promote_types(logits.dtype, torch.float32))
    if batch.target_probs is None:
        total = F.cross_entropy(scores, batch.targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    else:
        counted = batch.targets.flatten() != IGNORE_INDEX
        total = -(batch.target_probs.flatten(0, 1)[counted].to(scores.dtype) * scores[counted].log_softmax(-1)).sum()
    return total, (batch.targets != IGNORE_INDEX).sum()


def accumulate_gradients(trained: torch.nn.Module, global_batch: Batch, context: DistributedContext,
                         device: torch.device, precision: str = "fp32") -> tuple[torch.Tensor, int]:
    """Backward pass of this rank's share of the global mean loss (see module docstring).

    ``trained`` is the model as trained (possibly DDP-wrapped and compiled). Returns this rank's
    detached loss sum and the number of counted targets in the global batch; after the call the
    gradients equal those of ``mean over counted targets of the global batch``, on every rank.
    """
    global_count = int((global_batch.targets != IGNORE_INDEX).sum())
    if global_count == 0:
        raise ValueError("global_batch: no target differs from IGNORE_INDEX; expected at least one counted target")
    local = Batch(*(None if part is None else part.to(device, non_blocking=True)
                    for part in _local_rows(global_batch, context)))
    with _autocast(device, precision):
        local_sum, _ = loss_sum_and_count(trained, local)
    (local_sum * context.world_size / global_count).backward()
    return local_sum.detach(), global_count


def _keep_metrics_until(path: Path, step: int, log_every: int, *, keep_partial: bool) -> None:
    """Prepare the log of a run that resumes from its checkpoint at ``step``.

    Drops the records after ``step`` (written by a run that stopped after its last checkpoint)
    and, unless ``keep_partial``, the records at steps that are not multiples of ``log_every``:
    those average a partial window, written when a run stopped at ``stop_at`` (or on a stop
    request) in mid-window. The resumed run restores that window's sums from the checkpoint (see
    :func:`train`) and writes the full window's record at the next multiple of ``log_every``, so
    that its log reads like an uninterrupted run's. ``keep_partial`` is for a call that runs no
    step (``stop_at`` equals the checkpoint's step) and for checkpoints saved without the window's
    sums. The log is replaced in one rename, so a process killed meanwhile leaves the old one.
    """
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    records = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [
        line for line in records
        if (record_step := json.loads(line)["step"]) <= step and (keep_partial or record_step % log_every == 0)
    ]
    staging = path.with_name(path.name + ".tmp")
    staging.write_text("".join(line + "\n" for line in kept))
    os.replace(staging, path)


MAX_DIFFERENCES_SHOWN = 4
"""How many differing fields the refusal to resume names (a different mixture differs in many)."""


def _differences(saved, current, name: str) -> list[str]:
    """``"name.key: A in the checkpoint, B now"`` for every entry of the JSON values ``saved`` and
    ``current`` that differs (dictionaries compared key by key, recursively)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        return [difference for key in dict.fromkeys([*saved, *current])
                for difference in _differences(saved.get(key), current.get(key), f"{name}.{key}")]
    return [] if saved == current else [f"{name}: {saved!r} in the checkpoint, {current!r} now"]


def _run_differences(saved: dict, model_config: RoFormerConfig, train_config: TrainConfig,
                     task: dict | None) -> str:
    """The fields of the model config, the train config and the task that differ between a
    checkpoint's ``config.json`` and these (at most :data:`MAX_DIFFERENCES_SHOWN` named), or "".
    The saved train config is read with the defaults of fields added since it was written."""
    saved = dict(saved, train=TrainConfig.from_dict(saved["train"]).to_dict()) if "train" in saved else saved
    current = json.loads(json.dumps({"model": model_config.to_dict(), "train": train_config.to_dict(),
                                     "task": task or {}}, allow_nan=False))
    differences = [difference for section, value in current.items()
                   for difference in _differences(saved.get(section), value, section)]
    hidden = len(differences) - MAX_DIFFERENCES_SHOWN
    return "; ".join(differences[:MAX_DIFFERENCES_SHOWN]) + (f"; and {hidden} more" if hidden > 0 else "")


def _check_same_run(saved: dict, model_config: RoFormerConfig, train_config: TrainConfig, task: dict | None,
                    run_dir: Path) -> None:
    """``ValueError`` naming the fields that differ between the checkpoint's ``config.json`` and
    this call (:func:`_run_differences`): resuming would train another run."""
    differences = _run_differences(saved, model_config, train_config, task)
    if differences:
        raise ValueError(
            f"run_dir: {str(run_dir)!r} holds a checkpoint of a different run ({differences}); expected the same "
            f"model, train config and data to resume (or a fresh run_dir)"
        )


SCHEDULE_FIELDS = ("steps", "learning_rate", "min_lr_ratio", "warmup_steps", "decay_steps")
"""The :class:`TrainConfig` fields that only shape the learning-rate schedule."""


def branch_run(source_dir: Path, run_dir: Path, model_config: RoFormerConfig, train_config: TrainConfig,
               task: dict | None = None, command: str | None = None) -> int:
    """Start ``run_dir`` as the run of ``train_config`` whose first ``k`` steps are the run in
    ``source_dir``, whose checkpoint is at step ``k``; returns ``k``. :func:`train` on ``run_dir``
    then continues it, and trains what a run of ``train_config`` from scratch would train.

    That holds, and the branch is made, only when the model, the task and every train field
    outside :data:`SCHEDULE_FIELDS` are the source's, and ``lr(s)`` is the same float under both
    schedules for every ``s < k``: for example a constant-rate run branched into its final decay
    (warm-up, stable, decay: ``decay_steps``). Otherwise ``ValueError`` names what differs.
    ``run_dir`` gets the checkpoint (model, optimizer state, log window; the train config and
    command replaced, the source and step recorded under ``branched_from``) and the source's
    ``metrics.jsonl`` (which :func:`train` cuts at step ``k`` when it resumes); a ``run_dir`` that
    already holds a checkpoint is refused.
    """
    source_dir, run_dir = Path(source_dir), Path(run_dir)
    if has_checkpoint(run_dir / CHECKPOINT_DIR):
        raise ValueError(f"run_dir: {str(run_dir)!r} already holds a checkpoint; expected a fresh folder to branch "
                         f"into (or resume it without branching)")
    saved = load_checkpoint(source_dir / CHECKPOINT_DIR)
    optimizer_state = require_optimizer_state(saved, source_dir / CHECKPOINT_DIR, "branching from it")
    branched_at = saved.config["step"]
    source_train = TrainConfig.from_dict(saved.config["train"])
    same_schedule_fields = replace(
        train_config, **{name: getattr(source_train, name) for name in SCHEDULE_FIELDS})
    differences = _run_differences(saved.config, model_config, same_schedule_fields, task)
    if differences:
        raise ValueError(f"branch_from: {str(source_dir)!r} is a different run ({differences}); expected the same "
                         f"model, data and train config but for the schedule's fields {SCHEDULE_FIELDS}")
    if not branched_at < train_config.steps:
        raise ValueError(f"steps: {train_config.steps}; expected more than the {branched_at} steps of the "
                         f"checkpoint of branch_from {str(source_dir)!r}")
    for step in range(branched_at):
        if learning_rate(source_train, step) != learning_rate(train_config, step):
            raise ValueError(
                f"branch_from: {str(source_dir)!r} took lr {learning_rate(source_train, step)!r} at step {step}, "
                f"where this schedule takes {learning_rate(train_config, step)!r}; expected the same rate at each "
                f"of the checkpoint's {branched_at} steps")
    optimizer = build_optimizer(saved.model, train_config)
    optimizer.load_state_dict(optimizer_state)
    config = {key: value for key, value in saved.config.items() if key not in ("model", "optimizer_param_groups")}
    config.update(train=train_config.to_dict(), command=command or shlex.join(sys.argv),
                  **{BRANCHED_FROM: {"run_dir": str(source_dir), "step": branched_at}})
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_folder_lock(run_dir):
        save_checkpoint(run_dir / CHECKPOINT_DIR, saved.model, optimizer, config)
        if (source_dir / METRICS_FILE).is_file():
            shutil.copyfile(source_dir / METRICS_FILE, run_dir / METRICS_FILE)
    return branched_at


def _lock_run_folder(stack: ExitStack, run_dir: Path, context: DistributedContext, device: torch.device) -> None:
    """Rank 0 takes the lock of ``run_dir`` (:func:`empirical.training.run_control.run_folder_lock`) until
    ``stack`` closes; under DDP every rank learns whether it could, so all of them stop together."""
    refusal = None
    if context.rank == 0:
        try:
            stack.enter_context(run_folder_lock(run_dir))
        except RunFolderLocked as locked:
            refusal = locked
    if context.world_size > 1:
        refused = torch.tensor(float(refusal is not None), device=device)
        dist.all_reduce(refused)
        if refused.item() and refusal is None:
            raise RunFolderLocked(f"run_dir: {str(run_dir)!r} is locked by another process (rank 0 says which); "
                                  f"expected a folder no other training writes to")
    if refusal is not None:
        raise refusal


def _stop_requested_on_any_rank(stop_requested: Callable[[], bool] | None, context: DistributedContext,
                                device: torch.device) -> bool:
    """Whether ``stop_requested()`` is true on this process or, under DDP, on any rank (an
    all-reduce of one number, so that every rank stops after the same step)."""
    requested = stop_requested is not None and stop_requested()
    if context.world_size == 1:
        return requested
    flag = torch.tensor(float(requested), device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


class TrainingDiverged(ValueError):
    """A step's gradient norm was not finite (NaN or infinite: the loss or a gradient overflowed):
    the run stops before anything from that window is logged or saved. A ``ValueError``, so the
    command line reports it as one line: the settings (the learning rate, the precision) are what
    the user changes."""


def _wrapped_for_training(model: RoFormer, context: DistributedContext, device: torch.device,
                          compile_model: bool) -> torch.nn.Module:
    """What the steps call: ``model`` in DistributedDataParallel under more than one rank, then
    compiled when asked; ``model`` itself otherwise (the wrappers share its parameters)."""
    trained: torch.nn.Module = model
    if context.world_size > 1:
        trained = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return torch.compile(trained) if compile_model else trained


def _diverged(step: int, grad_norm: float, learning_rate_at_step: float, checkpoint_dir: Path | None,
              checkpoint_step: int | None) -> TrainingDiverged:
    """The one-line report of a run that diverged at ``step``, naming what is kept."""
    kept = ("no checkpoint was written" if checkpoint_dir is None or checkpoint_step is None else
            f"the run's last checkpoint, at step {checkpoint_step}, is kept in {str(checkpoint_dir)!r}")
    return TrainingDiverged(f"training: gradient norm {grad_norm} at step {step + 1} (learning rate "
                            f"{learning_rate_at_step:g}); stopped there and {kept}; expected finite gradients "
                            f"(a lower learning_rate or a longer warm-up, or fp32 precision)")


class TrainResult(NamedTuple):
    model: RoFormer
    """The trained (unwrapped) model."""
    step: int
    """Number of completed steps."""
    last_loss: float
    """Mean loss (nats/token) over the averaging window of the last log record (``log_every`` steps,
    fewer at a stop in mid-window), NaN when no step ran."""
    interrupted: bool = False
    """Whether the run stopped before ``stop_at`` because ``stop_requested`` said so."""


def train(
    model_config: RoFormerConfig,
    train_config: TrainConfig,
    batch_fn: BatchFunction,
    run_dir: Path | None = None,
    *,
    task: dict | None = None,
    command: str | None = None,
    stop_at: int | None = None,
    stop_requested: Callable[[], bool] | None = None,
    on_resume: Callable[[int], None] | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train a fresh RoFormer, or resume the checkpoint in ``run_dir/checkpoint`` if there is one.
    Resuming needs the checkpoint's AdamW state (a ``ValueError`` says how to restore a committed
    one); a checkpoint already at ``stop_at`` trains no step and needs only its weights.

    Args:
        model_config, train_config: what to train and how.
        batch_fn: ``batch_fn(step)`` -> the global :class:`Batch` of ``step`` (every rank calls it
            and keeps its own rows).
        run_dir: where ``checkpoint/`` and ``metrics.jsonl`` go; None trains without writing.
            Locked for the call (:func:`empirical.training.run_control.run_folder_lock`): a second training
            on it is refused, naming the first one's process ID.
        task: JSON-serialisable description of the data (stored in the checkpoint for evaluation;
            resuming requires the same task, model and train config).
        command: the command line recorded in the checkpoint (default: this process's argv).
        stop_at: stop after this many completed steps (default ``train_config.steps``); the
            schedule still runs to ``train_config.steps``, so a later call resumes it.
        stop_requested: asked after every step; once it is true (on any rank, under DDP), the run
            stops there as at a ``stop_at``: log record of the partial window, checkpoint, and a
            result with ``interrupted`` set (:func:`empirical.training.run_control.stop_on_signals`).
        on_resume: called on rank 0 with the checkpoint's step when a checkpoint is resumed.
        device: defaults to CUDA when available.
        progress: show a tqdm bar (rank 0 only).

    Raises :class:`TrainingDiverged` when a step's gradient norm is not finite, at the end of that
    step's log window, before its record or a checkpoint is written: the last checkpoint on disk
    is the last one whose every step was finite. (The check costs no synchronisation: the first
    bad step is kept on the device and read with the window's loss.)
    """
    context = distributed_context()
    if train_config.batch_size % context.world_size:
        raise ValueError(
            f"batch_size: {train_config.batch_size} is not divisible by the world size {context.world_size}; "
            f"expected a multiple of it"
        )
    stop_at = train_config.steps if stop_at is None else stop_at
    if not 0 <= stop_at <= train_config.steps:
        raise ValueError(f"stop_at: {stop_at}; expected 0..steps = {train_config.steps}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    run_dir = Path(run_dir) if run_dir is not None else None
    checkpoint_dir = run_dir / CHECKPOINT_DIR if run_dir is not None else None

    with ExitStack() as stack:
        if run_dir is not None:
            _lock_run_folder(stack, run_dir, context, device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(train_config.seed)
            model = RoFormer(model_config).to(device)
        optimizer = build_optimizer(model, train_config)
        start = 0
        # Sums of the log's averaging window at the checkpoint: (loss over this window's counted
        # targets of the global batch, their number). Nonzero only for a checkpoint saved at a stop
        # in mid-window; None for a checkpoint written without them.
        window: dict | None = {"loss_sum": 0.0, "counted": 0}
        origin: dict = {}  # where a branched run came from (branch_run), kept by every later save
        saved_step: int | None = None  # the step of the checkpoint on disk
        # Tokens of the global batches before `start` (a context curriculum's prompts vary in length);
        # None for a checkpoint saved without them, whose batches all had the first resumed step's shape.
        tokens_read: int | None = 0
        if checkpoint_dir is not None and has_checkpoint(checkpoint_dir):
            saved = load_checkpoint(checkpoint_dir, device)
            _check_same_run(saved.config, model_config, train_config, task, run_dir)
            model.load_state_dict(saved.model.state_dict())
            start = saved_step = saved.config["step"]
            if start < stop_at:  # a finished run only hands back its weights: no step needs the moments
                optimizer.load_state_dict(require_optimizer_state(saved, checkpoint_dir, f"resuming it to step {stop_at}"))
            window = saved.config.get("log_window")
            tokens_read = saved.config.get(TOKENS_READ)
            origin = {BRANCHED_FROM: saved.config[BRANCHED_FROM]} if BRANCHED_FROM in saved.config else {}
            if stop_at < start:
                raise ValueError(
                    f"stop_at: {stop_at}; the checkpoint in run_dir is at step {start}; expected stop_at >= {start}"
                )
            if on_resume is not None and context.rank == 0:
                on_resume(start)

        trained = _wrapped_for_training(model, context, device, train_config.compile)

        def save(step: int, window_loss_sum: float, window_counted: int) -> None:
            if checkpoint_dir is not None and context.rank == 0:
                config = {"train": train_config.to_dict(), "task": task or {}, "step": step, TOKENS_READ: tokens_read,
                          "command": command or shlex.join(sys.argv),
                          "log_window": {"loss_sum": window_loss_sum, "counted": window_counted}, **origin}
                save_checkpoint(checkpoint_dir, model, optimizer, config)

        log_path = run_dir / METRICS_FILE if run_dir is not None and context.rank == 0 else None
        if log_path is not None:
            _keep_metrics_until(log_path, start, train_config.log_every,
                                keep_partial=window is None or start == stop_at)
        last_loss = float("nan")
        clock = time.perf_counter()
        tokens_since_log, counted_since_log = 0, 0
        loss_since_log = torch.zeros((), device=device)
        if window is not None and start < stop_at:
            # The window's loss sum is global (all-reduced before it was saved): rank 0 holds it and
            # the other ranks add zero to it at the next all-reduce. float32 -> JSON -> float32 is exact.
            counted_since_log = window["counted"]
            if context.rank == 0:
                loss_since_log.fill_(window["loss_sum"])
        window_loss_sum, window_counted = 0.0, 0
        # The first step of the log window whose gradient norm is not finite (-1: none), and that norm.
        first_nonfinite = torch.full((), -1, dtype=torch.long, device=device)
        nonfinite_norm = torch.zeros((), device=device)
        end, interrupted = start, False
        started = time.perf_counter()
        model.train()
        log_file = stack.enter_context(open(log_path, "a")) if log_path is not None else None
        bar = stack.enter_context(
            tqdm(total=stop_at, initial=start, disable=not progress or context.rank != 0, desc="train", unit="step")
        )
        for step in range(start, stop_at):
            global_batch = batch_fn(step)
            if tokens_read is None:
                tokens_read = step * global_batch.inputs.numel()
            if global_batch.inputs.shape[0] != train_config.batch_size:
                raise ValueError(
                    f"batch_fn: step {step} returned {global_batch.inputs.shape[0]} rows; "
                    f"expected batch_size = {train_config.batch_size}"
                )
            lr = learning_rate(train_config, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            local_sum, global_count = accumulate_gradients(trained, global_batch, context, device,
                                                           train_config.precision)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip)
            first_bad = (first_nonfinite < 0) & ~torch.isfinite(grad_norm)
            first_nonfinite = torch.where(first_bad, step, first_nonfinite)
            nonfinite_norm = torch.where(first_bad, grad_norm.to(nonfinite_norm.dtype), nonfinite_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            tokens_since_log += global_batch.inputs.numel()
            tokens_read += global_batch.inputs.numel()
            counted_since_log += global_count
            loss_since_log += local_sum

            end = step + 1
            interrupted = end < stop_at and _stop_requested_on_any_rank(stop_requested, context, device)
            stopping = interrupted or end == stop_at
            if end % train_config.log_every == 0 or stopping:
                if context.world_size > 1:
                    dist.all_reduce(loss_since_log)
                loss_sum = loss_since_log.item()
                bad_step = int(first_nonfinite.item())
                if bad_step >= 0:
                    raise _diverged(bad_step, nonfinite_norm.item(), learning_rate(train_config, bad_step),
                                    checkpoint_dir, saved_step)
                last_loss = loss_sum / counted_since_log
                if end % train_config.log_every:  # a stop in mid-window: its checkpoint keeps the sums
                    window_loss_sum, window_counted = loss_sum, counted_since_log
                elapsed = time.perf_counter() - clock
                record = {
                    "step": end,
                    "loss": last_loss,
                    "tokens": tokens_read,
                    "lr": lr,
                    "grad_norm": float(grad_norm),
                    "tokens_per_s": tokens_since_log / elapsed,
                    "elapsed_s": time.perf_counter() - started,
                }
                if log_file is not None:
                    log_file.write(json.dumps(record, allow_nan=False) + "\n")
                    log_file.flush()
                bar.set_postfix(loss=f"{last_loss:.4f}")
                clock, tokens_since_log, counted_since_log = time.perf_counter(), 0, 0
                loss_since_log.zero_()
            if stopping or (train_config.checkpoint_every and end % train_config.checkpoint_every == 0):
                save(end, window_loss_sum, window_counted)
                saved_step = end
            bar.update(1)
            if interrupted:
                break
    return TrainResult(model, end, last_loss, interrupted)
