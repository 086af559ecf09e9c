"""Training loop: the schedule, learning on a fixed batch, bit-exact resume, DDP (gloo, 2 processes)
against one process, and config errors."""
import dataclasses
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from empirical.training.checkpoint import load_checkpoint
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.run_control import LOCK_FILE, RunFolderLocked, run_folder_lock, stop_on_signals
from empirical.training.train import (
    CHECKPOINT_DIR,
    IGNORE_INDEX,
    METRICS_FILE,
    Batch,
    DistributedContext,
    TrainConfig,
    TrainingDiverged,
    accumulate_gradients,
    branch_run,
    learning_rate,
    loss_sum_and_count,
    shutdown_distributed,
    train,
)
from rounding import gamma, learning_rate_rounding, unit_roundoff
from run_folders import assert_same_runs

MODEL = RoFormerConfig(vocab_size=6, num_layers=2, num_heads=2, width=16)
ROOT = Path(__file__).resolve().parents[1]


def random_batch(step: int, rows: int = 8, length: int = 12) -> Batch:
    """Tokens 0..4 with a learnable rule (next = current + 1 mod 5) half of the time; targets
    ignored at a row-dependent number of leading positions, so ranks count different numbers."""
    generator = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, 5, (rows, length), generator=generator)
    follow = torch.rand(rows, length, generator=generator) < 0.5
    for t in range(1, length):
        tokens[:, t] = torch.where(follow[:, t], (tokens[:, t - 1] + 1) % 5, tokens[:, t])
    targets = torch.full_like(tokens, IGNORE_INDEX)
    targets[:, :-1] = tokens[:, 1:]
    for row in range(rows):
        targets[row, : row // 2] = IGNORE_INDEX
    return Batch(tokens, targets)


def test_learning_rate_schedule_warms_up_then_decays_to_the_floor():
    """The warm-up's ends and the top of the decay are exact; the rest of the decay is within
    :func:`rounding.learning_rate_rounding` of the exact schedule of the stored floats (floor 0.1,
    half-way ``0.1 + (1 - 0.1) / 2``)."""
    config = TrainConfig(steps=110, batch_size=1, learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert learning_rate(config, 0) == 0.1  # 1 / 10 rounded once, as the literal is
    assert learning_rate(config, 9) == 1.0  # 10 / 10
    # cos(0) = 1 exactly (C99 Annex F) and halving and doubling are exact, so lr = 0.1 + fl(1 - 0.1)
    # = 1 + e with |e| <= 2^-54 (half an ulp of [1/2, 1)), which rounds to 1 (a tie goes to the even 1).
    assert learning_rate(config, 10) == 1.0
    # The closed form: the literal 0.9 is within (0.9 + 0.1) u of 1 minus the stored 0.1, halved
    # exactly, and the sum rounds by 0.55 u.
    closed_form = (0.5 + 0.55) * unit_roundoff()
    assert learning_rate(config, 60) == pytest.approx(0.1 + 0.9 * 0.5, rel=0,
                                                      abs=learning_rate_rounding(config, 60) + closed_form)
    assert learning_rate(config, 110) == pytest.approx(0.1, rel=0, abs=learning_rate_rounding(config, 110))
    values = [learning_rate(config, s) for s in range(10, 110)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_a_decay_over_the_last_steps_keeps_the_peak_until_it_starts_then_falls_linearly():
    """Warm-up, stable, decay (decay_steps 4 of 12, floor 1/2 of a peak of 1): every product and
    quotient of the linear part is of binary fractions, so the rates are exact."""
    config = TrainConfig(steps=12, batch_size=1, learning_rate=1.0, warmup_steps=2, min_lr_ratio=0.5, decay_steps=4)
    assert [learning_rate(config, s) for s in range(12)] == [0.5, 1.0, *[1.0] * 6, 1.0, 0.875, 0.75, 0.625]


def test_a_constant_run_takes_its_decaying_branchs_rates_exactly():
    """With min_lr_ratio 1 the cosine's floor is the peak, and ``m + (M - m) c`` is ``M + 0 c = M``
    exactly: so a constant run is a prefix of any warm-up-stable-decay run with the same warm-up."""
    constant = TrainConfig(steps=1000, batch_size=1, learning_rate=3e-3, warmup_steps=20, min_lr_ratio=1.0)
    decaying = TrainConfig(steps=700, batch_size=1, learning_rate=3e-3, warmup_steps=20, min_lr_ratio=0.0,
                           decay_steps=200)
    assert all(learning_rate(constant, s) == learning_rate(decaying, s) for s in range(500))
    assert learning_rate(decaying, 500) == 3e-3 and learning_rate(decaying, 600) == pytest.approx(1.5e-3, rel=1e-15)


def test_loss_decreases_on_a_fixed_batch():
    batch = random_batch(0)
    config = TrainConfig(steps=25, batch_size=8, learning_rate=1e-2, warmup_steps=2, log_every=25)
    torch.manual_seed(0)
    untrained = RoFormer(MODEL)
    trained = train(MODEL, config, lambda step: batch, progress=False).model
    with torch.no_grad():
        before = loss_sum_and_count(untrained, batch)
        after = loss_sum_and_count(trained, batch)
    assert before[1] == after[1]
    assert float(after[0] / after[1]) < 0.75 * float(before[0] / before[1])


def test_resume_is_bit_exact(tmp_path):
    config = TrainConfig(steps=8, batch_size=8, learning_rate=3e-3, warmup_steps=2, log_every=1)
    straight = train(MODEL, config, random_batch, tmp_path / "straight", progress=False)
    first = train(MODEL, config, random_batch, tmp_path / "resumed", stop_at=3, progress=False)
    assert first.step == 3
    assert load_checkpoint(tmp_path / "resumed" / CHECKPOINT_DIR).config["step"] == 3
    with open(tmp_path / "resumed" / METRICS_FILE, "a") as log:  # as if it had died after step 4
        log.write(json.dumps({"step": 4, "loss": 0.0}) + "\n")
    resumed = train(MODEL, config, random_batch, tmp_path / "resumed", progress=False)
    assert resumed.step == 8
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name
    logs = [[json.loads(line) for line in (tmp_path / run / METRICS_FILE).read_text().splitlines()]
            for run in ("straight", "resumed")]
    assert [(r["step"], r["loss"]) for r in logs[0]] == [(r["step"], r["loss"]) for r in logs[1]]
    saved = [load_checkpoint(tmp_path / run / CHECKPOINT_DIR).optimizer_state for run in ("straight", "resumed")]
    for index, state in saved[0]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, saved[1]["state"][index][key]), (index, key)


CONSTANT = TrainConfig(steps=100, batch_size=8, learning_rate=3e-3, min_lr_ratio=1.0, warmup_steps=2, log_every=1)
DECAYING = TrainConfig(steps=8, batch_size=8, learning_rate=3e-3, min_lr_ratio=0.0, warmup_steps=2, decay_steps=4,
                       log_every=1)


def test_a_constant_run_branched_into_its_decay_is_the_decaying_run_from_scratch(tmp_path):
    """The constant run stops at step 4, where the decay of DECAYING starts; the branch trains on to
    step 8 and ends with the weights, optimizer state and log of DECAYING trained from scratch."""
    straight = train(MODEL, DECAYING, random_batch, tmp_path / "straight", progress=False)
    train(MODEL, CONSTANT, random_batch, tmp_path / "constant", stop_at=4, progress=False)
    assert branch_run(tmp_path / "constant", tmp_path / "branch", MODEL, DECAYING, command="branch") == 4
    saved = load_checkpoint(tmp_path / "branch" / CHECKPOINT_DIR).config
    assert saved["branched_from"] == {"run_dir": str(tmp_path / "constant"), "step": 4}
    assert saved["train"] == DECAYING.to_dict() and saved["command"] == "branch"
    branched = train(MODEL, DECAYING, random_batch, tmp_path / "branch", progress=False)
    assert load_checkpoint(tmp_path / "branch" / CHECKPOINT_DIR).config["branched_from"] == saved["branched_from"]
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), branched.model.state_dict().items()):
        assert torch.equal(a, b), name
    logs = [[json.loads(line) for line in (tmp_path / run / METRICS_FILE).read_text().splitlines()]
            for run in ("straight", "branch")]
    assert [(r["step"], r["loss"], r["lr"]) for r in logs[0]] == [(r["step"], r["loss"], r["lr"]) for r in logs[1]]
    states = [load_checkpoint(tmp_path / run / CHECKPOINT_DIR).optimizer_state["state"] for run in ("straight", "branch")]
    for index, state in states[0].items():
        for key, value in state.items():
            assert torch.equal(value, states[1][index][key]), (index, key)


