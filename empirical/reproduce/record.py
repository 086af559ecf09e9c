"""The files a reproduction keeps in its folder ``OUT`` beside the stages' outputs.

``record.json``: what ran and what it measured: the settings (a resumed run must match them),
every invocation (command, environment, git commit, rates measured at its start), the plan, and
per stage its attempts (wall time, tokens/s, FLOPs, utilisation of the peak measured in the same
invocation, peak memory).

``progress.json``: where a run is, rewritten at every stage boundary: process id and host, the
stage running, each stage's status, an error if one stopped the run, or the signal that
interrupted it and where (``interrupted``: ``{"signal": "SIGINT", "where": "after stage analyze"}``). ``hmmtf reproduce
--status`` reads it (and, while training runs, the last line of ``train/metrics.jsonl``), so a
detached run can be followed by short calls.

``detached.json``: the process id, host and start time of the last process ``--detach`` started.
Until that process writes its own ``progress.json`` it is planning (measuring the device), and the
``progress.json`` in the folder, if any, is an earlier invocation's: a resumed run's
(:func:`planning_status`).
"""
from __future__ import annotations

import json
import os
import platform
import socket
import time
from pathlib import Path

import numpy as np
import torch

from bounds.serialize import to_json
from empirical.provenance import checkout

RECORD_FILE = "record.json"
PROGRESS_FILE = "progress.json"
LOG_FILE = "reproduce.log"
DETACHED_FILE = "detached.json"
ERROR_PREFIX = "hmmtf reproduce: error: "
"""How ``hmmtf reproduce`` begins the line of a user error that ends it (exit code 2; the format of
:func:`hmmtf.error_line`)."""


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` as strict JSON (a value that is not finite as the string ``float``
    reads back: :func:`bounds.serialize.to_json`) through a temporary file and a rename, so that a
    reader (or a run cut off mid-write) never sees half a file."""
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(json.dumps(to_json(data), indent=2, allow_nan=False) + "\n")
    os.replace(staging, path)


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, None if there is no such file."""
    return json.loads(path.read_text()) if path.is_file() else None


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name and core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
              if line.startswith("model name")] if cpuinfo.is_file() else []
    return f"{models[0] if models else platform.processor() or 'cpu'} ({os.cpu_count()} cores)"


def git_state() -> dict:
    """Commit of the working tree, whether it has uncommitted changes and who said so
    (:func:`empirical.provenance.checkout`: the commit the device machine's copy of the tree
    declares, else git's, else None)."""
    state = checkout()
    return {"commit": state.commit, "uncommitted_changes": state.dirty, "source": state.source}


def environment(device: torch.device) -> dict:
    """Device, library versions, host and threads of this invocation."""
    return {
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def metrics_records(path: Path) -> list[dict]:
    """The records of a training run's JSON-lines log (none before the first)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_status(out: Path) -> dict:
    """``progress.json`` of the run in ``out``, with ``state``: ``finished``, ``failed``,
    ``interrupted`` (by SIGINT or SIGTERM, at a safe point), ``stopped`` (after ``--stop-after``),
    ``running`` or ``gone`` (its process no longer exists on this host), and the last training log
    record while training runs. ``ValueError`` if ``out`` holds no run."""
    progress = read_json(out / PROGRESS_FILE)
    if progress is None:
        raise ValueError(f"--out: {str(out)!r} has no {PROGRESS_FILE}; expected the folder of a started run")
    if progress["finished"]:
        state = "finished"
    elif progress["error"]:
        state = "failed"
    elif progress.get("interrupted"):  # absent from the progress.json of runs before it was recorded
        state = "interrupted"
    elif progress["stopped_after"]:
        state = "stopped"
    elif progress["host"] == socket.gethostname() and not process_alive(progress["pid"]):
        state = "gone"
    else:
        state = "running"
    status = {"state": state, **progress, "seconds_since_update": time.time() - progress["updated"]}
    if progress["stage"] == "train" and state == "running":
        status["train"] = (metrics_records(out / "train" / "metrics.jsonl") or [None])[-1]
    return status


def last_line(path: Path) -> str:
    """The last non-empty line of a log (tqdm's carriage returns split lines too), "" if none."""
    lines = [line for line in path.read_text(errors="replace").replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def planning_status(out: Path) -> dict | None:
    """The process ``--detach`` last started in ``out`` while no run has begun its stages since
    (the ``progress.json`` there, if any, started before it), else None: ``state`` ``planning``,
    ``failed`` (its log ends with an error) or ``gone`` (its process no longer exists on this host),
    with its ``pid``, ``host`` and the last line of its log, ``log``."""
    detached = read_json(out / DETACHED_FILE)
    progress = read_json(out / PROGRESS_FILE)
    if detached is None or (progress is not None and progress["started"] >= detached["started"]):
        return None
    log = last_line(out / LOG_FILE) if (out / LOG_FILE).is_file() else ""
    if log.startswith(ERROR_PREFIX):
        state = "failed"
    elif detached["host"] == socket.gethostname() and not process_alive(detached["pid"]):
        state = "gone"
    else:
        state = "planning"
    return {"state": state, **detached, "log": log}


def status_line(status: dict) -> str:
    """One line: state, stage, its elapsed and planned seconds, and training step and loss."""
    if status["stage"] is None:
        return f"{status['state']}: before the first stage"
    line = f"{status['state']}: stage {status['stage']}"
    if status["state"] == "running":
        line += f" for {time.time() - status['stage_started']:.0f} s (planned {status['planned_s'][status['stage']]:.0f} s)"
    if status.get("train"):
        record = status["train"]
        line += f", step {record['step']}, loss {record['loss']:.4f}, {record['tokens_per_s']:.3g} tokens/s"
    if status["error"]:
        line += f", error: {status['error']}"
    if status.get("interrupted"):
        line += f", interrupted by {status['interrupted']['signal']} {status['interrupted']['where']}"
    return line
