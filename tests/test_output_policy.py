"""One output policy for the commands that write results (issue 53): a default folder unique to the
input and outside the tracked tree; a folder holding another input's results refused, naming it,
unless ``--overwrite``; and the folder locked while a command writes to it, the refusal naming the
option the user passed."""
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import hmmtf
from empirical.training.run_control import run_folder_lock
from empirical.training.result_files import ResultFiles
from hmmtf.options import RESULTS_ROOT, check_results_owner, check_study_owner, default_results_folder

QUICK_EVALUATION = ["--num-prompts", "4", "--hand-built-prompts", "0", "--fresh-tasks", "0", "--ceiling-particles", "0"]
"""``hmmtf evaluate`` without its long sections: what the policy is tested on takes seconds."""


def test_the_default_folder_is_the_inputs_path_under_runs_and_a_checkpoint_folder_names_its_run(tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "a").mkdir(parents=True)
    assert default_results_folder("evaluate", "models/a") == RESULTS_ROOT / "evaluate" / "models" / "a"
    assert default_results_folder("evaluate", "runs/r/checkpoint") == RESULTS_ROOT / "evaluate" / "runs" / "r"
    assert default_results_folder("analysis", "models/a") != default_results_folder("analysis", "models/b")
    outside = Path("/opt/elsewhere/model")
    assert default_results_folder("evaluate", outside) == RESULTS_ROOT / "evaluate" / "_absolute" / "opt/elsewhere/model"
    assert RESULTS_ROOT.as_posix() + "/" in (Path(__file__).parents[1] / ".gitignore").read_text()


EVALUATION = ResultFiles(("evaluation.json",), ("in_context.png",))
PLATEAU = ResultFiles(("plateau.json",), ("plateau.png",))
COMMAND = "hmmtf evaluate a"


def test_a_folder_with_another_inputs_results_is_refused_and_its_own_or_overwrite_is_not(tmp_path):
    (tmp_path / "out").mkdir()
    check_results_owner(tmp_path / "out", tmp_path / "a", EVALUATION, overwrite=False, command_line=COMMAND)  # empty
    (tmp_path / "out" / "evaluation.json").write_text(json.dumps({"checkpoint": str(tmp_path / "a")}))
    check_results_owner(tmp_path / "out", tmp_path / "a", EVALUATION, overwrite=False, command_line=COMMAND)  # its own
    with pytest.raises(ValueError, match=re.escape(f"--out: '{tmp_path / 'out'}' holds evaluation.json with the results "
                                                   f"of '{tmp_path / 'a'}', not of '{tmp_path / 'b'}'; expected an "
                                                   f"empty folder or this input's, or --overwrite")):
        check_results_owner(tmp_path / "out", tmp_path / "b", EVALUATION, overwrite=False, command_line=COMMAND)
    check_results_owner(tmp_path / "out", tmp_path / "b", EVALUATION, overwrite=True, command_line=COMMAND)
    (tmp_path / "out" / "evaluation.json").write_text("{}")
    with pytest.raises(ValueError, match="holds evaluation.json with no input it names"):
        check_results_owner(tmp_path / "out", tmp_path / "a", EVALUATION, overwrite=False, command_line=COMMAND)


def error_of(argv: list[str], capsys) -> str:
    assert hmmtf.main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error


