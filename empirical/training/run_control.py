"""Control of a training run from outside its loop: the run folder's lock, and the stop that
SIGINT and SIGTERM request.

**Lock.** :func:`run_folder_lock` holds an exclusive ``flock`` on ``RUN_DIR/train.lock`` while a
training (or another command) writes to the folder, with the holder's process ID in the file; a
second one on the folder is refused, naming that ID (:class:`RunFolderLocked`). The kernel releases a ``flock`` when
its holder exits, however it exits, so the lock file a killed process leaves behind blocks nothing.
The file is kept (emptied on release): deleting it would let a process that opened it before the
deletion and one that creates a new file both hold "the" lock.

**Stop.** :func:`stop_on_signals` installs handlers of SIGINT and SIGTERM that only record the
signal (:class:`StopRequest`); the training loop asks at each step boundary and, once asked, writes
a checkpoint and returns. A signal that arrives while the checkpoint is written does nothing more,
so it cannot cut the save short. The command then exits with ``128 + signal number`` (130 for
SIGINT, 143 for SIGTERM), the shell's convention for a process ended by a signal, after one line
saying where it stopped and how to resume (:func:`interrupted_line`): ``hmmtf train`` stops at a
step, ``hmmtf reproduce`` at a training step or at the end of its other stages.
"""
from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = "train.lock"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunFolderLocked(ValueError):
    """Another process holds the lock of the run folder."""


def _holder(descriptor: int) -> str:
    """The process ID the lock file holds, as text, or a phrase saying it is not written yet."""
    written = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return f"process {written}" if written else "a process that has not written its ID yet"


@contextmanager
def run_folder_lock(run_dir: Path, name: str = "run_dir") -> Iterator[Path]:
    """Hold the lock of ``run_dir`` (created if missing) for the ``with`` block; yields the lock
    file's path. :class:`RunFolderLocked`, naming the argument ``name`` (``run_dir`` of
    :func:`~empirical.training.train.train`, a command's ``--out``) and the holder's process ID, if
    another process holds it. Every command that writes results into a folder takes it (training,
    evaluation, analysis, export, reproduction). A folder it created is removed again when the
    block raises before anything but the lock file was written there."""
    run_dir = Path(run_dir)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderLocked(
                f"{name}: {str(run_dir)!r} is locked by {_holder(descriptor)} (an hmmtf command writing to it; lock "
                f"file {str(path)!r}); expected a folder no other command writes to: wait for that one, stop it, or "
                f"choose another folder") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        try:
            yield path
        except BaseException:
            if created and [entry.name for entry in run_dir.iterdir()] == [LOCK_FILE]:
                path.unlink()  # a command refused before it wrote leaves no folder it made (still locked: no race)
                run_dir.rmdir()
            raise
        finally:
            os.ftruncate(descriptor, 0)
    finally:
        os.close(descriptor)  # releases the flock


class StopRequest:
    """The first stop signal received (:data:`STOP_SIGNALS`), if any; calling it asks whether one was."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None

    def __call__(self) -> bool:
        return self.signal is not None

    def record(self, signum: int, frame) -> None:
        """The signal handler: remember the first signal, nothing else."""
        if self.signal is None:
            self.signal = signal.Signals(signum)

    @property
    def exit_code(self) -> int:
        """``128 + signal number`` of the recorded signal: 130 for SIGINT, 143 for SIGTERM; 143
        without one (a DDP rank stopped because another rank was signalled exits as if terminated)."""
        return 128 + (self.signal or signal.SIGTERM)


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Inside the block, SIGINT and SIGTERM only set the yielded :class:`StopRequest`; the previous
    handlers come back on exit. Must run in the main thread (``signal.signal``)."""
    request = StopRequest()
    previous = {number: signal.signal(number, request.record) for number in STOP_SIGNALS}
    try:
        yield request
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def interrupted_line(prog: str, signal_name: str, where: str) -> str:
    """The line a command stopped by a signal ends with: ``PROG: interrupted by SIGNAL WHERE;
    rerun the same command to resume`` (``where`` says where it stopped and what it wrote)."""
    return f"{prog}: interrupted by {signal_name} {where}; rerun the same command to resume"
