"""User errors on the command line (hmmtf/__init__.py's docstring, the README's "Errors"): one line on
stderr, ``hmmtf COMMAND: error: ...``, naming the argument or file, the value and what was
expected, and exit code 2; a traceback only for a bug, or with ``--debug``. Counts, thread numbers
and seeds are refused out of range before a command starts, never replaced by a default."""
import argparse
import dataclasses
import importlib
import json
import os
import re
import shlex
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

import hmmtf
from empirical.analysis.report import AnalysisConfig
from empirical.training.checkpoint import CONFIG_FILE, MODEL_FILE, save_checkpoint
from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.incontext import InContextConfig
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.overrides import SECTIONS
from empirical.training.runs import CHECKPOINT_EXPECTED
from hmmtf.options import (check_output_folder, config_from_command_line, device, non_negative_int, output_folder,
                           positive_float, positive_int)
from ledger.results import RESULTS

CHECKED_TYPES = (positive_int, non_negative_int, positive_float)


def checked(option_type) -> bool:
    """Whether ``option_type`` refuses values out of range: one of :data:`CHECKED_TYPES`, or an
    ``integer_at_least(N)`` of another minimum (``ngram-verdict --fresh-tasks``, at least 2)."""
    return option_type in CHECKED_TYPES or hasattr(option_type, "minimum")


CONFIG_OPTIONS = {"analyze": AnalysisConfig, "markov-sweep": MarkovSweepConfig, "markov-incontext": InContextConfig}
"""Commands whose options are the fields of a config, which validates them when it is built."""
CHECKED_WHERE_USED = {"max_distance", "max_offset", "data_seed"}
"""Config fields not validated when the config is built: the first two against the checkpoint's
prompt format once it is loaded, the Markov sweep's data seed (a seed, not a count) never."""
COMMANDS = list(hmmtf.SUBCOMMAND_MODULES)
TRAIN_OVERRIDES = {f"{section}.{field}" for section, fields in SECTIONS.items() for field in fields}
"""``hmmtf train``'s and ``hmmtf curve``'s override options (their ``dest``), validated when the run is resolved
(:func:`empirical.training.overrides.resolve`; tests/test_empirical_train_command.py)."""