@pytest.mark.parametrize("branch, message", [
    (dataclasses.replace(DECAYING, learning_rate=1e-3),
     "took lr 0.0015 at step 0, where this schedule takes 0.0005; expected the same rate at each of the "
     "checkpoint's 4 steps"),
    (dataclasses.replace(DECAYING, decay_steps=6), "took lr 0.003 at step 3, where this schedule takes 0.0025"),
    (dataclasses.replace(DECAYING, weight_decay=0.0),
     "is a different run (train.weight_decay: 0.1 in the checkpoint, 0.0 now); expected the same model, data and "
     "train config but for the schedule's fields"),
    (dataclasses.replace(DECAYING, steps=4, decay_steps=2),
     "steps: 4; expected more than the 4 steps of the checkpoint of branch_from"),
])
def test_a_branch_whose_first_steps_would_differ_from_its_source_is_refused(tmp_path, branch, message):
    train(MODEL, CONSTANT, random_batch, tmp_path / "constant", stop_at=4, progress=False)
    with pytest.raises(ValueError, match=re.escape(message)):
        branch_run(tmp_path / "constant", tmp_path / "branch", MODEL, branch)
    assert not (tmp_path / "branch" / CHECKPOINT_DIR).exists()


def test_a_branch_into_a_folder_that_holds_a_checkpoint_is_refused(tmp_path):
    train(MODEL, CONSTANT, random_batch, tmp_path / "constant", stop_at=4, progress=False)
    train(MODEL, DECAYING, random_batch, tmp_path / "branch", stop_at=2, progress=False)
    with pytest.raises(ValueError, match="already holds a checkpoint; expected a fresh folder"):
        branch_run(tmp_path / "constant", tmp_path / "branch", MODEL, DECAYING)
    assert load_checkpoint(tmp_path / "branch" / CHECKPOINT_DIR).config["step"] == 2


