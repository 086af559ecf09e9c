"""``hmmtf ledger --remeasure-timings``: every timing (:attr:`ledger.results.Result.timing`)
measured again by its registered command, each on idle cores, for whoever wants them current.

A timing is a measurement of a machine at a commit (its record carries both), not a computation:
a change of its producers makes it older, not wrong, so ``hmmtf ledger --check`` reports it and
does not fail (docs/ledger.md, "Timings"). This command is the one way to bring them all up to the
present code: it runs each registered command (``python benchmarks/...``, with this interpreter)
from the repository root, after the 1-minute load average has fallen below ``max_load`` (it lags
about two minutes, so a benchmark started right after another would record the one before), and
refuses a tree with uncommitted changes outside ``figures/`` (the records would say ``+dirty``).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ledger.documents import LedgerError
from ledger.provenance import git
from ledger.results import RESULTS, Result

IDLE_LOAD = 0.5
"""The 1-minute load average below which the cores count as idle (``bench_training.py --compare``'s
``--max-load``)."""

POLL_SECONDS = 15.0
"""How often the load is read while waiting for idle cores."""


def timing_argv(result: Result) -> list[str]:
    """The registered command of the timing ``result`` as an argument vector run by this interpreter;
    ValueError when it is not ``python benchmarks/SCRIPT ...``."""
    argv = shlex.split(result.command or "")
    if len(argv) < 2 or argv[0] != "python" or not argv[1].startswith("benchmarks/"):
        raise ValueError(f"{result.path}: command {result.command!r}; expected `python benchmarks/SCRIPT ...`")
    return [sys.executable, *argv[1:]]


def wait_for_idle(max_load: float, load: Callable[[], float] = lambda: os.getloadavg()[0],
                  sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once the 1-minute load average is below ``max_load``, saying once that it waits."""
    said = False
    while load() >= max_load:
        if not said:
            print(f"waiting for idle cores (1-minute load {load():.2f}, at most {max_load} wanted)", flush=True)
            said = True
        sleep(POLL_SECONDS)


def remeasure(root: Path, results: tuple[Result, ...] = RESULTS, max_load: float = IDLE_LOAD,
              run: Callable[[list[str], Path], int] = lambda argv, cwd: subprocess.run(argv, cwd=cwd).returncode,
              wait: Callable[[float], None] = wait_for_idle) -> list[str]:
    """Run the command of every timing of ``results``, each after :func:`wait_for_idle`; the paths
    measured. LedgerError for uncommitted changes outside figures/ or a command that fails."""
    changed = git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)figures").stdout
    if changed.strip():
        raise LedgerError(f"--remeasure-timings: uncommitted changes ({changed.splitlines()[0].strip()} ...); expected "
                          "a clean tree, since a timing records the commit it measured")
    timings = [result for result in results if result.timing]
    commands = [timing_argv(result) for result in timings]
    for result, argv in zip(timings, commands):
        wait(max_load)
        print(f"measuring {result.path}: {shlex.join(argv)}", flush=True)
        code = run(argv, root)
        if code:
            raise LedgerError(f"--remeasure-timings: `{result.command}` exited {code}")
    return [result.path for result in timings]
