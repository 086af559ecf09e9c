"""The suite's own guards: a hanging test fails, with every thread's stack, within its time limit;
the tests of one ``xdist_group`` run on one worker.

The limits live in pyproject.toml (``faulthandler_timeout``, ``timeout``, ``timeout_method``); this
runs a planted test that never returns under that configuration, with the limits shortened, in
the two modes the suite runs in (xdist workers, as ``make test`` does, and a single process).
"""
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HANGING_TEST = '''
import threading


def test_waits_for_an_event_nobody_sets():
    threading.Event().wait()
'''
DUMP_AFTER_S, KILL_AFTER_S = 0.5, 1
WITHOUT_HYPOTHESIS = ["-p", "no:hypothesispytest"]
"""The planted tests use no hypothesis; its plugin's import is 1.4 s of each pytest process's 1.9 s
start (xdist runs three: the controller and its workers)."""


@pytest.mark.parametrize("mode", [["-n", "1", "--max-worker-restart", "0"], ["-p", "no:xdist"]],
                         ids=["xdist", "single-process"])
def test_a_hanging_test_fails_with_its_stack_within_the_limit(tmp_path, mode):
    (tmp_path / "test_planted_hang.py").write_text(HANGING_TEST)
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
               "-p", "no:cacheprovider", *WITHOUT_HYPOTHESIS, "-o", f"faulthandler_timeout={DUMP_AFTER_S}",
               "-o", f"timeout={KILL_AFTER_S}", *mode, str(tmp_path / "test_planted_hang.py")]
    started = time.monotonic()
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - started
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "in test_waits_for_an_event_nobody_sets" in output, output  # the stuck frame is named
    assert elapsed < KILL_AFTER_S + 30, output  # start-up (xdist: a worker) plus the limit


GROUPED_TESTS = '''
import os

import pytest


@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("index", range(4))
def test_grouped(index):
    print("worker", os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.parametrize("index", range(4))
def test_free(index):
    pass
'''


def test_the_tests_of_a_group_run_on_one_worker(tmp_path):
    """``make test``'s ``--dist loadgroup`` (tests/tiny_pipeline.py): pytest 9.2 with pytest-xdist
    3.8 drops the groups without a word (pyproject.toml's pytest bound says why)."""
    (tmp_path / "test_planted_groups.py").write_text(GROUPED_TESTS)
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
               "-p", "no:cacheprovider", *WITHOUT_HYPOTHESIS, "-n", "2", "--dist", "loadgroup", "-v",
               str(tmp_path / "test_planted_groups.py")]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    runs = re.findall(r"^\[(gw\d+)\] .*::test_grouped\[", finished.stdout, flags=re.MULTILINE)
    assert len(runs) == 4 and len(set(runs)) == 1, finished.stdout