def test_evaluate_writes_each_model_to_its_own_default_folder_and_refuses_to_overwrite_another(
        tiny_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("first", "second"):
        shutil.copytree(tiny_run / "checkpoint", tmp_path / "models" / name)
        assert hmmtf.main(["evaluate", f"models/{name}", *QUICK_EVALUATION]) == 0
    capsys.readouterr()
    first, second = (tmp_path / "runs" / "evaluate" / "models" / name / "evaluation.json" for name in ("first", "second"))
    assert json.loads(first.read_text())["checkpoint"] == "models/first"
    assert json.loads(second.read_text())["checkpoint"] == "models/second"
    assert not (tmp_path / "models" / "evaluation").exists()
    error = error_of(["evaluate", "models/second", "--out", str(first.parent), *QUICK_EVALUATION], capsys)
    assert "hmmtf evaluate: error: --out: " in error and "with the results of 'models/first'" in error
    assert json.loads(first.read_text())["checkpoint"] == "models/first"
    assert hmmtf.main(["evaluate", "models/second", "--out", str(first.parent), "--overwrite", *QUICK_EVALUATION]) == 0
    assert json.loads(first.read_text())["checkpoint"] == "models/second"


@pytest.mark.parametrize("command", [
    ["evaluate", *QUICK_EVALUATION],
    ["ngram-verdict", "--prompts", "4", "--fresh-tasks", "4"],
])
def test_a_command_writing_into_a_locked_folder_is_refused_naming_its_option(tiny_run, tmp_path, capsys, command):
    out = tmp_path / "out"
    with run_folder_lock(out):
        error = error_of([command[0], str(tiny_run), "--out", str(out), *command[1:]], capsys)
    assert f"--out: '{out}' is locked by process {os.getpid()} (an hmmtf command writing to it" in error
    assert sorted(path.name for path in out.iterdir()) == ["train.lock"]


def test_an_export_into_another_checkpoints_export_is_refused(tiny_run, tmp_path, capsys):
    out = tmp_path / "lens"
    assert hmmtf.main(["export", str(tiny_run), "--to", "transformer-lens", str(out)]) == 0
    shutil.copytree(tiny_run / "checkpoint", tmp_path / "other")
    capsys.readouterr()
    error = error_of(["export", str(tmp_path / "other"), "--to", "transformer-lens", str(out)], capsys)
    assert f"holds config.json with the results of '{tiny_run / 'checkpoint'}'" in error
    assert hmmtf.main(["export", str(tmp_path / "other"), "--to", "transformer-lens", str(out), "--overwrite"]) == 0


def test_a_second_reproduction_of_a_folder_is_refused_naming_its_out_and_the_first(tmp_path, capsys):
    """``hmmtf reproduce`` holds its ``--out`` while it runs (a second one started after training
    reran the analysis over the first's files); the refusal names ``--out``, not the training's
    run folder inside it."""
    out = tmp_path / "run"
    with run_folder_lock(out):
        assert hmmtf.main(["reproduce", "--preset", "paper-mini", "--out", str(out), "--threads", "1"]) == 2
    error = capsys.readouterr().err
    assert error.splitlines()[-1].startswith(f"hmmtf reproduce: error: --out: '{out}' is locked by process "
                                             f"{os.getpid()}"), error
    assert sorted(path.name for path in out.iterdir()) == ["train.lock"]


def test_a_study_folder_holding_another_command_lines_results_is_refused_and_its_own_or_overwrite_is_not(tmp_path):
    """A study's input is its command line: the same one again (``--overwrite`` aside) replaces its
    own results; another, or a result naming none, is refused unless ``--overwrite``."""
    out = tmp_path / "out"
    out.mkdir()
    mine = "hmmtf plateau --arm plain runs/a --baseline plain"
    check_study_owner(out, mine, PLATEAU, overwrite=False)  # empty
    (out / "plateau.json").write_text(json.dumps({"command": mine}))
    check_study_owner(out, mine + " --overwrite", PLATEAU, overwrite=False)  # its own
    other = "hmmtf plateau --arm plain runs/a runs/b --baseline plain"
    with pytest.raises(ValueError, match=re.escape(f"--out: '{out}' holds plateau.json with the results of {mine!r}, not "
                                                   f"of this command line; expected an empty folder or this command's, "
                                                   f"or --overwrite to replace them")):
        check_study_owner(out, other, PLATEAU, overwrite=False)
    check_study_owner(out, other, PLATEAU, overwrite=True)
    (out / "plateau.json").write_text("[]")
    with pytest.raises(ValueError, match="holds plateau.json with no command it names"):
        check_study_owner(out, mine, PLATEAU, overwrite=False)


STUDY_COMMANDS = {
    "plateau": (["plateau", "--arm", "plain", "RUN", "--baseline", "plain"], "plateau.json"),
    "curves": (["curves", "RUN", "--title", "t"], "curves.json"),
    "ladder": (["ladder", "ROOT"], "ladder.json"),
    "signal": (["signal", "--num-prompts", "1"], "signal.json"),
    "family-calibration": (["family-calibration", "--num-prompts", "1"], "family_calibration.json"),
    "calibrate": (["calibrate", "--preset", "tiny"], "tiny.json"),
    "markov-sweep": (["markov-sweep"], "results.json"),
    "markov-incontext": (["markov-incontext", "--runs", "ROOT"], "results.json"),
    "main": (["main"], "report.json"),
}
"""Every study command that writes into ``--out``, with the words that make it run (``RUN``: a run
folder of ``hmmtf curve``; ``ROOT``: a folder) and the result it records its command line in."""


@pytest.mark.parametrize("name", sorted(STUDY_COMMANDS))
def test_every_study_refuses_another_command_lines_results_and_a_locked_folder_before_it_computes(
        name, tmp_path, capsys):
    """Both refusals come before the study computes anything (so they take no time here) and leave the
    folder's files as they were."""
    words, result = STUDY_COMMANDS[name]
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    for name in ("checkpoint/config.json", "curve_baselines.json"):  # what a study checks a curve run holds
        (run / name).write_text("{}")
    argv = [str(run) if word == "RUN" else str(tmp_path) if word == "ROOT" else word for word in words]
    out = tmp_path / "out"
    out.mkdir()
    (out / result).write_text(json.dumps({"command": "hmmtf another study"}))
    error = error_of([*argv, "--out", str(out)], capsys)
    assert f"--out: '{out}' holds {result} with the results of 'hmmtf another study'" in error
    assert "or --overwrite to replace them" in error
    assert json.loads((out / result).read_text()) == {"command": "hmmtf another study"}
    (out / result).unlink()
    with run_folder_lock(out):
        error = error_of([*argv, "--out", str(out)], capsys)
    assert f"--out: '{out}' is locked by process {os.getpid()}" in error
    assert sorted(path.name for path in out.iterdir()) == ["train.lock"]
