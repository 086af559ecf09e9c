"""Training tokens/s of the ways to use a machine's cores: one process with one thread or more,
the DDP processes of one run (gloo, as ``torchrun`` starts them), or independent runs side by
side, under glibc's ``malloc`` defaults or the training tunables of :mod:`empirical.training.allocator`.
:func:`measure_layout` runs one way in fresh worker processes that start their timed steps
together; :func:`measure_peaks` measures the float32 matmul peak of the same cores the same way.

A worker is a *spawned* process (a fresh interpreter started with the environment the way asks
for: glibc reads its malloc tunables only when a process starts), so no thread pool exists yet
when the worker sets its thread count and builds its model (a process forked after torch's pools
started inherits locks held by threads it does not have; see ``run_ranks`` in
tests/test_empirical_train.py). Every worker trains the same model (seed :data:`MODEL_SEED`) on
the same random batch (seed :data:`BATCH_SEED`); only the way of using the cores differs.

The rate of workers that run at the same time is taken over their *common interval*
(:func:`rate_over_common_interval`): from the last worker's start to the first worker's end, so
every step it counts ran while every other worker was running too. Timings on a shared machine
drift by 10-20% from one minute to the next, so a comparison measures every way in several
*rounds* and compares the ways within each round (:func:`ratio_summary`).
"""
from __future__ import annotations

import math
import multiprocessing
import os
import queue
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch

from empirical.training.allocator import TUNABLES_VARIABLE, with_training_tunables

from empirical.training.model import RoFormer
from empirical.training.presets import ExperimentPreset, get_preset
from empirical.measurement.roofline import matmul_peak, synchronize
from empirical.training.train import (
    IGNORE_INDEX,
    Batch,
    accumulate_gradients,
    build_optimizer,
    distributed_context,
    init_distributed,
    shutdown_distributed,
)

MODEL_SEED = 0
"""``torch.manual_seed`` before the model is built: every worker trains the same initial weights."""
BATCH_SEED = 0
"""Seed of the random batch every worker trains on (:func:`random_batch`)."""
RATIO_CONFIDENCE = 0.95
"""Confidence of the interval of a way's ratio to today's path over the rounds (:func:`ratio_summary`)."""
POLL_S = 0.2
"""How often :func:`run_together` looks for a worker that died without reporting."""
JOIN_S = 30.0
"""How long a worker that has reported may take to exit before it is killed."""


