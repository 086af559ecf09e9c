"""What a new user does loses no file and shows no traceback (issue 68): every output folder owned
file by file, committed results written only by their registered commands, and the last silent
and unclear cases, each a one-line refusal naming the option or file, the value and what was
expected, or a documented behaviour. Faults are injected where a real one is needed: a full disk
raised by the checkpoint's writer, a truncated training log, CUDA asked of a torch without it."""
import errno
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import hmmtf
import tiny_pipeline
from empirical.training import checkpoint as checkpoint_module
from empirical.training.checkpoint import load_checkpoint, save_checkpoint
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.overrides import training_run
from empirical.training.result_files import COMMAND_FILES, ResultFiles
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE
from hmmtf.options import CHECKOUT, check_committed_results, check_results_owner, check_study_owner

TINY_RUN = pytest.mark.xdist_group(tiny_pipeline.GROUP)
"""The tests that read the tiny run, on the worker that makes it (:mod:`tiny_pipeline`)."""
QUICK_EVALUATION = ["--num-prompts", "4", "--hand-built-prompts", "0", "--fresh-tasks", "0", "--ceiling-particles", "0"]
"""``hmmtf evaluate`` without its long sections: seconds."""


def one_line(capsys, command: str) -> str:
    """The one line a user error printed, ``hmmtf COMMAND: error: ...``."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"hmmtf {command}: error: "), lines[0]
    return lines[0]


def refused(argv: list[str], capsys) -> str:
    assert hmmtf.main(argv) == 2
    return one_line(capsys, argv[0])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


# Ownership by file.

def test_a_companion_file_without_its_report_is_someone_elses_and_refused_unless_overwrite(tmp_path):
    """A figure alone is a file the command does not know (nothing says whose it is); beside this
    input's report it is this input's; ``--overwrite`` replaces either."""
    out, files = tmp_path / "out", COMMAND_FILES["evaluate"]
    out.mkdir()
    (out / "in_context.png").write_text("the user's")
    with pytest.raises(ValueError, match=re.escape(f"--out: '{out}' holds in_context.png, which this command writes, "
                                                   f"beside none of its reports (evaluation.json, competence.json, "
                                                   f"hand_built.json) that would say whose it is; expected an empty "
                                                   f"folder or this input's, or --overwrite")):
        check_results_owner(out, tmp_path / "a", files, overwrite=False, command_line="hmmtf evaluate a")
    check_results_owner(out, tmp_path / "a", files, overwrite=True, command_line="hmmtf evaluate a")
    (out / "evaluation.json").write_text(json.dumps({"checkpoint": str(tmp_path / "a")}))
    check_results_owner(out, tmp_path / "a", files, overwrite=False, command_line="hmmtf evaluate a")
    (out / "unknown.txt").write_text("never written by evaluate")  # not one of its files: no concern of its
    check_results_owner(out, tmp_path / "a", files, overwrite=False, command_line="hmmtf evaluate a")


def test_a_study_companion_without_its_report_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plateau.png").write_text("the user's")
    with pytest.raises(ValueError, match="holds plateau.png, which this command writes, beside none of its reports"):
        check_study_owner(out, "hmmtf plateau --arm a r --baseline a", COMMAND_FILES["plateau"], overwrite=False)


@TINY_RUN
def test_an_export_into_a_folder_with_the_users_weight_file_is_refused_and_the_file_kept(tiny_run, tmp_path, capsys):
    """Issue 68, item 1: the owner check read only config.json, and replaced a lone model.safetensors."""
    out = tmp_path / "u"
    out.mkdir()
    (out / "model.safetensors").write_text("mine")
    line = refused(["export", str(tiny_run), "--to", "transformer-lens", str(out)], capsys)
    assert f"out: '{out}' holds model.safetensors, which this command writes" in line
    assert (out / "model.safetensors").read_text() == "mine"


@TINY_RUN
def test_an_evaluation_into_a_folder_with_the_users_figure_is_refused_before_it_computes(tiny_run, tmp_path, capsys):
    out = tmp_path / "u"
    out.mkdir()
    (out / "in_context.png").write_text("mine")
    line = refused(["evaluate", str(tiny_run), "--out", str(out), *QUICK_EVALUATION], capsys)
    assert "holds in_context.png, which this command writes" in line
    assert snapshot(out) == {"in_context.png": b"mine"}


@TINY_RUN
def test_a_rerun_with_fewer_sections_removes_the_earlier_ones_so_the_folder_holds_one_evaluation(tiny_run, tmp_path,
                                                                                                   capsys):
    """Issue 68, item 2: the competence result and regime figure of an earlier evaluation of the same
    input stayed beside a new evaluation without them."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "competence.json").write_text(json.dumps({"checkpoint": str(tiny_run / CHECKPOINT_DIR)}))
    for name in ("competence.png", "regime.png", "notes.txt"):
        (out / name).write_text("earlier")
    assert hmmtf.main(["evaluate", str(tiny_run), "--out", str(out), *QUICK_EVALUATION]) == 0
    said = (f"hmmtf evaluate: removed regime.png, competence.json, competence.png from '{out}': an earlier "
            f"evaluation's, which this one does not make")
    assert said in capsys.readouterr().err.replace("\r", "\n").splitlines()  # among the progress bars
    assert not {"regime.png", "competence.json", "competence.png"} & {path.name for path in out.iterdir()}
    assert (out / "notes.txt").read_text() == "earlier" and (out / "evaluation.json").is_file()