def test_a_checkpoint_written_before_decay_steps_existed_resumes(tmp_path):
    """Its train config has no ``decay_steps``; read with the field's default (0, the cosine
    schedule it was trained with), it is the same run."""
    config = TrainConfig(steps=4, batch_size=8, log_every=1)
    train(MODEL, config, random_batch, tmp_path, stop_at=2, progress=False)
    config_path = tmp_path / CHECKPOINT_DIR / "config.json"
    saved = json.loads(config_path.read_text())
    del saved["train"]["decay_steps"]
    config_path.write_text(json.dumps(saved))
    assert train(MODEL, config, random_batch, tmp_path, progress=False).step == 4


@pytest.mark.parametrize("changes, named", [
    ({"train_config": TrainConfig(steps=5, batch_size=8, log_every=1)}, "train.steps: 4 in the checkpoint, 5 now"),
    ({"model_config": RoFormerConfig(vocab_size=6, num_layers=2, num_heads=2, width=16, rotary_base=500.0)},
     "model.rotary_base: 10000.0 in the checkpoint, 500.0 now"),
    ({"task": {"mixture": "b", "seed": 1}}, "task.mixture: 'a' in the checkpoint, 'b' now"),
])
def test_resume_refuses_a_different_run_naming_what_differs(tmp_path, changes, named):
    run = {"model_config": MODEL, "train_config": TrainConfig(steps=4, batch_size=8, log_every=1),
           "task": {"mixture": "a", "seed": 1}}
    train(batch_fn=random_batch, run_dir=tmp_path, stop_at=2, progress=False, **run)
    with pytest.raises(ValueError, match=f"holds a checkpoint of a different run \\({re.escape(named)}\\); expected"):
        train(batch_fn=random_batch, run_dir=tmp_path, progress=False, **(run | changes))
    assert load_checkpoint(tmp_path / CHECKPOINT_DIR).config["step"] == 2


def test_a_stop_request_ends_the_run_with_a_checkpoint_that_resumes_bit_for_bit(tmp_path):
    """Asked after every step: true after the third, so the run stops at step 3, in the middle of
    the log's second window (log_every 2), and the resumed run is the uninterrupted one."""
    config = TrainConfig(steps=8, batch_size=8, learning_rate=3e-3, warmup_steps=2, log_every=2)
    straight = train(MODEL, config, random_batch, tmp_path / "straight", progress=False)
    asked = []

    def stop_after_three_steps() -> bool:
        asked.append(True)
        return len(asked) >= 3

    stopped = train(MODEL, config, random_batch, tmp_path / "stopped", stop_requested=stop_after_three_steps,
                    progress=False)
    assert (stopped.step, stopped.interrupted, len(asked)) == (3, True, 3)
    assert load_checkpoint(tmp_path / "stopped" / CHECKPOINT_DIR).config["step"] == 3
    resumed_at = []
    resumed = train(MODEL, config, random_batch, tmp_path / "stopped", on_resume=resumed_at.append, progress=False)
    assert (resumed.step, resumed.interrupted, resumed_at) == (8, False, [3])
    assert_same_runs(tmp_path / "straight", tmp_path / "stopped")
    assert resumed.last_loss == straight.last_loss


