"""Runs the plateau study's ``hmmtf curve`` runs one after another on one core, each stopped by the
study's budget rule (``empirical/studies/plateau.py``, ``RULES``): one curve point after its escape,
or at its last step. A second queue on the other core keeps both busy.

    python benchmarks/plateau_queue.py QUEUE.json [--poll-seconds 30] [--points-after-escape 1]

``QUEUE.json`` is a list of ``{"run_dir": DIR, "args": [FLAG, ...]}``: ``hmmtf curve ARGS --run-dir
DIR`` for each entry. A run that has already escaped and recorded its point after is skipped, so a
queue restarted after an interruption resumes where it stopped (``hmmtf curve`` resumes a run from
its checkpoint); a run another process is training (its folder's lock is held) is followed, not
started again. A run is stopped with SIGTERM: in a training step ``hmmtf curve`` answers with a
checkpoint and exit status 143, while it scores a point the signal ends it at once. The curve's
checkpoint cadence must equal its scoring cadence, so that the checkpoint is at its last scored
point either way; the queue checks that it is, and stops on any other failure.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from empirical.reproduce.record import process_alive  # noqa: E402
from empirical.studies.plateau import escape, paper_budget_tokens  # noqa: E402
from empirical.training.checkpoint import CONFIG_FILE  # noqa: E402
from empirical.training.run_control import LOCK_FILE  # noqa: E402
from empirical.training.train import CHECKPOINT_DIR  # noqa: E402
from empirical.yardsticks.curves import written_points  # noqa: E402

SIGTERM_EXIT = 128 + signal.SIGTERM
STOPPED = (0, SIGTERM_EXIT, -signal.SIGTERM)
"""Exit statuses of a run the queue stopped: ended, stopped in a step, ended by the signal while scoring."""


def points_after_escape(run_dir: Path) -> int | None:
    """How many curve points ``run_dir`` recorded after the one at which it escaped (the escape
    rule of ``RULES``); None before its escape or before its first point."""
    points = written_points(run_dir)
    if not points:
        return None
    record = escape(points, paper_budget_tokens())
    if not record["escaped"]:
        return None
    return sum(point["step"] > record["step"] for point in points)


def lock_holder(run_dir: Path) -> int | None:
    """The process ID in ``run_dir``'s lock file (``hmmtf curve`` writes its own there while it holds
    the lock) when that process is alive; None otherwise."""
    lock = run_dir / LOCK_FILE
    text = lock.read_text().strip() if lock.is_file() else ""
    return int(text) if text.isdigit() and process_alive(int(text)) else None


def run_until_escape(run_dir: Path, args: list[str], after: int, poll_seconds: float) -> None:
    """Runs ``hmmtf curve ARGS --run-dir RUN_DIR`` (or follows the process already training it) until
    it ends or has ``after`` points after its escape, then stops it with SIGTERM; raises SystemExit
    on any other failure, or when the checkpoint is not at the last scored point."""
    done = points_after_escape(run_dir)
    if done is not None and done >= after:
        print(f"{run_dir}: escaped, {done} point(s) after; skipped", flush=True)
        return
    holder = lock_holder(run_dir)
    if holder is None:
        command = [sys.executable, str(ROOT / "hmmtf" / "__main__.py"), "curve", *args, "--run-dir", str(run_dir)]
        print("$ " + " ".join(command), flush=True)
        process = subprocess.Popen(command)
        holder = process.pid
    else:
        print(f"{run_dir}: following process {holder}, which trains it", flush=True)
        process = None

    def running() -> bool:
        return process.poll() is None if process is not None else process_alive(holder)

    while running():
        time.sleep(poll_seconds)
        done = points_after_escape(run_dir)
        if done is not None and done >= after and running():
            print(f"{run_dir}: escaped, {done} point(s) after; stopping it", flush=True)
            os.kill(holder, signal.SIGTERM)
            while running():
                time.sleep(1.0)
    if process is not None and process.returncode not in STOPPED:
        raise SystemExit(f"{run_dir}: hmmtf curve exited with {process.returncode}; the queue stops")
    checkpoint_step = json.loads((run_dir / CHECKPOINT_DIR / CONFIG_FILE).read_text())["step"]
    last_point = written_points(run_dir)[-1]["step"]
    if checkpoint_step < last_point:
        raise SystemExit(f"{run_dir}: checkpoint at step {checkpoint_step}, before the last scored point "
                         f"{last_point}; the queue stops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("queue", type=Path, help="JSON list of {run_dir, args}")
    parser.add_argument("--poll-seconds", type=float, default=30.0, help="seconds between reads of curve.jsonl")
    parser.add_argument("--points-after-escape", type=int, default=1,
                        help="curve points recorded after the escape before the run is stopped")
    options = parser.parse_args()
    for entry in json.loads(options.queue.read_text()):
        run_until_escape(Path(entry["run_dir"]), entry["args"], options.points_after_escape, options.poll_seconds)


if __name__ == "__main__":
    main()
