"""Fault injection (issue 53): a trainer killed with SIGKILL at random steps, with and without
``--prefetch``, leaves no process behind and no lock, and its rerun resumes from the last
checkpoint to the weights, the AdamW state and the training log of an uninterrupted run, bit for bit.
The kill steps are drawn by a seeded generator, so a failure names steps that reproduce it."""
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from empirical.training.checkpoint import load_checkpoint
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE
from killed_processes import kill_and_check_no_orphan

HMMTF = str(Path(__file__).resolve().parents[1] / "hmmtf" / "__main__.py")
STEPS = 240
TRAIN = ["train", "--preset", "tiny", "--steps", str(STEPS), "--log-every", "10", "--checkpoint-every", "10",
         "--precision", "fp32", "--threads", "1", "--no-progress"]
"""A run long enough to be killed in mid-training (tiny steps take milliseconds), checkpointed often."""
WAIT_SECONDS = 120


def start(run_dir: Path, extra: list[str]) -> subprocess.Popen:
    """``hmmtf train`` in a session of its own, so that its process group is its own and its helpers'."""
    return subprocess.Popen([sys.executable, HMMTF, *TRAIN, "--run-dir", str(run_dir), *extra],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def logged_step(run_dir: Path) -> int:
    """The last step of the run's training log (0 before its first record)."""
    path = run_dir / METRICS_FILE
    lines = path.read_text().splitlines() if path.is_file() else []
    return json.loads(lines[-1])["step"] if lines and lines[-1].endswith("}") else 0


def kill_at(run_dir: Path, step: int, extra: list[str]) -> None:
    """Start the run, SIGKILL its trainer (not its group) once its log passes ``step``, and check
    that every process of its group is gone within a few seconds."""
    process = start(run_dir, extra)
    deadline = time.monotonic() + WAIT_SECONDS
    while logged_step(run_dir) < step:
        assert process.poll() is None, f"the run ended before step {step}: {process.stderr.read().decode()}"
        assert time.monotonic() < deadline, f"the run did not reach step {step} in {WAIT_SECONDS} s"
        time.sleep(0.02)
    kill_and_check_no_orphan(process, f"at step {step}")


def finish(run_dir: Path, extra: list[str]) -> None:
    process = start(run_dir, extra)
    _, error = process.communicate(timeout=WAIT_SECONDS)
    assert process.returncode == 0, error.decode()


@pytest.mark.long_running
@pytest.mark.parametrize("prefetch", [[], ["--prefetch", "2"]], ids=["own-batches", "prefetch"])
def test_a_trainer_killed_at_random_steps_leaves_nothing_behind_and_resumes_to_the_same_run(tmp_path, prefetch):
    kill_steps = sorted(random.Random(53 + len(prefetch)).sample(range(20, STEPS - 40), 2))
    finish(tmp_path / "straight", prefetch)
    for step in kill_steps:
        kill_at(tmp_path / "killed", step, prefetch)
    finish(tmp_path / "killed", prefetch)  # refused, were the folder still locked
    straight, killed = (load_checkpoint(tmp_path / run / CHECKPOINT_DIR) for run in ("straight", "killed"))
    assert straight.config["step"] == killed.config["step"] == STEPS
    for (name, mine), (_, theirs) in zip(straight.model.state_dict().items(), killed.model.state_dict().items()):
        assert torch.equal(mine, theirs), (name, kill_steps)
    for index, state in straight.optimizer_state["state"].items():
        for key, value in state.items():
            assert torch.equal(value, killed.optimizer_state["state"][index][key]), (index, key, kill_steps)
    logs = [[(record["step"], record["loss"]) for record in map(json.loads, (tmp_path / run / METRICS_FILE).read_text().splitlines())]
            for run in ("straight", "killed")]
    assert logs[0] == logs[1], kill_steps