def random_batch(vocab_size: int, length: int, rows: int, seed: int = BATCH_SEED) -> Batch:
    """``rows`` prompts of ``length`` tokens drawn uniformly from the vocabulary, each target the
    next token (the last position untrained): the shape of a training batch, without the cost of
    sampling HMMs."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (rows, length), generator=generator)
    targets = torch.cat([tokens[:, 1:], torch.full((rows, 1), IGNORE_INDEX)], dim=1)
    return Batch(tokens, targets)


def training_step(preset: ExperimentPreset, batch_size: int, device: torch.device, *, compile: bool = False,
                  precision: str = "fp32") -> tuple[RoFormer, Callable[[], None], Batch]:
    """``(model, step, batch)``: the preset's RoFormer (seed :data:`MODEL_SEED`), and a training step
    on one fixed global batch of ``batch_size`` rows: :func:`~empirical.training.train.accumulate_gradients`
    (this rank's rows of it, DDP-wrapped under an initialised process group, as
    :func:`~empirical.training.train.train` does), gradient clipping and AdamW."""
    context = distributed_context()
    torch.manual_seed(MODEL_SEED)
    model = RoFormer(preset.model_config(preset.mixture_spec.num_tokens)).to(device)
    optimizer = build_optimizer(model, preset.train)
    trained: torch.nn.Module = model
    if context.world_size > 1:
        trained = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if compile:
        trained = torch.compile(trained)
    batch = random_batch(model.config.vocab_size, preset.prompt_format.length, batch_size)

    def step() -> None:
        accumulate_gradients(trained, batch, context, device, precision)
        torch.nn.utils.clip_grad_norm_(model.parameters(), preset.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step, batch


class Timing(NamedTuple):
    timeline: list[float]
    """``time.perf_counter()`` when the timed steps started, then after each step. On CUDA only the
    first and the last are synchronised with the device (the others are launch times)."""
    warmup_s: float
    """Seconds of the untimed warm-up steps (for a compiled model: mostly compilation)."""

    @property
    def seconds(self) -> float:
        return self.timeline[-1] - self.timeline[0]


def time_steps(step: Callable[[], None], steps: int, warmup: int, device: torch.device,
               start: Callable[[], None] | None = None) -> Timing:
    """``warmup`` untimed calls of ``step``, then ``start()`` (a barrier's wait: the workers of a
    group start their timed steps together), then ``steps`` timed calls."""
    began = time.perf_counter()
    for _ in range(warmup):
        step()
    synchronize(device)
    warmup_s = time.perf_counter() - began
    if start is not None:
        start()
    timeline = [time.perf_counter()]
    for _ in range(steps):
        step()
        timeline.append(time.perf_counter())
    synchronize(device)
    timeline[-1] = time.perf_counter()
    return Timing(timeline, warmup_s)


class CommonRate(NamedTuple):
    tokens_per_s: float
    seconds: float
    """Length of the common interval."""


def rate_over_common_interval(timelines: list[list[float]], tokens_per_step: list[int]) -> CommonRate:
    """Tokens/s of workers together over the interval in which all of them were timing.

    Worker ``i``'s timeline ``t_i0 < t_i1 < ... < t_in`` (start, then the end of each step, on one
    clock) gives its steps done by time ``T``, ``s_i(T)``, by linear interpolation within a step.
    Over the common interval ``[T0, T1]``, ``T0 = max_i t_i0`` and ``T1 = min_i t_in``::

        tokens/s = sum_i tokens_per_step_i (s_i(T1) - s_i(T0)) / (T1 - T0)

    For one worker this is ``n tokens_per_step / (t_n - t_0)``.
    """
    if len(timelines) != len(tokens_per_step) or not timelines:
        raise ValueError(f"timelines: {len(timelines)}, tokens_per_step: {len(tokens_per_step)}; "
                         f"expected one token count per timeline, at least one")
    first, last = max(t[0] for t in timelines), min(t[-1] for t in timelines)
    if not last > first:
        raise ValueError(f"timelines: the last start {first} is not before the first end {last}; "
                         f"expected workers that ran at the same time")
    tokens = sum(count * float(np.diff(np.interp([first, last], timeline, np.arange(len(timeline))))[0])
                 for timeline, count in zip(timelines, tokens_per_step))
    return CommonRate(tokens / (last - first), last - first)


def ratio_summary(rates: list[float], today_rates: list[float], confidence: float = RATIO_CONFIDENCE) -> dict:
    """A way's tokens/s against today's path's over ``R`` rounds, each of which measured both::

        ratio_r = rates[r] / today_rates[r],     ratio = exp(mean_r log ratio_r)

    and for ``R >= 2`` the ``confidence`` interval ``exp(m -+ t s / sqrt(R))``, with ``m`` and ``s``
    the mean and sample standard deviation of the log ratios and ``t`` the Student quantile of
    ``R - 1`` degrees of freedom at ``(1 + confidence) / 2``. Pairing within a round removes the
    drift that two rounds share; the interval takes what is left as independent from round to
    round. One round gives no interval (``None``)."""
    if len(rates) != len(today_rates) or not rates:
        raise ValueError(f"rates: {len(rates)}, today_rates: {len(today_rates)}; expected the same number of "
                         f"rounds, at least one")
    import scipy.stats  # here, not at the top: every spawned worker imports this module, scipy.stats takes 1 s

    ratios = np.asarray(rates, dtype=float) / np.asarray(today_rates, dtype=float)
    logs = np.log(ratios)
    summary = {"ratios": [float(value) for value in ratios], "ratio": float(np.exp(logs.mean())), "interval": None}
    if len(logs) >= 2:
        half = scipy.stats.t.ppf((1 + confidence) / 2, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
        summary["interval"] = [float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))]
    return summary


@dataclass(frozen=True)
class Layout:
    """One way to use the cores: ``processes`` workers of ``threads`` threads each, training
    ``batch_size`` rows a step each, or with ``ddp`` one run's global batch of ``batch_size`` rows
    split across them; ``compile``: ``torch.compile`` the model; ``tuned_malloc``: the workers start
    with :data:`~empirical.training.allocator.TRAINING_TUNABLES` (else with the environment as it is)."""

    name: str
    description: str
    processes: int
    threads: int
    batch_size: int
    ddp: bool = False
    compile: bool = False
    tuned_malloc: bool = False

    def rows_per_process(self) -> int:
        return self.batch_size // self.processes if self.ddp else self.batch_size

    def environment(self) -> dict[str, str]:
        """The environment its workers start with."""
        return with_training_tunables(os.environ) if self.tuned_malloc else dict(os.environ)


def layouts(cores: int, batch_size: int, *, compile: bool = False) -> list[Layout]:
    """The ways compared, today's path first (one process, one thread, glibc's malloc defaults:
    ``hmmtf train --threads 1`` and the ladder as they ran); then a thread per core, a DDP process
    per core, an independent run per core, today's path and the independent runs at twice the
    batch, today's path, the DDP run and the independent runs with the training tunables (as
    ``hmmtf train`` now starts); with ``compile`` today's path compiled."""
    double = 2 * batch_size
    ways = [
        Layout("1x1", "1 process x 1 thread (today's path)", 1, 1, batch_size),
        Layout(f"1x{cores}", f"1 process x {cores} threads", 1, cores, batch_size),
        Layout(f"ddp-{cores}x1", f"{cores} DDP processes x 1 thread", cores, 1, batch_size, ddp=True),
        Layout(f"independent-{cores}x1", f"{cores} independent processes x 1 thread", cores, 1, batch_size),
        Layout(f"1x1-batch{double}", f"1 process x 1 thread, batch {double}", 1, 1, double),
        Layout(f"independent-{cores}x1-batch{double}", f"{cores} independent processes x 1 thread, batch {double}",
               cores, 1, double),
        Layout("1x1-tuned-malloc", "1 process x 1 thread, tuned malloc", 1, 1, batch_size, tuned_malloc=True),
        Layout(f"ddp-{cores}x1-tuned-malloc", f"{cores} DDP processes x 1 thread, tuned malloc", cores, 1, batch_size,
               ddp=True, tuned_malloc=True),
        Layout(f"independent-{cores}x1-tuned-malloc", f"{cores} independent processes x 1 thread, tuned malloc",
               cores, 1, batch_size, tuned_malloc=True),
    ]
    if compile:
        ways.append(Layout("1x1-compiled", "1 process x 1 thread, torch.compile", 1, 1, batch_size, compile=True))
    return ways


