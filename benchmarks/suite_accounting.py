"""pytest plugin of ``benchmarks/bench_suite.py``: what each test and each collection cost.

Loaded with ``-p suite_accounting`` (``benchmarks/`` on ``PYTHONPATH``). Every process that runs
tests (an xdist worker, or pytest without xdist) writes ``$SUITE_ACCOUNTING_DIR/<name>.json``:
the CPU seconds of its start and collection (the process's own CPU when collection finished: the
interpreter, the imports of every test module), and one row per test: its CPU in the process
itself, its CPU in child processes, its wall time, its ``xdist_group`` and whether it is marked
``long_running``.

A child's CPU reaches ``getrusage(RUSAGE_CHILDREN)`` when the child is reaped, so it is counted for
the test during which that happens: the test that waited for it, except for a child nobody waits
for (a detached run), which is counted for a later test of the same process or not at all.
"""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

DIRECTORY_VARIABLE = "SUITE_ACCOUNTING_DIR"


def cpu_seconds() -> tuple[float, float]:
    """``(own, children)``: user + system CPU seconds of this process and of its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def runs_tests(config) -> bool:
    """An xdist worker, or pytest without xdist (an xdist controller only hands tests out)."""
    return hasattr(config, "workerinput") or config.getoption("dist", "no") == "no"


class Accounting:
    """The rows of one process, written at the end of its session."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.collection_cpu_s = 0.0
        self.tests: list[dict] = []

    def pytest_collection_finish(self, session) -> None:
        self.collection_cpu_s = sum(cpu_seconds())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        (own_before, children_before), started = cpu_seconds(), time.perf_counter()
        yield
        (own_after, children_after), wall = cpu_seconds(), time.perf_counter() - started
        group = item.get_closest_marker("xdist_group")
        self.tests.append({"nodeid": item.nodeid, "cpu_s": own_after - own_before,
                           "children_cpu_s": children_after - children_before, "wall_s": wall,
                           "group": (group.args[0] if group.args else group.kwargs["name"]) if group else None,
                           "long_running": item.get_closest_marker("long_running") is not None})

    def pytest_sessionfinish(self, session) -> None:
        directory = Path(os.environ[DIRECTORY_VARIABLE])
        record = {"process": self.name, "collection_cpu_s": self.collection_cpu_s, "tests": self.tests}
        (directory / f"{self.name}.json").write_text(json.dumps(record, allow_nan=False))


def pytest_configure(config) -> None:
    if DIRECTORY_VARIABLE not in os.environ:
        raise pytest.UsageError(f"{DIRECTORY_VARIABLE}: not set; expected the folder the suite_accounting "
                                f"plugin writes to (benchmarks/bench_suite.py sets it)")
    if runs_tests(config):
        name = config.workerinput["workerid"] if hasattr(config, "workerinput") else "main"
        config.pluginmanager.register(Accounting(name), "suite-accounting")
