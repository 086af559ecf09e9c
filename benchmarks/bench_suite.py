"""The test suite's time against the machine's bound: where its CPU goes, and what a wall-time
target needs.

    python benchmarks/bench_suite.py -- -m "not long_running"   # make test's suite: -n 2 --dist loadgroup
    python benchmarks/bench_suite.py                             # make test-all's: both tiers
    python benchmarks/bench_suite.py --baseline --json /tmp/suite.json   # and one process, for the ratio

Runs pytest in a subprocess with the :mod:`suite_accounting` plugin and measures

* its wall time and the CPU of its process tree (``getrusage(RUSAGE_CHILDREN)`` around the run:
  pytest, its workers and every child they waited for);
* the two lower bounds on the wall time of ``W`` workers on ``C`` cores: the CPU bound
  ``cpu / min(W, C)`` (perfect packing), and the group bound, the summed wall time of the
  largest ``xdist_group`` (its tests run one after another on one worker). The CPU bound holds
  for processes that compute on one thread at a time, as the suite's tests do (one torch thread,
  tests/conftest.py); a process that runs threads in parallel can beat it;
* efficiency = bound / wall (1: nothing left to gain by scheduling);
* for ``--target-s T``: the CPU seconds to cut before the CPU bound allows ``T``,
  ``cpu - T min(W, C)`` (necessary, not sufficient: the group bound must fall too);
* where the CPU goes: collection (each process's start and imports), the tests marked
  ``long_running`` (the pipelines end to end), the rest, and what no test accounts for (the
  controller, the processes' exits); the tests that take most.

With ``--baseline`` the same suite runs again in one process (``-p no:xdist``, the only setting
of that baseline) and the ratio of the two wall times is printed. A detached process that no
test waits for is missed by both CPU measures (:mod:`suite_accounting`). Arguments after ``--``
go to pytest (a folder, ``-m``, ``-k``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hmmtf import source_commit  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))

import suite_accounting  # noqa: E402


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform says, else the count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def run_suite(pytest_args: list[str], workers: int | None) -> tuple[float, float, int, list[dict]]:
    """``(wall s, process-tree CPU s, pytest's exit code, per-process records)`` of one pytest run:
    ``workers`` xdist workers with ``--dist loadgroup``, or one process when None."""
    distribution = ["-n", str(workers), "--dist", "loadgroup"] if workers else ["-p", "no:xdist"]
    with tempfile.TemporaryDirectory(prefix="suite-accounting-") as directory:
        environment = {**os.environ, suite_accounting.DIRECTORY_VARIABLE: directory,
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "suite_accounting", "-p", "no:cacheprovider",
                   *distribution, *pytest_args]
        (_, cpu_before), started = suite_accounting.cpu_seconds(), time.perf_counter()
        finished = subprocess.run(command, cwd=BENCHMARKS.parent, env=environment)
        wall, cpu = time.perf_counter() - started, suite_accounting.cpu_seconds()[1] - cpu_before
        records = [json.loads(path.read_text()) for path in sorted(Path(directory).glob("*.json"))]
    return wall, cpu, finished.returncode, records


def summarise(records: list[dict], wall_s: float, cpu_s: float, parallelism: int, target_s: float,
              top: int) -> dict:
    """The bounds, the efficiency, the CPU to cut for ``target_s`` and the CPU breakdown of one
    run (module docstring), from the records of :mod:`suite_accounting`."""
    tests = [test for record in records for test in record["tests"]]
    test_cpu = {test["nodeid"]: test["cpu_s"] + test["children_cpu_s"] for test in tests}
    group_walls: dict[str, float] = defaultdict(float)
    for test in tests:
        if test["group"] is not None:
            group_walls[test["group"]] += test["wall_s"]
    largest_group = max(group_walls.items(), key=lambda item: item[1], default=(None, 0.0))
    collection = sum(record["collection_cpu_s"] for record in records)
    long_running = sum(test_cpu[test["nodeid"]] for test in tests if test["long_running"])
    cpu_bound = cpu_s / parallelism
    bound = max(cpu_bound, largest_group[1])
    return {
        "wall_s": wall_s, "cpu_s": cpu_s, "parallelism": parallelism, "tests": len(tests),
        "cpu_bound_s": cpu_bound, "largest_group": {"name": largest_group[0], "wall_s": largest_group[1]},
        "bound_s": bound, "efficiency": bound / wall_s,
        "target_s": target_s, "cpu_to_cut_for_target_s": max(cpu_s - target_s * parallelism, 0.0),
        "cpu_breakdown_s": {"collection": collection, "long_running_tests": long_running,
                            "other_tests": sum(test_cpu.values()) - long_running,
                            "unaccounted": cpu_s - collection - sum(test_cpu.values())},
        "most_cpu": sorted(({"nodeid": nodeid, "cpu_s": cpu} for nodeid, cpu in test_cpu.items()),
                           key=lambda row: -row["cpu_s"])[:top],
    }


def print_summary(title: str, summary: dict) -> None:
    print(f"\n{title}: {summary['tests']} tests, wall {summary['wall_s']:.1f} s, CPU {summary['cpu_s']:.1f} s "
          f"on {summary['parallelism']} parallel processes")
    group = summary["largest_group"]
    group_text = f"largest group {group['name']} {group['wall_s']:.1f} s" if group["name"] else "no xdist group"
    print(f"  bound {summary['bound_s']:.1f} s = max(CPU / {summary['parallelism']} = {summary['cpu_bound_s']:.1f} s, "
          f"{group_text}); efficiency {summary['efficiency']:.2f}")
    print(f"  target {summary['target_s']:g} s: cut {summary['cpu_to_cut_for_target_s']:.1f} s of CPU before the "
          f"CPU bound allows it")
    print("  CPU: " + ", ".join(f"{name.replace('_', ' ')} {seconds:.1f} s"
                                for name, seconds in summary["cpu_breakdown_s"].items()))
    for row in summary["most_cpu"]:
        print(f"  {row['cpu_s']:6.1f} s  {row['nodeid']}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (make test: 2)")
    parser.add_argument("--baseline", action="store_true", help="also run in one process and print the ratio")
    parser.add_argument("--target-s", type=float, default=60.0, help="the wall-time target (default: %(default)s)")
    parser.add_argument("--top", type=int, default=15, help="tests listed by CPU (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="write the summaries and every test's row here")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.workers < 1:
        parser.error(f"--workers: {args.workers}; expected at least 1")
    cores = usable_cores()
    settings = {"xdist": (args.workers, min(args.workers, cores))}
    if args.baseline:
        settings["single_process"] = (None, 1)
    runs, failed = {}, False
    for name, (workers, parallelism) in settings.items():
        wall, cpu, code, records = run_suite(pytest_args, workers)
        failed |= code != 0
        runs[name] = {**summarise(records, wall, cpu, parallelism, args.target_s, args.top), "exit_code": code,
                      "rows": [test for record in records for test in record["tests"]]}
    print(f"\nmachine: {platform.processor() or platform.machine()}, {cores} usable cores")
    for name, summary in runs.items():
        print_summary(name, summary)
    if args.baseline:
        ratio = runs["single_process"]["wall_s"] / runs["xdist"]["wall_s"]
        print(f"\none process / {args.workers} workers: {ratio:.2f}x (at most {min(args.workers, cores)}x on {cores} cores)")
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python benchmarks/bench_suite.py " + shlex.join(argv), "git_commit": source_commit(),
            "machine": {"platform": platform.platform(), "usable_cores": cores, "python": platform.python_version()},
            "runs": runs}, indent=1, allow_nan=False))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
