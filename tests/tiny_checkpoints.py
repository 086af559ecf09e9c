"""The command-line tests of the commands that measure one checkpoint (``hmmtf heads``, ``hmmtf
beliefs``, ``hmmtf klmap``: :func:`hmmtf.commands.analyze.add_measure_command`): a tiny checkpoint, one run that writes
its report, and bad options refused in one line."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import torch

import hmmtf
from empirical.training.checkpoint import save_checkpoint
from empirical.training.model import RoFormer
from empirical.training.presets import get_preset


def tiny_checkpoint(folder) -> None:
    """A freshly initialised RoFormer of the tiny preset, saved with the preset's task: the
    command reads no more than that from a checkpoint."""
    preset = get_preset("tiny")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = RoFormer(preset.model_config(preset.mixture_spec.num_tokens))
    save_checkpoint(folder, model, None, {"step": 0, "task": preset.task(), "train": {}})


def command_report(command: str, folder: Path, capsys, options: list[str]) -> tuple[dict, dict]:
    """``hmmtf COMMAND`` with ``options`` on a :func:`tiny_checkpoint` in ``folder``, written to
    ``folder / COMMAND``: ``(what it printed, its COMMAND.json)``, once it is checked that the run
    succeeded and that the report records the command line and the git commit."""
    tiny_checkpoint(folder / "checkpoint")
    argv = [command, str(folder / "checkpoint"), "--out", str(folder / command), *options]
    assert hmmtf.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    report = json.loads((folder / command / f"{command}.json").read_text())
    assert report["command"] == shlex.join(["hmmtf", *argv]) and "git_commit" in report
    return printed, report


def assert_refused_in_one_line(command: str, folder: Path, capsys, cases: list[tuple[list[str], str]]) -> None:
    """Each ``(options, message)`` of ``cases`` ends ``hmmtf COMMAND`` on a :func:`tiny_checkpoint`
    with exit code 2 and one line on stderr, ``hmmtf COMMAND: error: `` then ``message``; so does a
    missing checkpoint, naming it; and no output folder is made."""
    tiny_checkpoint(folder / "checkpoint")
    for options, message in cases:
        assert hmmtf.main([command, str(folder / "checkpoint"), "--out", str(folder / "out"), *options]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"hmmtf {command}: error: {message}"), line
    missing = folder / "missing"
    assert hmmtf.main([command, str(missing), "--out", str(folder / "out")]) == 2
    assert f"checkpoint: {str(missing)!r} does not exist" in capsys.readouterr().err
    assert not (folder / "out").exists()
