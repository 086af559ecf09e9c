"""``hmmtf reproduce --preset NAME``: the paper's experiment in one
command -- mixture, training, evaluation against the Bayes-optimal predictor, analysis, results
bundle -- as resumable stages (:mod:`empirical.reproduce.stages`) after a plan checked against a
time budget (:mod:`empirical.reproduce.plan`).

    hmmtf reproduce --preset paper --device cuda --plan            # the stage table, nothing run
    hmmtf reproduce --preset paper --plan --assume-peak-tflops 790 # planning a device not here
    hmmtf reproduce --preset paper --device cuda --detach          # run in the background
    hmmtf reproduce --preset paper --status [--wait 540]           # follow it
    hmmtf reproduce --preset paper-mini --device cpu --threads 1   # the CPU rehearsal
    hmmtf reproduce --preset paper-cpu --device cpu --threads 1    # the 128-state audit on a laptop
"""
from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from empirical.training.presets import PRESETS
from empirical.reproduce import plan
from empirical.reproduce.config import reproduce_config
from empirical.reproduce.record import (
    DETACHED_FILE,
    LOG_FILE,
    RECORD_FILE,
    planning_status,
    read_json,
    read_status,
    status_line,
    write_json,
)
from empirical.reproduce.stages import STAGE_NAMES, check_settings, done_stages, plan_costs, run_stages
from empirical.training.run_control import interrupted_line, run_folder_lock, stop_on_signals
from hmmtf.options import check_output_folder, positive_float, positive_int

SESSION_DEVICE_MINUTES = 15.0
"""Device time of a session lent a GPU, all its calls together, the machine's start included
(``/work/shared/design/GPU.md``, "What is lent"; ``.library/device/README.md``, "Limits")."""
MACHINE_START_MINUTES = 1.0
"""The lent machine's start, counted in the session's device time: "about 45-60 s"
(``/work/shared/design/GPU.md``, "What is lent")."""
DEFAULT_BUDGET_MINUTES = SESSION_DEVICE_MINUTES - MACHINE_START_MINUTES
"""``--budget-minutes``: the device time the stages to run may take, the session's less the
machine's start."""
BUDGET_MINUTES_BY_PRESET = {"paper-cpu": 120.0}
"""``--budget-minutes`` of the presets that do not run on a lent GPU: ``paper-cpu``, the 128-state
audit on a laptop, against its target of at most 2 hours (issue 65, item 5)."""
DEFAULT_CALL_MINUTES = 10.0
"""``--call-minutes``: the longest run of one device command (``.library/device/README.md``,
"Limits")."""
POLL_SECONDS = 30.0
"""Interval of ``--wait``'s status lines."""
FAILED_STATES = ("failed", "gone")
"""States of ``read_status`` and ``planning_status`` that end ``--status`` and ``--wait`` with exit
code 1."""


def default_out(preset: str) -> Path:
    """``runs/reproduce/PRESET``."""
    return Path("runs") / "reproduce" / preset


def show_status(out: Path) -> int:
    """``--status``: print the run's status as JSON (a detached process's while it plans:
    :func:`planning_status`); exit code 1 if it failed or its process is gone, else 0."""
    status = planning_status(out) or read_status(out)
    print(json.dumps(status, indent=2, allow_nan=False))
    return 1 if status["state"] in FAILED_STATES else 0


def wait_for(out: Path, seconds: float) -> int:
    """``--wait SECONDS``: a status line every :data:`POLL_SECONDS` until the run ends or the
    seconds pass. While a detached process plans (measures the device; before it writes its own
    ``progress.json``) the line is the last of its log. Exit code 1 once it failed or its process
    is gone, else 0."""
    deadline = time.time() + seconds
    while True:
        planning = planning_status(out)
        status = planning or read_status(out)
        print(f"planning: {planning['log']}" if planning else status_line(status), flush=True)
        if status["state"] in FAILED_STATES:
            return 1
        if status["state"] not in ("running", "planning"):
            return 0
        if time.time() >= deadline:
            return 0
        time.sleep(min(POLL_SECONDS, max(deadline - time.time(), 0.0)))