def _report(target: Callable[..., dict], index: int, barrier, results, args: tuple) -> None:
    """A worker process: ``target(index, barrier, *args)``'s dict, or the error it raised as
    ``{"error": ...}`` (after breaking the barrier, so that no other worker waits for it), with
    whether that error was only the barrier another worker broke."""
    try:
        payload, broken_by_another = target(index, barrier, *args), False
    except Exception as error:
        barrier.abort()
        payload = {"error": f"{type(error).__name__}: {error}"}
        broken_by_another = isinstance(error, threading.BrokenBarrierError)
    results.put((index, payload, broken_by_another))


def run_together(target: Callable[..., dict], args: list[tuple], timeout_s: float,
                 environment: Mapping[str, str] | None = None) -> list[dict]:
    """``target(index, barrier, *args[index])`` in ``len(args)`` processes spawned at once with
    ``environment`` (default: this process's), sharing a ``multiprocessing.Barrier``; their dicts,
    in order.

    A failure does not raise: when a worker raises, dies without a result, or the group is not done
    after ``timeout_s`` seconds, the workers still running are killed and every worker without a
    result gets ``{"error": ...}``. A worker that failed only because another broke the barrier
    does not end the wait: the worker that broke it does, so the failure named is the cause,
    whichever of the two reports first.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(args))
    results = context.Queue()
    processes = [context.Process(target=_report, args=(target, index, barrier, results, worker_args))
                 for index, worker_args in enumerate(args)]
    _start_with_environment(processes, dict(os.environ) if environment is None else environment)
    payloads: dict[int, dict] = {}
    failure = None
    deadline = time.monotonic() + timeout_s
    try:
        while failure is None and len(payloads) < len(processes):
            # A worker puts its result before it exits: one that had exited before this wait and
            # has no result once it is over died without one.
            exited = [index for index, process in enumerate(processes) if process.exitcode is not None]
            try:
                index, payload, broken_by_another = results.get(timeout=POLL_S)
            except queue.Empty:
                died = [index for index in exited if index not in payloads]
                if died:
                    failure = f"worker {died[0]} exited with code {processes[died[0]].exitcode} without a result"
                elif time.monotonic() > deadline:
                    failure = f"not done within the timeout of {timeout_s:g} s; killed"
                continue
            payloads[index] = payload
            if "error" in payload and not broken_by_another:
                failure = f"worker {index} failed: {payload['error']}"
    finally:
        for index, process in enumerate(processes):
            process.join(timeout=JOIN_S if failure is None and index in payloads else 0)
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
    return [payloads.get(index, {"error": failure}) for index in range(len(processes))]


def _start_with_environment(processes: list, environment: Mapping[str, str]) -> None:
    """Start the spawned ``processes``: a spawned process starts with ``os.environ`` as it is at its
    start, so this process's environment is ``environment`` meanwhile, and is put back after."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(environment)
        for process in processes:
            process.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _free_port() -> int:
    """A TCP port free on this machine now, for the DDP group's rendezvous (``MASTER_PORT``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _timed_training(layout: Layout, preset_name: str, steps: int, warmup: int, start: Callable[[], None]) -> Timing:
    """:func:`time_steps` of :func:`training_step` on the CPU; the model (and a DDP reducer) go
    when this returns, before the process group does (:func:`~empirical.training.train.shutdown_distributed`)."""
    device = torch.device("cpu")
    _, step, _ = training_step(get_preset(preset_name), layout.batch_size, device, compile=layout.compile)
    return time_steps(step, steps, warmup, device, start)


def _train_worker(index: int, barrier, layout: Layout, preset_name: str, steps: int, warmup: int,
                  port: int) -> dict:
    """Worker ``index`` of ``layout``: its thread count set first, then (DDP) the process group
    joined as under ``torchrun`` (:func:`~empirical.training.train.init_distributed` in the environment
    ``torchrun`` gives a rank), then the timed training, started with the other workers."""
    torch.set_num_threads(layout.threads)
    if layout.ddp:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(index), LOCAL_RANK=str(index),
                          WORLD_SIZE=str(layout.processes))
        init_distributed()
    try:
        timing = _timed_training(layout, preset_name, steps, warmup, barrier.wait)
    finally:
        shutdown_distributed()
    return {"threads": torch.get_num_threads(), "glibc_tunables": os.environ.get(TUNABLES_VARIABLE),
            "timeline": timing.timeline, "warmup_s": timing.warmup_s}


def _peak_worker(index: int, barrier, threads: int, size: int) -> dict:
    """:func:`~empirical.measurement.roofline.matmul_peak` in float32 on ``threads`` threads, started with the
    other workers of the group."""
    torch.set_num_threads(threads)
    barrier.wait()
    return {"threads": torch.get_num_threads(),
            "flops_per_s": matmul_peak(torch.device("cpu"), torch.float32, size)}


def measure_layout(layout: Layout, preset: ExperimentPreset, steps: int, warmup: int, timeout_s: float) -> dict:
    """The layout's training tokens/s on the CPU over its workers' common interval
    (:func:`rate_over_common_interval`; a worker's tokens a step are its rows x the preset's
    context), and each worker's thread count, warm-up seconds, seconds a step and own tokens/s;
    or, for a layout that failed, ``error``."""
    port = _free_port() if layout.ddp else 0
    workers = run_together(_train_worker, [(layout, preset.name, steps, warmup, port)] * layout.processes, timeout_s,
                           layout.environment())
    result = {**asdict(layout), "workers": workers}
    errors = [worker["error"] for worker in workers if "error" in worker]
    if errors:
        return {**result, "error": errors[0]}
    tokens = layout.rows_per_process() * preset.prompt_format.length
    timelines = [worker["timeline"] for worker in workers]
    common = rate_over_common_interval(timelines, [tokens] * len(workers))
    result["workers"] = [{"threads": worker["threads"], "glibc_tunables": worker["glibc_tunables"],
                          "warmup_s": worker["warmup_s"],
                          "seconds_per_step": (timeline[-1] - timeline[0]) / steps,
                          "tokens_per_s": steps * tokens / (timeline[-1] - timeline[0])}
                         for worker, timeline in zip(workers, timelines)]
    return {**result, "tokens_per_s": common.tokens_per_s, "common_interval_s": common.seconds}


def measure_peaks(cores: int, size: int, timeout_s: float) -> dict:
    """The float32 ``size x size`` matmul peak of ``cores`` cores, measured two ways, each in fresh
    processes: ``cores`` processes of one thread at the same time (the sum of their peaks), and one
    process of ``cores`` threads. The cores' peak ``flops_per_s`` is the larger (``used`` names
    the way), so that an MFU against it is not flattered by the slower way of measuring. Each
    process's peak is its fastest product; the processes start together and make the same calls,
    so their fastest calls ran beside each other (one that finished first would leave the other's
    last calls alone on the machine, which can only raise the sum and lower an MFU)."""
    side_by_side = run_together(_peak_worker, [(1, size)] * cores, timeout_s)
    threaded = run_together(_peak_worker, [(cores, size)], timeout_s)
    ways = {f"{cores}_processes_x_1_thread": side_by_side, f"1_process_x_{cores}_threads": threaded}
    measured = {name: sum(worker["flops_per_s"] for worker in workers) for name, workers in ways.items()
                if not any("error" in worker for worker in workers)}
    used = max(measured, key=measured.__getitem__, default=None)
    return {"size": size, "ways": {name: {"workers": workers, "flops_per_s": measured.get(name)}
                                   for name, workers in ways.items()},
            "used": used, "flops_per_s": measured.get(used)}
