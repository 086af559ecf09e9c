"""glibc malloc's training tunables (empirical/training/allocator.py): how they join the environment's own,
when a process restarts with them, that ``hmmtf`` restarts only as a process's entry point and
says so only under ``-v`` (a user error stays one line, ``--help`` only the help), and that
``HMMTF_MALLOC`` takes its two values and refuses any other in one line."""
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import hmmtf
from empirical.training import allocator

GLIBC_LINUX = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def test_the_tunables_syntax_is_read_in_order_and_a_malformed_entry_is_named():
    assert allocator.parse_tunables("") == {}
    assert list(allocator.parse_tunables("a.b=1:c.d=x=y")) == ["a.b", "c.d"]
    assert allocator.parse_tunables("a.b=1:c.d=x=y")["c.d"] == "x=y"
    with pytest.raises(ValueError, match=r"GLIBC_TUNABLES: 'a=1:oops'; expected name=value entries .*, not 'oops'"):
        allocator.parse_tunables("a=1:oops")


def test_the_training_tunables_join_the_environments_own_which_keep_their_values():
    environ = {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0:glibc.cpu.x86_ibt=on"}
    tuned = allocator.with_training_tunables(environ)
    assert environ == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0:glibc.cpu.x86_ibt=on"}
    assert tuned["PATH"] == "/bin"
    assert allocator.parse_tunables(tuned["GLIBC_TUNABLES"]) == {
        **allocator.TRAINING_TUNABLES, "glibc.malloc.hugetlb": "0", "glibc.cpu.x86_ibt": "on"}
    assert allocator.parse_tunables(allocator.with_training_tunables({})["GLIBC_TUNABLES"]) == allocator.TRAINING_TUNABLES


def test_a_process_restarts_once_unless_it_opts_out_or_is_not_on_glibc():
    assert allocator.needs_restart({}) is GLIBC_LINUX
    assert allocator.needs_restart({"HMMTF_MALLOC": "tuned"}) is GLIBC_LINUX
    assert allocator.needs_restart({"HMMTF_MALLOC": ""}) is GLIBC_LINUX
    assert not allocator.needs_restart(allocator.with_training_tunables({}))
    assert not allocator.needs_restart({"HMMTF_MALLOC": "system"})
    partial = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert allocator.needs_restart(partial) is GLIBC_LINUX


@pytest.mark.parametrize("value", ["bogus", "System", "glibc", "1"])
def test_an_unknown_hmmtf_malloc_is_refused_naming_it_and_the_values(value):
    with pytest.raises(ValueError, match=rf"^HMMTF_MALLOC: '{value}'; expected one of \['tuned', 'system'\]"):
        allocator.needs_restart({"HMMTF_MALLOC": value})


def test_the_restart_runs_the_same_command_line_with_the_tunables_and_says_so_when_verbose(capsys):
    calls = []
    environ = {"PATH": "/bin"}
    command_line = ["python3", "-u", "/x/hmmtf.py", "train", "--preset", "tiny"]
    allocator.restart_with_training_tunables(command_line, environ=environ, execve=lambda *call: calls.append(call))
    assert capsys.readouterr().err == ""
    allocator.restart_with_training_tunables(command_line, verbose=True, environ=environ,
                                             execve=lambda *call: calls.append(call))
    if not GLIBC_LINUX:
        assert calls == [] and capsys.readouterr().err == ""
        return
    (executable, argv, tuned), again = calls
    assert again == (executable, argv, tuned)
    assert executable == sys.executable and argv == [sys.executable, "-u", "/x/hmmtf.py", "train", "--preset", "tiny"]
    assert tuned == allocator.with_training_tunables(environ)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"hmmtf: restarting with GLIBC_TUNABLES={tuned['GLIBC_TUNABLES']} (faster CPU training, "
                    "empirical/training/allocator.py; HMMTF_MALLOC=system to keep glibc's defaults)")
    allocator.restart_with_training_tunables(command_line, environ=tuned, execve=lambda *call: calls.append(call))
    assert len(calls) == 2