def detach(command_line: str, preset: str, out: Path) -> int:
    """Start this command again without ``--detach`` in a new session (it outlives the calling
    shell), its output in ``OUT/reproduce.log``; print how to follow it."""
    arguments = [word for word in shlex.split(command_line)[1:] if word != "--detach"]
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(out / LOG_FILE, "ab") as log:
        child = subprocess.Popen([sys.executable, "-m", "hmmtf", *arguments], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    write_json(out / DETACHED_FILE, {"pid": child.pid, "host": socket.gethostname(), "started": started})
    print(f"started process {child.pid}, log {out / LOG_FILE}; follow it with: hmmtf reproduce --preset {preset} "
          f"--out {out} --wait 540")
    return 0


def rates_for(args, config) -> plan.Rates:
    """Assumed rates when ``--assume-peak-tflops`` is given (the other ``--assume-*`` default to
    :data:`plan.H100_ASSUMPTIONS`; the device defaults to CUDA), else measured on the device now."""
    if args.assume_peak_tflops is None:
        return plan.measure_rates(config.device, config.train_dtype)
    return plan.assumed_rates(args.assume_peak_tflops, args.assume_float32_tflops, args.assume_float64_tflops,
                              args.assume_bandwidth_tbs)


def summary(record: dict) -> str:
    """Planned and measured seconds of every stage run so far (the last attempt of each)."""
    lines = [f"{'stage':<9} {'planned s':>10} {'measured s':>10}  notes"]
    for name, entry in record["stages"].items():
        attempt = entry["attempts"][-1]
        notes = ", ".join(f"{key} {attempt[key]:.3g}" for key in ("tokens_per_s", "steady_mfu") if attempt.get(key))
        if "utilisation" in attempt:
            notes += " utilisation " + ", ".join(f"{dtype} {value:.2f}" for dtype, value in attempt["utilisation"].items())
        lines.append(f"{name:<9} {attempt.get('planned_s', float('nan')):>10.1f} {attempt['wall_s']:>10.1f}  "
                     f"{entry['status']}{'; ' + notes if notes else ''}")
    return "\n".join(lines)


def reproduce(args) -> int:
    """``hmmtf reproduce``: status, wait, detach, plan or run. A bad argument, a budget too short or
    another run's folder raises ``ValueError``, which :func:`hmmtf.main` prints as one line.
    SIGINT or SIGTERM stops a run at a safe point (:mod:`empirical.reproduce.stages`) with one line
    saying where, and exit code 130 or 143 (:mod:`empirical.training.run_control`)."""
    out = Path(args.out) if args.out else default_out(args.preset)
    if args.status:
        return show_status(out)
    if args.wait is not None:
        return wait_for(out, args.wait)
    assumed = args.assume_peak_tflops is not None
    if assumed and not args.plan:
        raise ValueError(f"--assume-peak-tflops: {args.assume_peak_tflops:g} without --plan; expected it only with "
                         f"--plan (a run measures the peak of the device it runs on)")
    config = reproduce_config(args.preset, args.device, compile_model=args.compile, cpu_bf16=args.cpu_bf16,
                              planning_only=assumed)
    budget_minutes = args.budget_minutes
    if budget_minutes is None:
        budget_minutes = BUDGET_MINUTES_BY_PRESET.get(config.preset.name, DEFAULT_BUDGET_MINUTES)
    budget = plan.Budget(budget_minutes, args.call_minutes)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if not args.plan:
        check_output_folder(out)
    if args.detach:
        return detach(args.command_line, config.preset.name, out)
    record = read_json(out / RECORD_FILE)
    if record is not None:
        check_settings(record, config, out)
    with stop_on_signals() as stop:
        rates = rates_for(args, config)
        host = plan.measure_host(config)
        costs = plan_costs(config, rates, host)
        done = done_stages(record)
        title = (f"plan: preset {config.preset.name} on {config.device} (training in {config.train_dtype}), "
                 f"run folder {out}")
        print(plan.format_plan(costs, rates, done, args.stop_after, budget, title), flush=True)
        if args.plan:
            try:
                plan.check_budget(plan.stages_to_run(costs, done, args.stop_after), budget)
                print("within the budget")
            except ValueError as error:
                print(f"over the budget: {error}")
            return stop.exit_code if stop() else 0
        plan.check_budget(plan.stages_to_run(costs, done, args.stop_after), budget)  # before the lock makes --out
        with run_folder_lock(out, "--out"):  # a second run of the same folder is refused, naming the first
            record, stopped = run_stages(config, out, args.command_line, rates, host, budget, args.stop_after, stop)
    print(summary(record))
    if stopped is None:
        return 0
    print(interrupted_line("hmmtf reproduce", stop.signal.name, stopped), file=sys.stderr)
    return stop.exit_code


def register(subparsers) -> None:
    """Add ``reproduce`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "reproduce", help="the paper's experiment in one command: mixture, training, evaluation vs Bayes-optimal, "
                          "analysis, results bundle (resumable stages, planned against a time budget)",
        description="The paper's experiment in one command, as resumable stages planned against a time budget "
                    "(docs/reproduce.md). SIGINT or SIGTERM stops training at the next step with a checkpoint and "
                    "any other stage at its end (exit code 130 or 143); the same command resumes it.")
    parser.add_argument("--preset", required=True, help=f"one of {sorted(PRESETS)}")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--out", help="run folder (default runs/reproduce/PRESET); running again resumes it")
    parser.add_argument("--budget-minutes", type=positive_float,
                        help=f"device time of the session (a lent GPU's 15 minutes less its start): refuse to start "
                             f"when the stages to run are planned longer (default: {DEFAULT_BUDGET_MINUTES:g}; "
                             f"{', '.join(f'{name} {minutes:g}' for name, minutes in BUDGET_MINUTES_BY_PRESET.items())})")
    parser.add_argument("--call-minutes", type=positive_float, default=DEFAULT_CALL_MINUTES,
                        help="device time of one call (one command on the lent GPU): the plan says how the stages "
                             "to run split into calls (default: %(default)s)")
    parser.add_argument("--plan", action="store_true", help="print the stage table and stop")
    parser.add_argument("--assume-peak-tflops", type=positive_float,
                        help="with --plan: plan for a device not here (default --device cuda) with this matmul peak "
                             "(TFLOP/s, training dtype) instead of measuring")
    for name, unit in (("float32_tflops", "TFLOP/s"), ("float64_tflops", "TFLOP/s"), ("bandwidth_tbs", "TB/s")):
        parser.add_argument(f"--assume-{name.replace('_', '-')}", type=positive_float, default=plan.H100_ASSUMPTIONS[name],
                            help=f"with --assume-peak-tflops ({unit}; default: %(default)s, an H100)")
    parser.add_argument("--stop-after", choices=STAGE_NAMES,
                        help="stop after this stage (a later run resumes); the budget counts the stages up to it")
    parser.add_argument("--status", action="store_true", help="print the run's progress and exit")
    parser.add_argument("--wait", type=positive_float, metavar="SECONDS",
                        help="print a status line every %g s until the run ends or SECONDS pass" % POLL_SECONDS)
    parser.add_argument("--detach", action="store_true", help="run in a new session in the background (log in OUT)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model whatever the preset says")
    parser.add_argument("--cpu-bf16", action="store_true",
                        help="bf16 autocast on the CPU too (precision bf16-cpu): rehearses the CUDA run's dtypes")
    parser.add_argument("--threads", type=positive_int,
                        help="torch CPU threads (1 is fastest on a shared 2-core machine)")
    parser.set_defaults(run=reproduce)