def error_line(capsys, command: str) -> str:
    """The one line a user error printed, which must start with ``hmmtf COMMAND: error: ``."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"hmmtf {command}: error: "), lines[0]
    return lines[0]


def options(command: str) -> list[argparse.Action]:
    """The options (not positionals) of ``command`` that take a typed value."""
    parser = hmmtf.build_parser(command)
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return [action for action in subparsers.choices[command]._actions
            if action.option_strings and action.type not in (None, str)]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_numeric_option_has_a_checked_type_or_is_a_validated_config_field(command):
    unchecked = [action.dest for action in options(command)
                 if not checked(action.type) and action.type not in (output_folder, device)]
    fields = {field.name for field in dataclasses.fields(CONFIG_OPTIONS[command])} if command in CONFIG_OPTIONS else set()
    fields |= TRAIN_OVERRIDES if command in ("train", "curve") else set()
    assert set(unchecked) <= fields, unchecked


@pytest.mark.parametrize("command", COMMANDS)
def test_every_checked_option_refuses_an_out_of_range_value_in_one_line(command, capsys):
    """-1 everywhere; 0 where 0 is no count its help explains (0 skips a section) and no seed."""
    for action in options(command):
        if not checked(action.type):
            continue
        minimum = getattr(action.type, "minimum", None)
        refused = (["-1"] if action.type is non_negative_int else ["-1", "0"] if minimum is None
                   else ["-1", str(minimum - 1)])
        if action.type is non_negative_int:
            assert "0" in action.help or "seed" in action.dest, f"{action.option_strings[0]} accepts 0: say what it means"
        for value in refused:
            assert hmmtf.main([command, action.option_strings[0], value]) == 2
            line = error_line(capsys, command)
            assert re.fullmatch(f"hmmtf {command}: error: argument {action.option_strings[0]}: {value}; expected "
                                f"(an integer >= [0-9]+|a finite number > 0)", line), line


@pytest.mark.parametrize("config_class", CONFIG_OPTIONS.values(), ids=CONFIG_OPTIONS)
def test_every_count_field_of_a_command_config_refuses_minus_one_naming_its_option(config_class):
    defaults = {field.name: field.default for field in dataclasses.fields(config_class)}
    hints = typing.get_type_hints(config_class)
    for name in defaults:
        if hints[name] is not int or name in CHECKED_WHERE_USED:
            continue
        option = "--" + name.replace("_", "-")
        with pytest.raises(ValueError, match=f"^{option}: -1[ ;]"):
            config_from_command_line(config_class, {**defaults, name: -1})


@pytest.mark.parametrize(("argv", "message"), [
    (["evaluate", "run/checkpoint", "--num-prompts", "0"], "argument --num-prompts: 0; expected an integer >= 1"),
    (["analyze", "--batch-size", "0"], "--batch-size: 0; expected an integer >= 1"),
    (["markov-sweep", "--seeds", "0"], "--seeds: 0; expected an integer >= 1"),
    (["main", "--ranks", "two"], "--ranks: 'two'; expected positive integers or 'full'"),
    (["markov-verdict", "no/results.json"], "results: 'no/results.json' does not exist; expected the results.json of "
                                            "hmmtf markov-sweep"),
    (["ladder", "no/ladder"], "root: 'no/ladder' is not a folder; expected a folder with one subfolder per ladder point"),
])
def test_a_bad_value_is_one_line_naming_the_argument_the_value_and_what_was_expected(argv, message, capsys):
    assert hmmtf.main(argv) == 2
    assert error_line(capsys, argv[0]) == f"hmmtf {argv[0]}: error: {message}"


@pytest.mark.parametrize("command", ["evaluate", "analyze", "main", "reproduce"])
@pytest.mark.parametrize("threads", ["0", "-1"])
def test_threads_below_one_are_refused(command, threads, capsys):
    assert hmmtf.main([command, "--threads", threads]) == 2
    assert error_line(capsys, command) == f"hmmtf {command}: error: argument --threads: {threads}; expected an integer >= 1"


@pytest.mark.parametrize("argv", [["evaluate", "{missing}"], ["analyze", "{missing}"],
                                  ["export", "{missing}", "--to", "transformer-lens", "{out}"]])
def test_a_missing_checkpoint_is_one_line_naming_it(argv, tmp_path, capsys):
    missing = tmp_path / "run" / "checkpoint"
    assert hmmtf.main([word.format(missing=missing, out=tmp_path / "out") for word in argv]) == 2
    assert error_line(capsys, argv[0]).endswith(f"error: checkpoint: {str(missing)!r} does not exist; expected "
                                                 f"{CHECKPOINT_EXPECTED}")
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    save_checkpoint(tmp_path / "checkpoint", RoFormer(RoFormerConfig(vocab_size=5, num_layers=1, num_heads=2, width=8)),
                    None, {"step": 0, "task": {}, "train": {}})
    return tmp_path / "checkpoint"


def test_a_truncated_weight_file_is_one_line_naming_it(checkpoint, capsys):
    weights = checkpoint / MODEL_FILE
    weights.write_bytes(weights.read_bytes()[:100])
    assert hmmtf.main(["evaluate", str(checkpoint)]) == 2
    assert error_line(capsys, "evaluate").startswith(f"hmmtf evaluate: error: checkpoint: {str(weights)!r} is not a "
                                                      f"complete safetensors file")


@pytest.mark.parametrize(("field", "value", "saved"), [("num_heads", 4, 2), ("rotary_base", 500.0, 10000.0)])
def test_a_config_edited_after_saving_is_one_line_naming_the_field(checkpoint, capsys, field, value, saved):
    config = json.loads((checkpoint / CONFIG_FILE).read_text())
    config["model"][field] = value
    (checkpoint / CONFIG_FILE).write_text(json.dumps(config))
    assert hmmtf.main(["analyze", str(checkpoint), "--out", str(checkpoint.parent / "analysis")]) == 2
    assert f"{field} = {value!r} there but {saved!r} in the weights" in error_line(capsys, "analyze")
    assert not (checkpoint.parent / "analysis").exists()


def test_debug_shows_the_traceback_of_a_user_error_before_or_after_the_subcommand(tmp_path):
    for argv in (["--debug", "evaluate", str(tmp_path)], ["evaluate", str(tmp_path), "--debug"]):
        with pytest.raises(ValueError, match="holds no checkpoint"):
            hmmtf.main(argv)


def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    import hmmtf.commands.training

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(hmmtf.commands.training, "run_evaluate", broken)
    with pytest.raises(KeyError, match="a bug"):
        hmmtf.main(["evaluate", str(tmp_path)])


def test_an_error_line_names_the_file_of_a_system_error_and_joins_lines():
    assert hmmtf.error_line("hmmtf x", FileNotFoundError(2, "No such file or directory", "a/b.json")) == (
        "hmmtf x: error: 'a/b.json': No such file or directory")
    assert hmmtf.error_line("hmmtf x", ValueError("first\n  second")) == "hmmtf x: error: first second"


def test_a_usage_error_is_one_line_too(capsys):
    assert hmmtf.main(["evaluate"]) == 2
    assert error_line(capsys, "evaluate") == "hmmtf evaluate: error: the following arguments are required: checkpoint"
    assert hmmtf.main(["no-such-command"]) == 2
    assert capsys.readouterr().err.startswith("hmmtf: error: argument SUBCOMMAND: invalid choice: 'no-such-command'")


@pytest.mark.parametrize("command", ["main", "calibrate", "markov-sweep", "ladder"])
def test_default_outputs_are_outside_the_committed_results(command):
    args = hmmtf.build_parser(command).parse_args([command])
    assert Path(args.out).parts[0] == "runs"


def test_analyze_writes_to_its_inputs_own_run_folder_by_default(checkpoint, monkeypatch, capsys):
    """Without ``--out``: runs/analysis/RUN, one folder per input, outside the tracked tree."""
    import hmmtf.commands.analyze as commands

    monkeypatch.chdir(checkpoint.parent.parent)
    monkeypatch.setattr(commands, "preset_from_task", lambda task: SimpleNamespace(prompt_format=None))
    monkeypatch.setattr(commands, "analyze", lambda model, preset, config, device: SimpleNamespace(report={}))
    assert hmmtf.main(["analyze", str(checkpoint)]) == 0
    out = Path("runs", "analysis", checkpoint.parent.name)
    assert json.loads(capsys.readouterr().out)["out"] == str(out)
    assert (out / "analysis.json").is_file()


@pytest.mark.parametrize("result", [result for result in RESULTS if result.command and result.command.startswith("hmmtf")],
                         ids=lambda result: result.path)
def test_each_committed_result_is_made_by_a_command_naming_its_folder(result):
    """The commands the ledger records write their results under figures/ only through an explicit
    ``--out`` (the defaults are run folders); POINT stands for every ladder point."""
    argv = shlex.split(result.command.split(" (")[0])[1:]
    args = hmmtf.build_parser(argv[0]).parse_args(argv)
    assert Path(result.path).parent.as_posix() == args.out.replace("POINT", "*")


OUTPUT_FOLDERS_CHECKED_WHEN_RUN = {"reproduce"}
"""Commands whose ``--out`` is not an :func:`hmmtf.options.output_folder`: ``reproduce`` also reads
it (``--status``, ``--wait``), so it checks the folder for writing only before a run."""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_output_folder_is_checked_for_writing_when_the_command_line_is_read(command):
    parser = hmmtf.build_parser(command)
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    outs = [action for action in subparsers.choices[command]._actions if action.dest == "out"]
    unchecked = [action.dest for action in outs if action.type is not output_folder]
    assert unchecked == ([] if command not in OUTPUT_FOLDERS_CHECKED_WHEN_RUN else ["out"])


def no_computation(*args, **kwargs):
    raise AssertionError("the command computed before checking its output folder")


@pytest.mark.parametrize(("argv", "computation"), [
    (["main", "--out", "{out}"], "hmmtf.commands.bounds.measure"),
    (["calibrate", "--out", "{out}"], "hmmtf.commands.training.calibrate"),
    (["markov-sweep", "--out", "{out}"], "hmmtf.commands.markov.write_sweep"),
    (["evaluate", "{checkpoint}", "--out", "{out}"], "hmmtf.commands.training.load_run"),
    (["analyze", "{checkpoint}", "--out", "{out}"], "hmmtf.commands.analyze.load_checkpoint"),
    (["reproduce", "--preset", "paper-mini", "--device", "cpu", "--out", "{out}"],
     "empirical.reproduce.plan.measure_host"),
])
@pytest.mark.parametrize("blocked", ["a file", "read-only"])
def test_an_output_folder_that_cannot_be_written_is_refused_at_once_in_one_line(argv, computation, blocked, checkpoint,
                                                                               tmp_path, monkeypatch, capsys):
    """``--out`` inside a regular file, or in a folder where this process cannot create a file (one
    without write permission; for root, whom the mode bits do not stop, ``/proc``): one line, exit
    code 2, before the command computes anything."""
    if blocked == "a file":
        (tmp_path / "file").write_text("")
        where, reason = tmp_path / "file", "is not a folder"
    else:
        where, reason = (tmp_path / "read-only", "cannot be written") if os.geteuid() else (Path("/proc"),
                                                                                            "cannot be written")
        where.mkdir(mode=0o555, exist_ok=True)
    out = where / "out"
    module, name = computation.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, no_computation)
    command = argv[0]
    assert hmmtf.main([word.format(out=out, checkpoint=checkpoint) for word in argv]) == 2
    line = error_line(capsys, command)
    assert "--out: " in line and f"{str(out)!r}" in line and reason in line and f"{str(where)!r}" in line, line
    assert line.endswith("expected a folder this user can write to"), line


def test_a_folder_under_proc_is_refused_at_the_folder_that_refuses_a_file_not_as_a_missing_one():
    """``/proc`` exists but refuses every new file, and the operating system says so with ENOENT: the
    message names ``/proc`` as the nearest existing folder that refuses a new file, so it does not
    read as if ``/proc`` were missing."""
    with pytest.raises(ValueError) as refusal:
        check_output_folder("/proc/x/y")
    assert str(refusal.value).startswith("--out: '/proc/x/y' cannot be written: '/proc', the nearest of its folders "
                                         "that exists, refuses a new file (the operating system says: ")
    with pytest.raises(ValueError, match=re.escape("--out: '/proc' cannot be written: it refuses a new file")):
        check_output_folder("/proc")


def test_evaluate_checks_its_default_output_folder_before_computing(checkpoint, monkeypatch, capsys):
    """Without ``--out``: runs/evaluate/RUN, where a file of that name blocks it."""
    monkeypatch.chdir(checkpoint.parent.parent)
    default = Path("runs", "evaluate", checkpoint.parent.name)
    default.parent.mkdir(parents=True)
    default.write_text("")
    import hmmtf.commands.training
    monkeypatch.setattr(hmmtf.commands.training, "load_run", no_computation)
    assert hmmtf.main(["evaluate", str(checkpoint)]) == 2
    assert error_line(capsys, "evaluate") == (
        f"hmmtf evaluate: error: --out: {str(default)!r}: {str(default)!r} is not a folder; expected a folder this "
        f"user can write to")
