"""glibc ``malloc`` settings under which CPU training runs faster, and the restart that applies them.

A training step of the ladder's 4 x 4 x 64 RoFormer (batch 32 x 118 tokens) allocates and frees
megabytes of activations and gradients. With glibc's defaults, blocks above the dynamic mmap
threshold are mapped and unmapped on every step, and the top of the heap is trimmed back to the
system: 3,000-5,500 minor page faults and 9-20 ms of kernel time a step (of 200-290 ms, two runs), each
fault a freshly zeroed 4 KiB page (``benchmarks/bench_malloc.py``, ``figures/benchmarks/malloc.json``). :data:`TRAINING_TUNABLES` keep freed memory in the heap
(no mmap below 32 MiB, no trimming) and ask for transparent huge pages on it
(``madvise(MADV_HUGEPAGE)``; the kernels here run THP in ``madvise`` mode), so the steady state
faults no page (0.1-0.2 a step, under 1 ms of kernel time). The arithmetic does not change: a run gives the same
bits either way. ``benchmarks/bench_training.py --compare`` measures the gain beside glibc's
defaults (docs/empirical.md, "The ways to use the two cores").

glibc reads ``GLIBC_TUNABLES`` once, when the process starts, so the settings are applied by
restarting the process with them in its environment (:func:`restart_with_training_tunables`,
which ``hmmtf`` calls for :data:`TRAINING_SUBCOMMANDS`), quietly: the restart says so on stderr
only when asked (``hmmtf -v``), so that a user error stays one line and ``--help`` only the help.
Tunables the environment already sets keep their values, an unknown tunable is ignored by glibc.
``HMMTF_MALLOC`` takes one of :data:`MALLOC_CHOICES`: ``tuned`` (the default, also when unset or
empty) or ``system`` (no restart, glibc's defaults); any other value is refused.
"""
from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Mapping

TUNABLES_VARIABLE = "GLIBC_TUNABLES"
OPT_OUT_VARIABLE = "HMMTF_MALLOC"
"""``HMMTF_MALLOC=system``: no restart, glibc's defaults."""
MALLOC_CHOICES = ("tuned", "system")
"""The values of ``HMMTF_MALLOC``: restart with :data:`TRAINING_TUNABLES` (the default), or not."""
TRAINING_TUNABLES = {
    "glibc.malloc.hugetlb": "1",
    "glibc.malloc.mmap_threshold": str(32 << 20),
    "glibc.malloc.trim_threshold": str(2**31 - 1),
}
"""Transparent huge pages on malloc's memory; blocks below 32 MiB (every tensor of the ladder's
shapes) from the heap, not from their own mappings; freed memory kept, never trimmed."""
TRAINING_SUBCOMMANDS = ("train", "curve", "markov-sweep", "markov-incontext", "reproduce")
"""The ``hmmtf`` subcommands that train a network (``reproduce`` on a CPU preset)."""


def parse_tunables(value: str) -> dict[str, str]:
    """``"name=value:name=value"`` (the syntax of ``GLIBC_TUNABLES``) as a dict, in order;
    ``ValueError`` for an entry without ``=``."""
    entries = [entry for entry in value.split(":") if entry]
    malformed = [entry for entry in entries if "=" not in entry]
    if malformed:
        raise ValueError(f"{TUNABLES_VARIABLE}: {value!r}; expected name=value entries separated by ':', "
                         f"not {malformed[0]!r}")
    return dict(entry.split("=", 1) for entry in entries)


def with_training_tunables(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` whose ``GLIBC_TUNABLES`` also sets :data:`TRAINING_TUNABLES`; a
    tunable it already sets keeps its value."""
    tunables = {**TRAINING_TUNABLES, **parse_tunables(environ.get(TUNABLES_VARIABLE, ""))}
    return {**environ, TUNABLES_VARIABLE: ":".join(f"{name}={value}" for name, value in tunables.items())}


def malloc_choice(environ: Mapping[str, str]) -> str:
    """``HMMTF_MALLOC`` of ``environ``, one of :data:`MALLOC_CHOICES` (``tuned`` when unset or
    empty); ``ValueError`` naming any other value."""
    value = environ.get(OPT_OUT_VARIABLE) or MALLOC_CHOICES[0]
    if value not in MALLOC_CHOICES:
        raise ValueError(f"{OPT_OUT_VARIABLE}: {value!r}; expected one of {list(MALLOC_CHOICES)} (unset: "
                         f"{MALLOC_CHOICES[0]!r}; empirical/training/allocator.py)")
    return value


def needs_restart(environ: Mapping[str, str]) -> bool:
    """Whether a process started with ``environ`` lacks a training tunable that a restart would
    give it: on Linux with glibc, unless ``HMMTF_MALLOC=system``. ``ValueError`` for an
    ``HMMTF_MALLOC`` that is not one of :data:`MALLOC_CHOICES` (:func:`malloc_choice`), anywhere."""
    if malloc_choice(environ) == "system":
        return False
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    return not TRAINING_TUNABLES.keys() <= parse_tunables(environ.get(TUNABLES_VARIABLE, "")).keys()


def restart_with_training_tunables(command_line: list[str], *, verbose: bool = False,
                                   environ: Mapping[str, str] = os.environ,
                                   execve: Callable[..., None] = os.execve) -> None:
    """Replace this process by the same ``command_line`` (``sys.orig_argv``: the interpreter, its
    options such as ``-u``, the script or ``-m`` module and the arguments) with
    :func:`with_training_tunables` when :func:`needs_restart` (saying so in one line on stderr
    when ``verbose``); return otherwise. The restarted process has the tunables, so it does not
    restart again; it keeps the process id, so ``torchrun``, the run lock and a shell that waits
    for it see no difference."""
    if not needs_restart(environ):
        return
    tuned = with_training_tunables(environ)
    if verbose:
        print(f"hmmtf: restarting with {TUNABLES_VARIABLE}={tuned[TUNABLES_VARIABLE]} (faster CPU training, "
              f"empirical/training/allocator.py; {OPT_OUT_VARIABLE}=system to keep glibc's defaults)", file=sys.stderr,
              flush=True)
    execve(sys.executable, [sys.executable, *command_line[1:]], tuned)