def test_hmmtf_restarts_for_a_training_subcommand_only_as_an_entry_point(monkeypatch):
    restarted = []
    monkeypatch.setattr(allocator, "restart_with_training_tunables",
                        lambda command_line, verbose: restarted.append((command_line, verbose)))
    hmmtf.restart_for_training(["hmmtf", "--debug", "train", "--preset", "tiny"], ["python", "-u", "hmmtf", "train"])
    hmmtf.restart_for_training(["hmmtf", "evaluate", "runs/x"], ["python", "hmmtf", "evaluate", "runs/x"])
    hmmtf.restart_for_training(["hmmtf"], ["python", "hmmtf"])
    hmmtf.restart_for_training(["hmmtf", "reproduce", "-v"], ["python", "hmmtf", "reproduce", "-v"])
    assert restarted == [(["python", "-u", "hmmtf", "train"], False), (["python", "hmmtf", "reproduce", "-v"], True)]
    monkeypatch.setattr(sys, "argv", ["hmmtf", "train", "--preset", "no-such-preset"])
    assert hmmtf.main(["train", "--preset", "no-such-preset"]) == 2  # a call with argv: no restart
    assert len(restarted) == 2
    assert set(allocator.TRAINING_SUBCOMMANDS) <= set(hmmtf.SUBCOMMAND_MODULES)


@pytest.mark.skipif(not GLIBC_LINUX, reason="only glibc on Linux restarts, so only there is GLIBC_TUNABLES read")
def test_a_malformed_glibc_tunables_ends_a_training_command_with_one_line():
    finished = subprocess.run([sys.executable, str(Path(hmmtf.__file__).with_name("__main__.py")), "train", "--preset", "tiny"],
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "GLIBC_TUNABLES": "oops"})
    assert finished.returncode == 2
    assert finished.stderr.splitlines() == ["hmmtf: error: GLIBC_TUNABLES: 'oops'; expected name=value entries "
                                            "separated by ':', not 'oops'"]


def run_hmmtf(*argv: str, **environ: str) -> subprocess.CompletedProcess:
    """``hmmtf ARGV`` as a process (so it may restart itself) under ``environ`` and a PATH, nothing
    else: no ``GLIBC_TUNABLES`` nor ``HMMTF_MALLOC`` from the test's environment."""
    return subprocess.run([sys.executable, str(Path(hmmtf.__file__).with_name("__main__.py")), *argv], capture_output=True, text=True,
                          timeout=120, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **environ})


@pytest.mark.long_running  # two interpreters each (the restart), importing torch: seconds of CPU a case
@pytest.mark.parametrize(("argv", "line"), [
    (["train", "--preset", "no-such-preset"], "hmmtf train: error: argument --preset: invalid choice: "),
    (["train", "--preset", "tiny", "--steps", "0"], "hmmtf train: error: --steps: 0; expected an integer >= 1"),
    (["reproduce", "--preset", "huge", "--device", "cpu"], "hmmtf reproduce: error: --preset: 'huge'; expected one of"),
])
def test_a_user_error_of_a_training_command_is_one_line_on_stderr_whether_it_restarted_or_not(argv, line):
    """Started as a process on glibc, the command restarts itself, quietly: the error is the only line."""
    finished = run_hmmtf(*argv)
    assert finished.returncode == 2
    (error,) = finished.stderr.splitlines()
    assert error.startswith(line), error


@pytest.mark.long_running  # four interpreters (two commands, each restarted), importing torch
def test_help_prints_only_the_help_and_verbose_names_the_restart():
    helped = run_hmmtf("reproduce", "--help")
    assert helped.returncode == 0 and helped.stderr == ""
    assert helped.stdout.startswith("usage: hmmtf reproduce ")
    told = run_hmmtf("-v", "train", "--preset", "no-such-preset")
    lines = told.stderr.splitlines()
    assert told.returncode == 2 and lines[-1].startswith("hmmtf train: error: argument --preset: invalid choice")
    restart = ["hmmtf: restarting with GLIBC_TUNABLES=" + allocator.with_training_tunables({})["GLIBC_TUNABLES"]
               + " (faster CPU training, empirical/training/allocator.py; HMMTF_MALLOC=system to keep glibc's defaults)"]
    assert lines[:-1] == (restart if GLIBC_LINUX else [])


@pytest.mark.parametrize("command", [["train", "--preset", "tiny"], ["evaluate", "runs/x"]])
def test_an_unknown_hmmtf_malloc_ends_any_command_with_one_line(command):
    finished = run_hmmtf(*command, HMMTF_MALLOC="bogus")
    assert finished.returncode == 2
    assert finished.stderr.splitlines() == ["hmmtf: error: HMMTF_MALLOC: 'bogus'; expected one of ['tuned', 'system'] "
                                            "(unset: 'tuned'; empirical/training/allocator.py)"]
