"""The suite's own guards: a hanging test fails, with every thread's stack, within its time limit.

The limits live in pyproject.toml (``faulthandler_timeout``, ``timeout``, ``timeout_method``); this
runs a planted test that never returns under that configuration, with the limits shortened, in
the two modes the suite runs in (xdist workers, as ``make test`` does, and a single process).
"""
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
DUMP_AFTER_S, KILL_AFTER_S = 1, 2


@pytest.mark.parametrize("mode", [["-n", "1"], ["-p", "no:xdist"]], ids=["xdist", "single-process"])
def test_a_hanging_test_fails_with_its_stack_within_the_limit(tmp_path, mode):
    (tmp_path / "test_planted_hang.py").write_text(HANGING_TEST)
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
               "-p", "no:cacheprovider", "-o", f"faulthandler_timeout={DUMP_AFTER_S}",
               "-o", f"timeout={KILL_AFTER_S}", *mode, str(tmp_path / "test_planted_hang.py")]
    started = time.monotonic()
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - started
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "in test_waits_for_an_event_nobody_sets" in output, output  # the stuck frame is named
    assert elapsed < KILL_AFTER_S + 30, output  # start-up (xdist: a worker) plus the limit
