"""Training batches drawn ahead of the step that needs them, in a worker process: the host's prompt
sampling off the training loop's critical path.

On the lent H200 (docs/empirical.md, "The paper-size network on a lent GPU") the paper preset's
compiled step alone ran at 245,800 tokens/s, and a run that drew its own batches at 173,500: the
loop spends about 14 ms a step drawing 32 prompts of 128-state HMMs on the host (13 ms on this
project's CPU, measured with :class:`~empirical.training.data.PromptStream`), time in which it
launches no GPU work. A worker process draws them beside it instead. A process, not a thread: the
draw is Python-heavy (a loop over positions with small array operations), so a thread would hold
the interpreter lock the launching thread needs.

Why it changes no number: a batch function of this project is a function of the step alone
(:mod:`empirical.training.data`: batch ``s`` is drawn from ``stream_seed(seed, TRAIN_STREAM, s)``),
so drawing batch ``s + k`` early, in another process, gives the same tensors. The worker is started
with ``fork``: it inherits the batch function (the paper mixture's 1.2 GB are not copied, let alone
pickled) and draws on the CPU only, with one thread, so the parent's CUDA context is never touched
in it. It runs ``depth`` batches ahead at most (a bounded queue); a step other than the next one
asked (a resumed or restarted run) starts a new worker at that step.

The worker never outlives the training: a forked child shares the run folder's lock (the parent's
``flock``, :mod:`empirical.training.run_control`), so a worker left behind by a trainer killed with
SIGKILL would keep the folder locked, and the rerun would be refused. On Linux the worker asks the
kernel to kill it when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), and exits at once if
the parent died before it asked (tests/test_fault_injection.py kills trainers at random steps).
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import traceback
from typing import Callable

import torch

from empirical.training.train import Batch

POLL_SECONDS = 1.0
"""How often a wait for the worker's next batch checks that the worker is still alive."""


PR_SET_PDEATHSIG = 1
"""Linux's ``prctl`` option: the signal the kernel sends this process when its parent dies."""


def _die_with(parent: int) -> None:
    """Have the kernel kill this process (SIGKILL) when its parent, process ``parent``, dies; exit
    now if it already has (this process's parent is then another). Linux only: elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(0)


def _draw(batch_fn: Callable[[int], Batch], first: int, batches: multiprocessing.Queue, parent: int) -> None:
    """The worker: ``batch_fn(first), batch_fn(first + 1), ...`` into ``batches`` as
    ``(step, parts, None)``, ``parts`` the batch's fields (:class:`Batch`: inputs, targets and the
    optional target distributions), or ``(step, None, traceback)`` once a draw raises. The arrays go
    as numpy arrays, pickled by value: torch would send a tensor as a shared-memory handle that
    only a live sender can hand over (and one file descriptor per batch). It leaves
    SIGINT and SIGTERM to the parent: a fork inherits the handlers of
    :func:`empirical.training.run_control.stop_on_signals`, which would only set a flag here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with(parent)
    torch.set_num_threads(1)
    step = first
    while True:
        try:
            batch = batch_fn(step)
        except Exception:  # handed to the parent, which raises it where the batch was asked
            batches.put((step, None, traceback.format_exc()))
            return
        batches.put((step, tuple(None if part is None else part.numpy() for part in batch), None))
        step += 1


class PrefetchedBatches:
    """``batch_fn``'s batches, each drawn up to ``depth`` steps ahead in a worker process (module
    docstring); ``prefetched(step)`` equals ``batch_fn(step)``. Use as a context manager, or call
    :meth:`close`, so that the worker ends with the training."""

    def __init__(self, batch_fn: Callable[[int], Batch], depth: int) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth: {depth!r}; expected an integer >= 1 (batches drawn ahead)")
        self.batch_fn, self.depth = batch_fn, depth
        self.context = multiprocessing.get_context("fork")
        self.worker: multiprocessing.process.BaseProcess | None = None
        self.batches: multiprocessing.Queue | None = None
        self.next_step: int | None = None

    def _start(self, step: int) -> None:
        self.close()
        self.batches = self.context.Queue(maxsize=self.depth)
        self.worker = self.context.Process(target=_draw, args=(self.batch_fn, step, self.batches, os.getpid()),
                                           daemon=True)
        self.worker.start()
        self.next_step = step

    def _receive(self) -> tuple:
        assert self.batches is not None and self.worker is not None
        while True:
            try:
                return self.batches.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if not self.worker.is_alive():
                    raise RuntimeError(f"prefetch: the worker drawing step {self.next_step} ended with exit code "
                                       f"{self.worker.exitcode} before handing it over") from None

    def __call__(self, step: int) -> Batch:
        if step != self.next_step:
            self._start(step)
        drawn, parts, failure = self._receive()
        if parts is None:
            self.close()
            raise RuntimeError(f"prefetch: drawing the batch of step {drawn} failed in the worker:\n{failure}")
        if drawn != step:
            raise RuntimeError(f"prefetch: the worker handed over step {drawn}; expected step {step}")
        self.next_step = step + 1
        return Batch(*(None if part is None else torch.from_numpy(part) for part in parts))

    def close(self) -> None:
        """End the worker, if any (SIGKILL: it holds nothing to clean up, and its queue is dropped);
        the next call starts a new one."""
        if self.worker is not None:
            self.worker.kill()
            self.worker.join()
            assert self.batches is not None
            self.batches.close()
            self.batches.join_thread()
        self.worker, self.batches, self.next_step = None, None, None

    def __enter__(self) -> PrefetchedBatches:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
