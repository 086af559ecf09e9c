"""Comparing two training run folders (``checkpoint/`` and ``metrics.jsonl`` of
:func:`empirical.training.train.train`): the tests of a run stopped and resumed against an uninterrupted one."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from empirical.training.checkpoint import load_checkpoint
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE

LOGGED = ("step", "loss", "tokens", "lr", "grad_norm")
"""The fields of a log record that a resumed run must repeat (the others are timings)."""


def assert_same_runs(first: Path, second: Path) -> None:
    """The two run folders hold the same weights and AdamW state, bit for bit, and the same log
    (every field but the timings)."""
    first_saved, second_saved = (load_checkpoint(run / CHECKPOINT_DIR) for run in (first, second))
    assert first_saved.config["step"] == second_saved.config["step"]
    for name, value in first_saved.model.state_dict().items():
        assert torch.equal(value, second_saved.model.state_dict()[name]), name
    assert first_saved.optimizer_state["state"].keys() == second_saved.optimizer_state["state"].keys()
    for index, state in first_saved.optimizer_state["state"].items():
        for key, value in state.items():
            assert torch.equal(value, second_saved.optimizer_state["state"][index][key]), (index, key)
    logs = [[[json.loads(line)[key] for key in LOGGED] for line in (run / METRICS_FILE).read_text().splitlines()]
            for run in (first, second)]
    assert logs[0] == logs[1]