def test_a_non_finite_gradient_stops_the_run_keeping_the_last_finite_checkpoint(tmp_path, monkeypatch):
    """Fault injection: the gradient norm reads NaN at step 8 (the third of the window 6..10, log
    and checkpoints every 5). The run stops at that window's end, names step 8 and the checkpoint
    at step 5, writes no record or checkpoint after step 5, and what it kept is the uninterrupted
    run's step 5, bit for bit."""
    config = TrainConfig(steps=12, batch_size=8, learning_rate=3e-3, warmup_steps=2, log_every=5, checkpoint_every=5)
    train(MODEL, config, random_batch, tmp_path / "straight", stop_at=5, progress=False)
    clip = torch.nn.utils.clip_grad_norm_
    calls = []

    def clip_reading_nan_at_step_8(parameters, max_norm):
        calls.append(True)
        norm = clip(parameters, max_norm)
        return torch.full_like(norm, math.nan) if len(calls) == 8 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_reading_nan_at_step_8)
    with pytest.raises(TrainingDiverged) as stopped:
        train(MODEL, config, random_batch, tmp_path / "diverged", progress=False)
    assert str(stopped.value) == (
        f"training: gradient norm nan at step 8 (learning rate {learning_rate(config, 7):g}); stopped there and the "
        f"run's last checkpoint, at step 5, is kept in {str(tmp_path / 'diverged' / CHECKPOINT_DIR)!r}; expected "
        f"finite gradients (a lower learning_rate or a longer warm-up, or fp32 precision)")
    assert len(calls) == 10, "the window runs to its end, where the loss is read anyway"
    assert_same_runs(tmp_path / "straight", tmp_path / "diverged")


def test_a_run_that_diverges_before_its_first_checkpoint_says_none_was_written(tmp_path):
    """A real divergence: a rate of 1e30 overflows the weights at the first update."""
    config = TrainConfig(steps=6, batch_size=8, learning_rate=1e30, log_every=3, checkpoint_every=3)
    with pytest.raises(TrainingDiverged, match=r"^training: gradient norm (nan|inf) at step [23] .*no checkpoint "
                                               r"was written; expected finite gradients"):
        train(MODEL, config, random_batch, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / CHECKPOINT_DIR).exists()
    assert (tmp_path / "run" / METRICS_FILE).read_text() == ""


@pytest.mark.parametrize("field", ["learning_rate", "weight_decay", "grad_clip"])
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_a_non_finite_rate_decay_or_clip_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"^{field}: {value!r}; expected a finite number"):
        TrainConfig(steps=4, batch_size=8, **{field: value})


