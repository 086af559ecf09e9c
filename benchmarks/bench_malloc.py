"""What glibc's malloc tunables for training (:mod:`empirical.training.allocator`) change in one training
process: page faults, kernel and user CPU time and wall time per step, under glibc's defaults and
tuned, in alternating fresh processes.

    python benchmarks/bench_malloc.py --pairs 3 --out figures/benchmarks/malloc.json

Each pair runs today's path (one process, one thread, :func:`empirical.measurement.throughput.training_step` on
the preset's shape, default the ladder's 4 x 4 x 64) once under the bench's environment and once
with :func:`~empirical.training.allocator.with_training_tunables`, one process after the other, each spawned
fresh (glibc reads its tunables only at a process's start). After ``--warmup`` steps a process
reads ``getrusage`` around ``--steps`` steps::

    faults/step = minor page faults / steps      kernel ms/step = system CPU time / steps
    user ms/step = user CPU time / steps          wall ms/step = perf_counter time / steps

The JSON gives every process's four numbers, their medians per setting, and the tuned wall time
over the defaults' paired within pairs (:func:`~empirical.measurement.throughput.ratio_summary`, so a ratio
below 1 is faster). CPU time is charged to the process that spends it, so the kernel time is
not moved by other tenants of the machine the way the wall time is.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from empirical.training.allocator import TUNABLES_VARIABLE, with_training_tunables  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.measurement.roofline import host  # noqa: E402
from empirical.measurement.throughput import ratio_summary, run_together, training_step  # noqa: E402
from hmmtf import USER_ERROR_EXIT_CODE, Parser, UsageError, error_line, source_commit  # noqa: E402
from hmmtf.options import non_negative_int, positive_float, positive_int  # noqa: E402

PROG = "bench_malloc.py"
PRESET = "tasks-8192-small"
"""The default shape: the ladder's 4 x 4 x 64, the throughput comparison's."""
SETTINGS = ("defaults", "tuned")
METRICS = ("faults_per_step", "kernel_ms_per_step", "user_ms_per_step", "wall_ms_per_step")


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default=PRESET, help=f"default: {PRESET}")
    parser.add_argument("--pairs", type=positive_int, default=3, help="processes per setting, alternating")
    parser.add_argument("--steps", type=positive_int, default=60, help="steps read by getrusage")
    parser.add_argument("--warmup", type=non_negative_int, default=5, help="steps before them")
    parser.add_argument("--timeout", type=positive_float, default=600.0, help="seconds one process may take")
    parser.add_argument("--out", help="also write the JSON result here")
    return parser


def step_costs(index: int, barrier, preset_name: str, steps: int, warmup: int) -> dict:
    """A spawned worker: :data:`METRICS` of ``steps`` training steps of today's path after
    ``warmup`` steps, and the ``GLIBC_TUNABLES`` the process started with."""
    torch.set_num_threads(1)
    preset = get_preset(preset_name)
    _, step, _ = training_step(preset, preset.train.batch_size, torch.device("cpu"))
    for _ in range(warmup):
        step()
    barrier.wait()
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(steps):
        step()
    seconds, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    return {"glibc_tunables": os.environ.get(TUNABLES_VARIABLE),
            "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
            "kernel_ms_per_step": 1e3 * (after.ru_stime - before.ru_stime) / steps,
            "user_ms_per_step": 1e3 * (after.ru_utime - before.ru_utime) / steps,
            "wall_ms_per_step": 1e3 * seconds / steps}


def measure(args) -> dict:
    """The pairs, each setting's medians and the paired wall-time ratio, tuned over defaults
    (module docstring); ``error`` for a process that failed, and no summary then."""
    environments = {"defaults": dict(os.environ), "tuned": with_training_tunables(os.environ)}
    pairs = [{setting: run_together(step_costs, [(args.preset, args.steps, args.warmup)], args.timeout,
                                    environments[setting])[0] for setting in SETTINGS}
             for _ in range(args.pairs)]
    result = {"pairs": pairs}
    failed = [process["error"] for pair in pairs for process in pair.values() if "error" in process]
    if failed:
        return {**result, "error": failed[0]}
    medians = {setting: {metric: float(np.median([pair[setting][metric] for pair in pairs])) for metric in METRICS}
               for setting in SETTINGS}
    wall = ratio_summary([pair["tuned"]["wall_ms_per_step"] for pair in pairs],
                         [pair["defaults"]["wall_ms_per_step"] for pair in pairs])
    return {**result, "medians": medians, "tuned_over_defaults_wall": wall}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = ["python", Path(__file__).resolve().relative_to(ROOT).as_posix(), *argv]
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        print(error_line(error.prog, str(error)), file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    load_average = os.getloadavg()[0]
    result = {"command": command, "git_commit": source_commit(), "host": host(), "torch": torch.__version__,
              "load_average_at_start": load_average, "preset": args.preset, "steps": args.steps,
              "warmup": args.warmup, "tuned_tunables": with_training_tunables(os.environ)[TUNABLES_VARIABLE],
              **measure(args)}
    text = json.dumps(result, indent=2, allow_nan=False)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