def test_every_command_names_its_files_in_the_one_home():
    """The commands that check ownership by file read their files from empirical/training/result_files.py."""
    assert set(COMMAND_FILES) == {"evaluate", "analyze", "heads", "klmap", "beliefs", "ngram-verdict", "export",
                                  "signal", "family-calibration", "curves", "plateau", "depth", "ladder",
                                  "markov-incontext"}
    for name, files in COMMAND_FILES.items():
        assert files.reports and all(report.endswith(".json") for report in files.reports), name
        assert not set(files.reports) & set(files.companions), name


# Committed results.

PAPER_POINT = CHECKOUT / "figures" / "paper" / "2x4x64"


def recorded(path: Path) -> str:
    document = json.loads(path.read_text())
    return document.get("command") or document["provenance"]["command"]


def test_a_committed_result_is_refused_to_other_settings_even_with_overwrite_and_left_as_it_was(capsys):
    """Issue 68, item 2: 16 prompts into the committed 512-prompt evaluation's folder."""
    before = snapshot(PAPER_POINT)
    line = refused(["evaluate", "models/paper-2x4x64", "--num-prompts", "16", "--out", str(PAPER_POINT),
                    "--overwrite", *QUICK_EVALUATION[2:]], capsys)
    assert f"--out: '{PAPER_POINT}' holds evaluation.json, a committed result (ledger/results.py) made by " in line
    assert "expected that command or its registered one, `hmmtf evaluate models/paper-POINT --out figures/paper/POINT" \
           in line and "--overwrite does not lift this" in line
    assert snapshot(PAPER_POINT) == before


def test_a_committed_result_accepts_the_command_it_records_and_its_registered_command():
    evaluation = PAPER_POINT / "evaluation.json"
    check_committed_results(PAPER_POINT, recorded(evaluation) + " --overwrite --debug", COMMAND_FILES["evaluate"])
    with pytest.raises(ValueError, match="a committed result"):
        check_committed_results(PAPER_POINT, recorded(evaluation) + " --threads 2", COMMAND_FILES["evaluate"])
    calibration, files = CHECKOUT / "figures" / "calibration", ResultFiles(("cpu-small.json",), ("cpu-small.png",))
    check_committed_results(calibration, recorded(calibration / "cpu-small.json"), files)  # the command it records
    check_committed_results(calibration, "hmmtf calibrate --preset cpu-small --out figures/calibration", files)
    with pytest.raises(ValueError, match="expected that command or its registered one, `hmmtf calibrate --preset "
                                         "cpu-small --out figures/calibration`"):
        check_committed_results(calibration, "hmmtf calibrate --preset cpu-small --num-prompts 8", files)


def test_a_new_result_in_a_registered_pattern_and_a_folder_outside_figures_are_not_committed_results(tmp_path):
    check_committed_results(CHECKOUT / "figures" / "ladder" / "no-such-point", "hmmtf evaluate x",
                            COMMAND_FILES["evaluate"])
    check_committed_results(tmp_path, "hmmtf evaluate x", COMMAND_FILES["evaluate"])


# Tracebacks.