LOCK_HOLDER = """
import sys
from empirical.training.run_control import run_folder_lock
with run_folder_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""
"""A process that holds the lock of the folder ``argv[1]`` until its stdin closes."""


def test_a_run_folder_locked_by_another_process_is_refused_naming_it(tmp_path):
    config = TrainConfig(steps=2, batch_size=8, log_every=1)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline() == "locked\n"
        assert (tmp_path / LOCK_FILE).read_text() == f"{holder.pid}\n"
        with pytest.raises(RunFolderLocked, match=rf"run_dir: '{re.escape(str(tmp_path))}' is locked by process "
                                                  rf"{holder.pid} \(an hmmtf command writing to it"):
            train(MODEL, config, random_batch, tmp_path, progress=False)
        assert not (tmp_path / CHECKPOINT_DIR).exists() and not (tmp_path / METRICS_FILE).exists()
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    assert (tmp_path / LOCK_FILE).read_text() == ""  # emptied on release
    assert train(MODEL, config, random_batch, tmp_path, progress=False).step == 2


def test_the_lock_goes_with_its_holder_however_it_ends(tmp_path):
    """Released when the training raises; the file a killed holder left (its process ID written,
    no flock held any more) blocks nothing."""
    with pytest.raises(ValueError, match="batch_fn: step 0 returned 8 rows"):
        train(MODEL, TrainConfig(steps=2, batch_size=4), random_batch, tmp_path, progress=False)
    (tmp_path / LOCK_FILE).write_text("999999999\n")
    with run_folder_lock(tmp_path) as path:
        assert path.read_text() == f"{os.getpid()}\n"
    assert train(MODEL, TrainConfig(steps=2, batch_size=8), random_batch, tmp_path, progress=False).step == 2


@pytest.mark.parametrize("number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_only_sets_the_request(number, code):
    before = signal.getsignal(number)
    with stop_on_signals() as request:
        assert not request()
        signal.raise_signal(number)
        signal.raise_signal(signal.SIGINT if number == signal.SIGTERM else signal.SIGTERM)  # a second: ignored
        assert request() and request.signal == number and request.exit_code == code
    assert signal.getsignal(number) is before


WORKER_TIMEOUT_S = 120
"""Wall-clock limit of a group of DDP worker processes (they need about 5 s on 2 cores)."""


RANK_PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "empirical.training.train", __name__]
"""What the forkserver imports once, before it forks the ranks: torch, the optimizer's first step's
import of ``torch._dynamo`` (3 s on 2 cores), the training loop and this module (the ranks' target).
A spawned rank imported all of it again: 5-6 s of CPU each."""


def run_ranks(worker, args: tuple, world_size: int = 2) -> None:
    """Run ``worker(rank, world_size, *args)`` in ``world_size`` processes forked by a *forkserver*
    and wait.

    Not forked from this process: a child forked after torch has started its thread pools inherits
    locks held by threads that do not exist in it, and gloo's teardown can then block forever. The
    forkserver is a fresh process that only imports :data:`RANK_PRELOAD` (which runs no torch
    operation, so starts no thread pool) and forks each rank from its one thread. A group still
    running after :data:`WORKER_TIMEOUT_S` is killed and the test fails, naming the limit.
    """
    multiprocessing.set_forkserver_preload(RANK_PRELOAD)
    context = mp.start_processes(worker, args=(world_size, *args), nprocs=world_size, join=False,
                                 start_method="forkserver")
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while not context.join(timeout=max(deadline - time.monotonic(), 0.0)):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"DDP workers still running after {WORKER_TIMEOUT_S} s; killed")


def _ddp_worker(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    """Every DDP run the tests compare, in one process group (one start of the group for the
    module): each rank's DDP gradient of batch 0 and three AdamW steps (``ddp.pt``), then a run
    stopped at step 3 and resumed on every rank (``out_dir/resumed``), then the same run stopped
    by a stop request of rank 1 alone after step 3 (each rank's result in ``stopped-RANK.pt``) and
    resumed (``out_dir/stopped``)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = RoFormer(MODEL)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    loss_sum, count = accumulate_gradients(ddp, random_batch(0), DistributedContext(rank, world_size), torch.device("cpu"))
    del ddp
    dist.all_reduce(loss_sum)
    config = TrainConfig(steps=3, batch_size=8, learning_rate=3e-3, log_every=3)
    trained = train(MODEL, config, random_batch, progress=False)
    if rank == 0:
        torch.save(
            {
                "loss_sum": loss_sum,
                "count": count,
                "grads": {name: p.grad for name, p in model.named_parameters()},
                "trained": trained.model.state_dict(),
                "trained_loss": trained.last_loss,
            },
            os.path.join(out_dir, "ddp.pt"),
        )
    run_dir = os.path.join(out_dir, "resumed")
    train(MODEL, RESUME_CONFIG, random_batch, run_dir, stop_at=3, progress=False)
    dist.barrier()  # rank 0 has written the checkpoint that every rank resumes
    train(MODEL, RESUME_CONFIG, random_batch, run_dir, progress=False)
    asked = []

    def stop_on_rank_1_after_three_steps() -> bool:
        asked.append(True)
        return rank == 1 and len(asked) >= 3

    run_dir = os.path.join(out_dir, "stopped")
    stopped = train(MODEL, RESUME_CONFIG, random_batch, run_dir, stop_requested=stop_on_rank_1_after_three_steps,
                    progress=False)
    torch.save({"step": stopped.step, "interrupted": stopped.interrupted}, os.path.join(out_dir, f"stopped-{rank}.pt"))
    dist.barrier()
    train(MODEL, RESUME_CONFIG, random_batch, run_dir, progress=False)
    shutdown_distributed()


RESUME_CONFIG = TrainConfig(steps=6, batch_size=8, learning_rate=3e-3, log_every=4)
"""The run stopped at step 3 (mid-window) and resumed, under DDP and in one process."""
DDP_GROUP = "ddp"
"""xdist group of the tests that read the DDP group's outputs (started once per worker)."""


@pytest.fixture(scope="module")
def ddp_outputs(tmp_path_factory):
    """The folder :func:`_ddp_worker` wrote in two forkserver-forked gloo processes."""
    out = tmp_path_factory.mktemp("ddp")
    run_ranks(_ddp_worker, (str(out / "init"), str(out)))
    return out


def rank_shares(dtype: torch.dtype, world_size: int = 2) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """``(loss sum, gradients)`` of each rank's share of batch 0 (:func:`accumulate_gradients` with
    that rank's context, in this process, on an unwrapped model)."""
    shares = []
    for rank in range(world_size):
        torch.manual_seed(0)
        model = RoFormer(MODEL).to(dtype)
        loss_sum, _ = accumulate_gradients(model, random_batch(0), DistributedContext(rank, world_size), torch.device("cpu"))
        shares.append((loss_sum, {name: p.grad for name, p in model.named_parameters()}))
    return shares


@pytest.mark.long_running
@pytest.mark.xdist_group(DDP_GROUP)
def test_ddp_with_two_processes_averages_the_ranks_shares_bit_for_bit(ddp_outputs):
    """Two gloo processes compute, bit for bit, the average of the two ranks' shares computed in
    one process: gloo adds the two buffers and DDP halves them, and halving is exact in binary."""
    ddp = torch.load(ddp_outputs / "ddp.pt")
    (sum_0, grads_0), (sum_1, grads_1) = rank_shares(torch.float32)
    assert torch.equal(ddp["loss_sum"], sum_0 + sum_1)
    for name, gradient in ddp["grads"].items():
        assert torch.equal(gradient, (grads_0[name] + grads_1[name]) / 2), name

    # train() under DDP against train() in one process, three AdamW steps. The gradients differ
    # only by float32 summation order (the share average vs the global mean: relative ~1e-7, see
    # the float64 test below); Adam's step lr m/sqrt(v) moves each parameter by at most about lr,
    # so three steps differ by about 3 lr 1e-7 / |g| relative to a gradient entry of size |g|.
    single = train(MODEL, TrainConfig(steps=3, batch_size=8, learning_rate=3e-3, log_every=3), random_batch,
                   progress=False)
    assert ddp["trained_loss"] == pytest.approx(single.last_loss, rel=1e-6, abs=0)
    for name, value in single.model.state_dict().items():
        torch.testing.assert_close(ddp["trained"][name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_the_ranks_shares_average_to_the_gradient_of_the_global_mean():
    """In exact arithmetic ``(1/W) sum_r grad(W S_r / n) = grad(S / n)`` (S_r: rank r's loss sum,
    n: counted targets of the global batch), whatever the rows' counted targets (random_batch
    ignores a row-dependent number of them). In float64 the two sides differ only in the order of
    sums: each gradient entry is a sum of the counted tokens' contributions ``grad(l_t) / n``,
    each itself made of sums of at most 4 * width terms, so with ``k = n + 4 * width`` both sides are
    within ``gamma_k sum_t |grad(l_t)| / n`` of the exact value (first order; Higham, Lemma 3.1)."""
    shares = rank_shares(torch.float64)
    torch.manual_seed(0)
    model = RoFormer(MODEL).double()
    batch = random_batch(0)
    token_losses = F.cross_entropy(model(batch.inputs).flatten(0, 1), batch.targets.flatten(),
                                   ignore_index=IGNORE_INDEX, reduction="none")
    counted = torch.nonzero(batch.targets.flatten() != IGNORE_INDEX).flatten()
    counted_per_rank = (batch.targets != IGNORE_INDEX).reshape(2, -1).sum(1)
    assert counted_per_rank[0] != counted_per_rank[1]  # else a per-rank mean would pass too
    token_losses.sum().div(len(counted)).backward(retain_graph=True)
    direct = {name: p.grad.clone() for name, p in model.named_parameters()}
    magnitudes = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    for index in counted.tolist():
        model.zero_grad()
        (token_losses[index] / len(counted)).backward(retain_graph=True)
        for name, p in model.named_parameters():
            magnitudes[name] += p.grad.abs()
    reordering = 2 * gamma(len(counted) + 4 * MODEL.width)
    assert float((shares[0][0] + shares[1][0]) / len(counted)) == pytest.approx(
        token_losses.sum().item() / len(counted), rel=reordering, abs=0)  # positive terms: condition number 1
    for name, gradient in direct.items():
        average = (shares[0][1][name] + shares[1][1][name]) / 2
        assert torch.all((average - gradient).abs() <= reordering * magnitudes[name]), name


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": 0}, "steps: 0; expected an integer >= 1"),
        ({"warmup_steps": 10}, "warmup_steps: 10; expected fewer than steps = 10"),
        ({"warmup_steps": 4, "decay_steps": 7}, "decay_steps: 7; expected at most steps - warmup_steps = 6"),
        ({"decay_steps": -1}, "decay_steps: -1; expected an integer >= 0"),
        ({"learning_rate": -1.0}, "learning_rate: -1.0"),
        ({"precision": "fp8"}, "precision: 'fp8'"),
        ({"beta2": 1.0}, "beta2: 1.0"),
        ({"grad_clip": 0.0}, "grad_clip: 0.0"),
    ],
)
def test_bad_train_configs_are_rejected(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        TrainConfig(**({"steps": 10, "batch_size": 4} | changes))


def test_batch_of_the_wrong_size_is_rejected():
    with pytest.raises(ValueError, match="batch_fn: step 0 returned 8 rows; expected batch_size = 4"):
        train(MODEL, TrainConfig(steps=2, batch_size=4), random_batch, progress=False)


def test_stop_at_beyond_steps_is_rejected():
    with pytest.raises(ValueError, match="stop_at: 5; expected 0..steps = 2"):
        train(MODEL, TrainConfig(steps=2, batch_size=8), random_batch, stop_at=5, progress=False)


def test_checkpoint_keeps_a_tied_model(tmp_path):
    tied = RoFormerConfig(vocab_size=6, num_layers=1, num_heads=2, width=8, tie_embeddings=True)
    result = train(tied, TrainConfig(steps=2, batch_size=8, log_every=1), random_batch, tmp_path, progress=False)
    loaded = load_checkpoint(tmp_path / CHECKPOINT_DIR).model
    assert loaded.unembed.weight is loaded.embed.weight
    for name, value in result.model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    assert math.isfinite(result.last_loss)


def test_stop_at_before_the_checkpoint_is_rejected(tmp_path):
    config = TrainConfig(steps=4, batch_size=8, log_every=1)
    train(MODEL, config, random_batch, tmp_path, stop_at=3, progress=False)
    with pytest.raises(ValueError, match="stop_at: 2; the checkpoint in run_dir is at step 3; expected stop_at >= 3"):
        train(MODEL, config, random_batch, tmp_path, stop_at=2, progress=False)
    assert load_checkpoint(tmp_path / CHECKPOINT_DIR).config["step"] == 3
    again = train(MODEL, config, random_batch, tmp_path, stop_at=3, progress=False)  # nothing left to do
    assert again.step == 3


@pytest.mark.parametrize("stops", [(3,), (3, 6), (4, 5)])
def test_resume_in_mid_window_writes_the_log_of_an_uninterrupted_run(tmp_path, stops):
    config = TrainConfig(steps=10, batch_size=8, learning_rate=3e-3, warmup_steps=2, log_every=4)
    straight = train(MODEL, config, random_batch, tmp_path / "straight", progress=False)
    for stop in stops:
        stopped = train(MODEL, config, random_batch, tmp_path / "resumed", stop_at=stop, progress=False)
        assert stopped.step == stop
    resumed = train(MODEL, config, random_batch, tmp_path / "resumed", progress=False)
    logs = [[json.loads(line) for line in (tmp_path / run / METRICS_FILE).read_text().splitlines()]
            for run in ("straight", "resumed")]
    assert [r["step"] for r in logs[0]] == [4, 8, 10]
    keys = ("step", "loss", "tokens", "lr", "grad_norm")
    assert [[r[k] for k in keys] for r in logs[0]] == [[r[k] for k in keys] for r in logs[1]]
    assert resumed.last_loss == straight.last_loss


def test_a_call_that_runs_no_step_keeps_the_log(tmp_path):
    config = TrainConfig(steps=10, batch_size=8, log_every=4)
    train(MODEL, config, random_batch, tmp_path, stop_at=3, progress=False)
    before = (tmp_path / METRICS_FILE).read_text()
    assert [json.loads(line)["step"] for line in before.splitlines()] == [3]
    train(MODEL, config, random_batch, tmp_path, stop_at=3, progress=False)
    assert (tmp_path / METRICS_FILE).read_text() == before


def test_checkpoint_every_must_be_a_multiple_of_log_every():
    with pytest.raises(ValueError, match="checkpoint_every: 6; expected a multiple of log_every = 4"):
        TrainConfig(steps=10, batch_size=4, log_every=4, checkpoint_every=6)
    TrainConfig(steps=10, batch_size=4, log_every=4, checkpoint_every=8)


@pytest.mark.long_running
@pytest.mark.xdist_group(DDP_GROUP)
def test_ddp_resume_in_mid_window_writes_the_log_of_an_uninterrupted_run(ddp_outputs, tmp_path):
    train(MODEL, RESUME_CONFIG, random_batch, tmp_path / "single", progress=False)
    logs = [[json.loads(line) for line in (run / METRICS_FILE).read_text().splitlines()]
            for run in (tmp_path / "single", ddp_outputs / "resumed")]
    assert [r["step"] for r in logs[0]] == [r["step"] for r in logs[1]] == [4, 6]
    # float32 sums in a different order (see test_ddp_with_two_processes_averages_the_ranks_shares_bit_for_bit).
    assert [r["loss"] for r in logs[1]] == pytest.approx([r["loss"] for r in logs[0]], rel=1e-5, abs=0)


@pytest.mark.long_running
@pytest.mark.xdist_group(DDP_GROUP)
def test_a_stop_requested_on_one_rank_stops_every_rank_after_the_same_step(ddp_outputs):
    """Rank 1 alone asks to stop after step 3: both ranks stop there (the all-reduced request),
    and resuming gives the run stopped at ``stop_at`` = 3 and resumed, bit for bit."""
    results = [torch.load(ddp_outputs / f"stopped-{rank}.pt") for rank in range(2)]
    assert results == [{"step": 3, "interrupted": True}] * 2
    assert_same_runs(ddp_outputs / "resumed", ddp_outputs / "stopped")


def _siblings(directory):
    return sorted(path.name for path in directory.parent.iterdir())


def test_a_save_replaces_the_checkpoint_and_leaves_nothing_else(tmp_path):
    config = TrainConfig(steps=4, batch_size=8, log_every=1)
    train(MODEL, config, random_batch, tmp_path, stop_at=2, progress=False)
    train(MODEL, config, random_batch, tmp_path, stop_at=3, progress=False)
    assert _siblings(tmp_path / CHECKPOINT_DIR) == [CHECKPOINT_DIR, METRICS_FILE, LOCK_FILE]
    assert load_checkpoint(tmp_path / CHECKPOINT_DIR).config["step"] == 3


def test_a_save_interrupted_between_its_renames_is_refused_not_restarted(tmp_path, monkeypatch):
    config = TrainConfig(steps=4, batch_size=8, log_every=1)
    train(MODEL, config, random_batch, tmp_path, stop_at=2, progress=False)
    checkpoint = tmp_path / CHECKPOINT_DIR
    real_replace = os.replace

    def crash_before_the_second_rename(source, destination):
        if str(source).endswith(f"{CHECKPOINT_DIR}.tmp"):
            raise KeyboardInterrupt("killed")
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", crash_before_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        train(MODEL, config, random_batch, tmp_path, stop_at=3, progress=False)
    monkeypatch.setattr(os, "replace", real_replace)
    assert _siblings(checkpoint) == [f"{CHECKPOINT_DIR}.old", f"{CHECKPOINT_DIR}.tmp", METRICS_FILE, LOCK_FILE]
    with pytest.raises(ValueError, match=r"checkpoint: .* is missing but .*\.old' exists: a save was interrupted"):
        load_checkpoint(checkpoint)
    with pytest.raises(ValueError, match="a save was interrupted"):  # rather than training from step 0
        train(MODEL, config, random_batch, tmp_path, progress=False)
    (tmp_path / f"{CHECKPOINT_DIR}.tmp").rename(checkpoint)  # as the message says: the new checkpoint
    assert load_checkpoint(checkpoint).config["step"] == 3
    assert train(MODEL, config, random_batch, tmp_path, progress=False).step == 4
    assert _siblings(checkpoint) == [CHECKPOINT_DIR, METRICS_FILE, LOCK_FILE]  # the next save removed the .old


def test_a_previous_checkpoint_left_after_both_renames_is_ignored(tmp_path):
    config = TrainConfig(steps=4, batch_size=8, log_every=1)
    train(MODEL, config, random_batch, tmp_path, stop_at=2, progress=False)
    checkpoint = tmp_path / CHECKPOINT_DIR
    shutil.copytree(checkpoint, tmp_path / f"{CHECKPOINT_DIR}.old")  # as if killed before deleting it
    assert load_checkpoint(checkpoint).config["step"] == 2
    assert train(MODEL, config, random_batch, tmp_path, progress=False).step == 4
    assert _siblings(checkpoint) == [CHECKPOINT_DIR, METRICS_FILE, LOCK_FILE]


def test_resuming_or_branching_a_checkpoint_without_its_adamw_state_is_refused_naming_the_restore(tmp_path):
    """A committed run folder whose optimizer state left the tree (models/README.md) cannot go on;
    the refusal names the folder and ``hmmtf restore-checkpoint``, and a run already at its end,
    which takes no step, is read without the state."""
    train(MODEL, CONSTANT, random_batch, tmp_path / "constant", stop_at=4, progress=False)
    (tmp_path / "constant" / CHECKPOINT_DIR / "optimizer.safetensors").unlink()
    restore = f"hmmtf restore-checkpoint {tmp_path / 'constant' / CHECKPOINT_DIR}"
    with pytest.raises(ValueError, match=re.escape(restore)):
        train(MODEL, CONSTANT, random_batch, tmp_path / "constant", stop_at=6, progress=False)
    with pytest.raises(ValueError, match=re.escape(restore)):
        branch_run(tmp_path / "constant", tmp_path / "branch", MODEL, DECAYING)
    assert train(MODEL, CONSTANT, random_batch, tmp_path / "constant", stop_at=4, progress=False).step == 4
