"""Runs the plateau study's ``hmmtf curve`` runs one after another on one core, each stopped by the
study's budget rule (``empirical/studies/plateau.py``, ``RULES``): one curve point after its escape,
or at its last step. A second queue on the other core keeps both busy.

    python benchmarks/plateau_queue.py QUEUE.json [--poll-seconds 30] [--points-after-escape 1]

``QUEUE.json`` is a list of ``{"run_dir": DIR, "args": [FLAG, ...]}``: ``hmmtf curve ARGS --run-dir
DIR`` for each entry. A run that has already escaped and recorded its point after is skipped, so a
queue restarted after an interruption resumes where it stopped (``hmmtf curve`` resumes a run from
its checkpoint). A run is stopped with SIGTERM, which ``hmmtf curve`` answers with a checkpoint and
exit status 143; the curve's checkpoint cadence should equal its scoring cadence, so that the run
stops at its last scored point. Any other non-zero exit stops the queue.
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from empirical.studies.plateau import escape, paper_budget_tokens  # noqa: E402
from empirical.yardsticks.curves import written_points  # noqa: E402

SIGTERM_EXIT = 128 + signal.SIGTERM


def points_after_escape(run_dir: Path) -> int | None:
    """How many curve points ``run_dir`` recorded after the one at which it escaped (the escape
    rule of ``RULES``); None before its escape or before its first point."""
    if not (run_dir / "curve.jsonl").is_file():
        return None
    points = written_points(run_dir)
    if not points:
        return None
    record = escape(points, paper_budget_tokens())
    if not record["escaped"]:
        return None
    return sum(point["step"] > record["step"] for point in points)


def run_until_escape(run_dir: Path, args: list[str], after: int, poll_seconds: float) -> None:
    """Runs ``hmmtf curve ARGS --run-dir RUN_DIR`` until it ends or has ``after`` points after its
    escape, then stops it with SIGTERM; raises SystemExit on any other failure."""
    done = points_after_escape(run_dir)
    if done is not None and done >= after:
        print(f"{run_dir}: escaped, {done} point(s) after; skipped", flush=True)
        return
    command = [sys.executable, str(ROOT / "hmmtf.py"), "curve", *args, "--run-dir", str(run_dir)]
    print("$ " + " ".join(command), flush=True)
    process = subprocess.Popen(command)
    while process.poll() is None:
        time.sleep(poll_seconds)
        done = points_after_escape(run_dir)
        if done is not None and done >= after:
            print(f"{run_dir}: escaped, {done} point(s) after; stopping it", flush=True)
            process.send_signal(signal.SIGTERM)
            process.wait()
    if process.returncode not in (0, SIGTERM_EXIT):
        raise SystemExit(f"{run_dir}: hmmtf curve exited with {process.returncode}; the queue stops")


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