@pytest.mark.parametrize("command", [["train", "--preset", "tiny"], ["evaluate", "models/tasks-8192-small"]])
def test_cuda_asked_of_a_torch_without_it_is_one_line(command, monkeypatch, capsys, tmp_path):
    """This machine's torch is CPU-only; the patch makes the test mean the same on one with a GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = refused([*command, "--device", "cuda", *(["--run-dir", str(tmp_path)] if command[0] == "train" else [])],
                   capsys)
    assert line.endswith("argument --device: cuda; expected cpu, or cuda / cuda:N on a machine where torch has CUDA "
                         f"(this torch, {torch.__version__}, has no usable CUDA device: use cpu)")


@pytest.mark.parametrize("command", ["train", "evaluate", "analyze", "heads", "klmap", "beliefs", "ngram-verdict"])
def test_an_unknown_device_is_one_line(command, capsys):
    line = refused([command, "--device", "bogus"], capsys)
    assert line == (f"hmmtf {command}: error: argument --device: bogus; expected cpu, or cuda / cuda:N on a machine "
                    f"where torch has CUDA")


def tiny_network() -> RoFormer:
    return RoFormer(RoFormerConfig(vocab_size=5, num_layers=1, num_heads=1, width=8))


def test_a_full_disk_while_a_checkpoint_is_written_removes_the_partial_one_and_keeps_the_last(tmp_path, monkeypatch):
    folder = tmp_path / "run" / CHECKPOINT_DIR
    model = tiny_network()
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(folder, model, optimizer, {"step": 1})

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "save_file", full_disk)  # the optimizer's file, after the weights'
    with pytest.raises(OSError, match=re.escape(
            f"checkpoint: writing '{folder}.tmp' failed (No space left on device); the partial checkpoint was removed "
            f"and the last complete one, '{folder}', is kept; expected room for a checkpoint in '{folder.parent}'")):
        save_checkpoint(folder, model, optimizer, {"step": 2})
    assert sorted(path.name for path in folder.parent.iterdir()) == [CHECKPOINT_DIR]
    assert load_checkpoint(folder).config["step"] == 1


def test_a_full_disk_during_training_is_one_line_and_leaves_no_partial_checkpoint(tmp_path, monkeypatch, capsys):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "save_model", full_disk)
    run_dir = tmp_path / "run"
    line = refused(["train", "--preset", "tiny", "--steps", "2", "--run-dir", str(run_dir), "--no-progress"], capsys)
    assert f"writing '{run_dir / CHECKPOINT_DIR}.tmp' failed (No space left on device)" in line
    assert f"there is no earlier one in '{run_dir}'" in line
    assert not (run_dir / f"{CHECKPOINT_DIR}.tmp").exists()


# Silent cases.

@TINY_RUN
def test_an_ngram_verdict_on_one_fresh_hmm_is_refused(tiny_run, capsys):
    """One HMM is one cluster: its clustered intervals have zero width."""
    line = refused(["ngram-verdict", str(tiny_run), "--fresh-tasks", "1"], capsys)
    assert line == "hmmtf ngram-verdict: error: argument --fresh-tasks: 1; expected an integer >= 2"


@pytest.mark.parametrize(("flags", "message"), [
    (["--steps", "10", "--curriculum-mixture", "tiny", "--curriculum-steps", "11"],
     "--curriculum-steps: 11; expected at most steps = 10"),
    (["--steps", "10", "--context-curriculum-steps", "11"], "--context-curriculum-steps: 11; expected at most steps = 10"),
    (["--context-curriculum-demos", "2"], "--context-curriculum-demos: 2; expected it only with "
                                          "context_curriculum_steps > 0"),
])
def test_a_curriculum_the_run_cannot_follow_is_refused(flags, message, tmp_path, capsys):
    line = refused(["train", "--preset", "tiny", "--run-dir", str(tmp_path / "run"), *flags], capsys)
    assert line.startswith(f"hmmtf train: error: {message}"), line
    assert not (tmp_path / "run").exists()


def test_the_curricula_of_the_running_paper_scale_runs_are_accepted():
    """The commands of the two curve runs training now (models/README.md): a mixture curriculum of a
    quarter of the run, and none."""
    curriculum = training_run("paper", None, {"train": {"steps": 16384, "curriculum_mixture": "paper-sparse",
                                                        "curriculum_steps": 4096, "curriculum_share": 0.75}})
    assert (curriculum.preset.train.steps, curriculum.preset.train.curriculum_steps) == (16384, 4096)
    assert training_run("paper", None, {"train": {"steps": 8192}}).preset.train.curriculum_steps == 0
    assert training_run("paper", None, {"train": {"steps": 8, "context_curriculum_steps": 8,
                                                  "context_curriculum_demos": 2}}).preset.train.steps == 8


def test_competence_options_with_no_fresh_hmms_are_refused(capsys):
    line = refused(["evaluate", "models/tasks-8192-small", "--fresh-tasks", "0", "--ceiling-particles", "64"], capsys)
    assert line.startswith("hmmtf evaluate: error: --ceiling-particles: 64 with --fresh-tasks 0, which leaves out the "
                           "regime section and the competence result")


@pytest.mark.parametrize("folder", ["models/tasks-8192-small", "figures/paper/2x4x64"])
def test_a_training_into_a_checkpoint_or_results_folder_is_refused(folder, capsys):
    before = snapshot(CHECKOUT / folder)
    line = refused(["train", "--preset", "tiny", "--run-dir", str(CHECKOUT / folder)], capsys)
    assert f"--run-dir: '{CHECKOUT / folder}' " in line
    assert "expected a new or empty folder, or a run folder of hmmtf train (holding checkpoint/ or metrics.jsonl)" in line
    assert snapshot(CHECKOUT / folder) == before


# Unclear cases.

def test_study_commands_on_a_missing_or_wrong_run_folder_name_the_option(tmp_path, capsys):
    missing, wrong = tmp_path / "missing", tmp_path / "wrong"
    wrong.mkdir()
    expected = "expected a run folder of hmmtf curve, holding checkpoint/config.json and curve_baselines.json"
    line = refused(["curves", str(missing), "--title", "t", "--out", str(tmp_path / "out")], capsys)
    assert line == f"hmmtf curves: error: run_dirs: '{missing}' does not exist or is not a folder; {expected}"
    line = refused(["plateau", "--arm", "plain", str(wrong), "--baseline", "plain", "--out", str(tmp_path / "out")],
                   capsys)
    assert line.startswith(f"hmmtf plateau: error: --arm: '{wrong}' has no checkpoint/config.json; {expected}")
    line = refused(["curve", "--preset", "tiny", "--run-dir", str(tmp_path / "new"), "--every", "10",
                    "--branch-from", str(missing)], capsys)
    assert line.startswith(f"hmmtf curve: error: --branch-from: '{missing}' does not exist")


@TINY_RUN
def test_a_truncated_training_log_is_said_in_one_line_and_the_evaluation_written(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("*.lock"))
    text = (run / METRICS_FILE).read_text()
    (run / METRICS_FILE).write_text(text[:-len(text.splitlines()[-1]) // 2 - 1])  # the last line cut in half
    lines = len(text.splitlines())
    out = tmp_path / "out"
    assert hmmtf.main(["evaluate", str(run), "--out", str(out), *QUICK_EVALUATION]) == 0
    err = capsys.readouterr().err.splitlines()[0]  # then the progress bars
    assert err == (f"hmmtf evaluate: training_loss.png not drawn and metrics.jsonl not copied: "
                   f"'{run / METRICS_FILE}' line {lines} is not a JSON record with step and loss (expected the training "
                   f"log of hmmtf train, beside its checkpoint/, one JSON record a line; a line cut short by a killed "
                   f"training can be removed)")
    assert (out / "evaluation.json").is_file() and not (out / "training_loss.png").exists()


@TINY_RUN
def test_rerunning_a_finished_training_says_there_is_nothing_left_and_keeps_its_summary(tiny_run, tmp_path, capsys):
    from tiny_pipeline import train_argv
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("*.lock"))
    summary = (run / "train_summary.json").read_bytes()
    assert hmmtf.main(train_argv(run)) == 0
    captured = capsys.readouterr()
    assert captured.err == f"hmmtf train: '{run}' holds the finished run (step 40 of 40); nothing left to run\n"
    assert captured.out == "" and (run / "train_summary.json").read_bytes() == summary


@pytest.mark.parametrize("value", ["-1e-3", "-.5", "-2"])
def test_a_negative_number_after_an_option_reaches_its_range_check(value, tmp_path, capsys):
    line = refused(["train", "--preset", "tiny", "--run-dir", str(tmp_path), "--learning-rate", value], capsys)
    assert re.fullmatch(r"hmmtf train: error: --learning-rate: -[0-9.e-]+; expected a finite number > 0", line), line


# The promise.

@pytest.mark.parametrize("command", ["heads", "klmap", "beliefs", "ngram-verdict"])
def test_every_command_that_reads_a_checkpoint_has_a_default_output_folder(command):
    parser = hmmtf.build_parser(command)
    args = parser.parse_args([command, "models/tasks-8192-small"])
    assert args.out is None


@pytest.mark.long_running  # a whole n-gram verdict, a few seconds on 2 cores
@TINY_RUN
def test_a_measurement_writes_to_its_inputs_own_folder_by_default(tiny_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_run / CHECKPOINT_DIR, tmp_path / "models" / "a")
    assert hmmtf.main(["ngram-verdict", "models/a", "--prompts", "4", "--fresh-tasks", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == "runs/ngram-verdict/models/a"
    assert json.loads((tmp_path / "runs/ngram-verdict/models/a/ngram-verdict.json").read_text())["checkpoint"] == \
        "models/a"
