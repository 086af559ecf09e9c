"""``hmmtf train``: a preset overridden by a config file and by flags (:mod:`empirical.training.overrides`),
the run's folder and its lock, refused values, a run with overrides evaluated by path, and an
interruption by a real SIGINT resumed to the uninterrupted run bit for bit."""
import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hmm
import hmmtf
from empirical.training.checkpoint import load_checkpoint
from empirical.training.overrides import SECTIONS, TrainingRun, read_config_file, resolve, training_run
from hmmtf.override_options import flag_overrides
from empirical.training.presets import get_preset, preset_from_task
from empirical.training.run_control import LOCK_FILE, run_folder_lock
from empirical.training.train import CHECKPOINT_DIR
from recorded_figures import figures_recorded_not_drawn
from run_folders import assert_same_runs

ROOT = Path(__file__).resolve().parents[1]
TINY = get_preset("tiny")

TOML = """
preset = "cpu-small"

[data]
mixture = "paper-mini"
mixture_seed = 3
num_demos = 2

[model]
width = 16
num_layers = 1
rotary_base = 500

[train]
learning_rate = 1e-3
warmup_steps = 2
log_every = 4
"""
"""A config file of every section; its JSON twin is :data:`JSON_CONFIG`."""
JSON_CONFIG = {"preset": "cpu-small", "data": {"mixture": "paper-mini", "mixture_seed": 3, "num_demos": 2},
               "model": {"width": 16, "num_layers": 1, "rotary_base": 500.0},
               "train": {"learning_rate": 1e-3, "warmup_steps": 2, "log_every": 4}}


def parsed_flags(argv: list[str]):
    return flag_overrides(hmmtf.build_parser("train").parse_args(["train", *argv]))


def write_config(folder: Path, name: str, content) -> Path:
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_every_value_of_every_section_is_a_flag():
    """Each of the preset's resolved values, given as its flag (booleans as ``--no-field`` or
    ``--field``), comes back as that section's override."""
    values = resolve("tiny").preset
    known = {"data": {"mixture": values.mixture, "mixture_seed": 1, "data_seed": 2, "prompt_format": "tiny",
                      **dataclasses.asdict(values.prompt_format), "eval_prompts": 3},
             "model": {field: value for field, value in TINY.model_config(4).to_dict().items()
                       if field != "vocab_size"},
             "train": values.train.to_dict()}
    assert {section: set(fields) for section, fields in known.items()} == {
        section: set(fields) for section, fields in SECTIONS.items()}
    for section, fields in known.items():
        for field, value in fields.items():
            flag = "--" + field.replace("_", "-")
            argv = [flag if value else "--no-" + flag[2:]] if isinstance(value, bool) else [flag, str(value)]
            assert parsed_flags(argv) == {name: {field: value} if name == section else {} for name in SECTIONS}, field


def test_flags_override_the_file_which_overrides_the_preset(tmp_path):
    run = training_run(None, str(write_config(tmp_path, "run.toml", TOML)),
                       parsed_flags(["--learning-rate", "2e-3", "--width", "32", "--prompt-format", "tiny",
                                     "--tie-embeddings"]))
    preset, base = run.preset, get_preset("cpu-small")
    assert preset.name == "cpu-small"  # the file's preset
    assert (preset.mixture, preset.mixture_seed, preset.data_seed) == ("paper-mini", 3, base.data_seed)
    # The flag's named format replaces the preset's, then the file's num_demos replaces its field.
    assert preset.prompt_format == dataclasses.replace(hmm.PROMPT_FORMATS["tiny"], num_demos=2)
    model = run.model
    assert (model.width, model.num_layers, model.rotary_base, model.tie_embeddings) == (32, 1, 500.0, True)
    assert run.model.vocab_size == hmm.MIXTURE_SPECS["paper-mini"].num_tokens + 1
    assert run.model.mlp_ratio == base.model_config(8).mlp_ratio
    assert (preset.num_layers, preset.width, preset.tie_embeddings) == (1, 32, True)
    train = preset.train
    assert (train.learning_rate, train.warmup_steps, train.log_every) == (2e-3, 2, 4)
    assert (train.steps, train.batch_size, train.checkpoint_every) == (base.train.steps, base.train.batch_size,
                                                                       base.train.checkpoint_every)
    assert training_run("tiny", str(write_config(tmp_path, "run.toml", TOML)), {}).preset.name == "tiny"


def test_a_json_file_is_read_as_its_toml_twin(tmp_path):
    toml = read_config_file(write_config(tmp_path, "run.toml", TOML))
    assert read_config_file(write_config(tmp_path, "run.json", JSON_CONFIG)) == toml
    assert toml[1]["model"]["rotary_base"] == 500.0 and isinstance(toml[1]["model"]["rotary_base"], float)


def test_the_documented_config_file_resolves_as_its_comments_say(tmp_path):
    (example,) = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "empirical.md").read_text(), flags=re.DOTALL)
    run = training_run(None, str(write_config(tmp_path, "wide.toml", example)), {})
    assert run.preset.name == "tasks-8192-small" and run.preset.prompt_format == hmm.PROMPT_FORMATS["cpu-small"]
    assert (run.model.width, run.model.num_layers) == (128, 2)
    train = run.preset.train
    assert (train.steps, train.warmup_steps, train.learning_rate, train.checkpoint_every) == (6000, 150, 1e-3, 500)


@pytest.mark.parametrize("layers, warmup", [
    (({"train": {"steps": 30}},), 3),                                # min(5, 30 // 10)
    (({"train": {"steps": 600}},), TINY.train.warmup_steps),         # min(5, 60)
    (({"train": {"steps": 30, "warmup_steps": 0}},), 0),
    (({"train": {"warmup_steps": 1}}, {"train": {"steps": 30}}), 1),  # set in the file, steps by a flag
    (({"train": {"learning_rate": 1e-2}},), TINY.train.warmup_steps),
])
def test_the_warm_up_follows_the_steps_unless_it_is_set(layers, warmup):
    assert resolve("tiny", *layers).preset.train.warmup_steps == warmup


def test_the_checkpoint_rebuilds_the_overridden_data():
    run = resolve("tiny", {"data": {"mixture": "cpu-small", "mixture_seed": 5, "data_seed": 6,
                                    "prompt_format": "paper-mini", "test_length": 4, "eval_prompts": 64}})
    rebuilt = preset_from_task(json.loads(json.dumps(run.preset.task())))
    for field in ("mixture", "mixture_seed", "data_seed", "prompt_format", "eval_prompts"):
        assert getattr(rebuilt, field) == getattr(run.preset, field), field
    assert rebuilt.prompt_format == hmm.PromptFormat(num_demos=3, demo_length=16, test_length=4)


@pytest.mark.parametrize("overrides, folder", [
    ({}, "tiny"),
    ({"model": {"width": TINY.width}, "train": {"steps": TINY.train.steps}}, "tiny"),  # the preset's own values
    ({"model": {"num_layers": 1, "tie_embeddings": True}, "train": {"learning_rate": 1e-3}},
     "tiny-num_layers=1-tie_embeddings=true-learning_rate=0.001"),
    ({"data": {"mixture": "cpu-small", "prompt_format": "cpu-small"}},
     "tiny-mixture=cpu-small-num_demos=6-demo_length=16-test_length=16"),
    ({"train": {"steps": 30}}, "tiny-steps=30-warmup_steps=3"),
])
def test_a_run_that_differs_from_its_preset_gets_a_folder_that_says_how(overrides, folder):
    run = resolve("tiny", overrides)
    assert run.default_run_dir() == Path("runs") / folder


def test_a_folder_name_too_long_to_read_asks_for_run_dir():
    run = resolve("tiny", {"model": {"num_layers": 1, "width": 16, "mlp_ratio": 2, "rotary_base": 500.0,
                                     "init_std": 0.05},
                           "train": {"learning_rate": 1e-3, "weight_decay": 0.0, "beta1": 0.8, "beta2": 0.9}})
    with pytest.raises(ValueError, match=r"--run-dir: not given, and the folder name derived from the 9 values .* is "
                                         r"longer than 120 characters; expected --run-dir FOLDER"):
        run.default_run_dir()


@pytest.mark.parametrize("content, message", [
    ({"model": {"widht": 64}}, (r"\[model\] has unknown key 'widht'; expected some of \['attention_scale', 'init_std', 'mlp_ratio', "
                                r"'num_heads', 'num_layers', 'rotary_base', 'tie_embeddings', 'width'\]")),
    ({"modle": {"width": 64}}, r"has unknown key 'modle'; expected some of \['data', 'model', 'preset', 'train'\]"),
    ({"model": {"vocab_size": 5}}, (r"model.vocab_size in '.*': 5; expected no value: the vocabulary is the "
                                    r"mixture's tokens plus the delimiter")),
    ({"model": {"width": "64"}}, r"model.width in '.*': '64'; expected an integer"),
    ({"model": {"width": 64.0}}, r"model.width in '.*': 64.0; expected an integer"),
    ({"train": {"steps": True}}, r"train.steps in '.*': True; expected an integer"),
    ({"train": {"compile": 1}}, r"train.compile in '.*': 1; expected true or false"),
    ({"model": 3}, r"model in '.*': 3; expected a table of model values"),
    ({"preset": 3}, r"preset in '.*': 3; expected a string"),
    ([1, 2], r"holds a list; expected an object of sections"),
])
def test_a_bad_config_file_is_refused_naming_the_key(tmp_path, content, message):
    with pytest.raises(ValueError, match=message):
        read_config_file(write_config(tmp_path, "run.json", content))


def test_a_config_file_that_cannot_be_read_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--config: '.*missing.toml' does not exist"):
        read_config_file(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match=r"--config: '.*run.yaml'; expected a .toml or .json file"):
        read_config_file(write_config(tmp_path, "run.yaml", "model: {}"))
    with pytest.raises(ValueError, match=r"--config: '.*run.toml' is not valid TOML \(.*line 2.*\); expected"):
        read_config_file(write_config(tmp_path, "run.toml", "[model]\nwidth 64\n"))


@pytest.mark.parametrize("overrides, message", [
    ({"data": {"mixture": "tiny-typo"}}, r"mixture: 'tiny-typo'; expected one of \["),
    ({"data": {"prompt_format": "nope"}}, r"prompt_format: 'nope'; expected one of \["),
    ({"data": {"num_demos": -1}}, r"num_demos: -1; expected an integer >= 0"),
    ({"data": {"mixture_seed": -1}}, r"mixture_seed: -1; expected an integer >= 0"),
    ({"data": {"eval_prompts": 0}}, r"eval_prompts: 0; expected an integer >= 1"),
    ({"model": {"num_heads": 3}}, r"num_heads: 3 does not divide width 32"),
    ({"train": {"steps": 0}}, r"steps: 0; expected an integer >= 1"),
    ({"train": {"steps": -3}}, r"steps: -3; expected an integer >= 1"),
    ({"train": {"batch_size": 0}}, r"batch_size: 0; expected an integer >= 1"),
    ({"train": {"checkpoint_every": 7}}, r"checkpoint_every: 7; expected a multiple of log_every = 10"),
])
def test_a_bad_value_is_refused_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolve("tiny", overrides)


def hmmtf_train_error(argv: list[str], capsys) -> str:
    """The one line ``hmmtf train ARGV`` prints on stderr as it exits with code 2 (a user error)."""
    assert hmmtf.main(["train", *argv]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("hmmtf train: error: "), error
    return error


@pytest.mark.parametrize("argv, message", [
    (["--threads", "0"], r"argument --threads: 0; expected an integer >= 1"),
    (["--threads", "-1"], r"argument --threads: -1; expected an integer >= 1"),
    (["--steps", "0"], r"error: --steps: 0; expected an integer >= 1"),
    (["--steps", "-5"], r"error: --steps: -5; expected an integer >= 1"),
    (["--log-every", "0"], r"error: --log-every: 0; expected an integer >= 1"),
    (["--eval-prompts", "0"], r"error: --eval-prompts: 0; expected an integer >= 1"),
    (["--learning-rate", "inf"], r"error: --learning-rate: inf; expected a finite number"),
    (["--learning-rate", "nan"], r"error: --learning-rate: nan; expected a finite number"),
    (["--init-std", "inf"], r"error: --init-std: inf; expected a finite number"),
    (["--curriculum-share", "2"], r"error: --curriculum-share: 2.0; expected a number in \[0, 1\]"),
    (["--attention-scale", "-1"], r"error: --attention-scale: -1.0; expected a finite number > 0"),
    (["--checkpoint-every", "3"], r"error: --checkpoint-every: 3; expected a multiple of log_every = 10"),
    (["--bogus", "1"], r"^hmmtf train: error: unrecognized arguments: --bogus 1$"),
    (["--vocab-size", "9"], (r"--vocab-size: '9'; expected no value: the vocabulary is the mixture's tokens plus "
                             r"the delimiter \(choose the mixture instead")),
])
def test_hmmtf_train_refuses_a_bad_flag_before_it_writes_anything(tmp_path, capsys, argv, message):
    assert re.search(message, hmmtf_train_error(["--preset", "tiny", "--run-dir", str(tmp_path / "run"), *argv], capsys))
    assert not (tmp_path / "run").exists()


def test_a_bad_value_of_a_config_file_is_named_with_its_section_and_file(tmp_path, capsys):
    config = write_config(tmp_path, "run.toml", "[train]\ngrad_clip = -1.0\n")
    error = hmmtf_train_error(["--preset", "tiny", "--config", str(config), "--run-dir", str(tmp_path / "run")], capsys)
    assert f"error: train.grad_clip in '{config}': -1.0; expected a finite number > 0" in error
    assert not (tmp_path / "run").exists()


def test_hmmtf_train_needs_a_preset(tmp_path, capsys):
    assert re.search(r"--preset: not given; expected one of \[.*'tiny'\] \(or a top-level 'preset' in --config\)",
                     hmmtf_train_error(["--run-dir", str(tmp_path)], capsys))


def test_hmmtf_train_refuses_a_run_folder_another_training_holds(tmp_path, capsys):
    with run_folder_lock(tmp_path):
        error = hmmtf_train_error(["--preset", "tiny", "--run-dir", str(tmp_path), "--no-progress"], capsys)
    assert f"run_dir: '{tmp_path}' is locked by process {os.getpid()} " in error
    assert not (tmp_path / CHECKPOINT_DIR).exists()


def test_hmmtf_train_that_diverges_exits_with_one_line_and_writes_no_non_finite_number(tmp_path, capsys):
    run = tmp_path / "run"
    error = hmmtf_train_error(["--preset", "tiny", "--run-dir", str(run), "--no-progress", "--steps", "8",
                               "--learning-rate", "1e30", "--warmup-steps", "0", "--log-every", "4"], capsys)
    assert re.fullmatch(r"hmmtf train: error: training: gradient norm (nan|inf) at step [1-4] \(learning rate [0-9.]+e\+(29|30)\); "
                        r"stopped there and no checkpoint was written; expected finite gradients \(.*\)\n", error)
    assert sorted(path.name for path in run.iterdir()) == ["metrics.jsonl", LOCK_FILE]  # the lock file stays, unheld
    assert (run / "metrics.jsonl").read_text() == ""


@pytest.mark.long_running
def test_a_run_with_overrides_is_recorded_evaluated_and_analysed_by_path(tmp_path):
    """Trained from a TOML file and flags; the checkpoint records the resolved config, and
    ``hmmtf evaluate`` and ``hmmtf analyze`` rebuild the overridden data and run the recorded
    network (figures recorded, not drawn: the tiny pipeline draws them)."""
    config = write_config(tmp_path, "run.toml", TOML)
    run_dir = tmp_path / "run"
    assert hmmtf.main(["train", "--config", str(config), "--preset", "tiny", "--steps", "8", "--eval-prompts", "16",
                      "--num-layers", "2", "--run-dir", str(run_dir), "--no-progress"]) == 0
    expected: TrainingRun = training_run("tiny", str(config), {"data": {"eval_prompts": 16}, "model": {"num_layers": 2},
                                                               "train": {"steps": 8}})
    saved = load_checkpoint(run_dir / CHECKPOINT_DIR)
    assert saved.config["model"] == expected.model.to_dict()
    assert saved.config["train"] == expected.preset.train.to_dict()
    assert saved.config["task"] == json.loads(json.dumps(expected.preset.task()))
    assert (saved.model.config.num_layers, saved.model.config.width, saved.model.config.rotary_base) == (2, 16, 500.0)
    summary = json.loads((run_dir / "train_summary.json").read_text())
    assert summary["changed_from_preset"] == dict(expected.changes)

    with figures_recorded_not_drawn():
        evaluation, analysis = tmp_path / "evaluation", tmp_path / "analysis"
        assert hmmtf.main(["evaluate", str(run_dir / CHECKPOINT_DIR), "--out", str(evaluation),
                           "--hand-built-prompts", "0", "--fresh-tasks", "0", "--ceiling-particles", "0"]) == 0
        assert hmmtf.main(["analyze", str(run_dir / CHECKPOINT_DIR), "--out", str(analysis), "--sections", "shuffle",
                           "probes", "--probe-train-prompts", "24", "--probe-test-prompts", "12", "--shuffle-prompts",
                           "8", "--hand-built-prompts", "4", "--max-distance", "2", "--max-offset", "3"]) == 0
    report = json.loads((evaluation / "evaluation.json").read_text())
    assert report["model"] == expected.model.to_dict() and report["num_prompts"] == 16
    assert report["task"]["mixture"] == "paper-mini" and report["task"]["mixture_seed"] == 3
    assert len(report["by_demonstrations"]["model"]["accuracy"]) == 2 + 1  # num_demos = 2
    report = json.loads((analysis / "analysis.json").read_text())
    assert report["model"] == expected.model.to_dict() and report["task"]["mixture"] == "paper-mini"
    assert len(report["claims"]["shuffle"]["min_context=2"]["by_layer"]) == 2


def _signalled_once_locked(argv: list[str], run_dir: Path, number: signal.Signals, seconds: float) -> tuple[int, str]:
    """``hmmtf ARGV --run-dir RUN_DIR`` in a subprocess (in RUN_DIR's parent, one OpenMP thread), sent
    ``number`` once its lock file names it (its handlers are installed by then, so the stop comes at
    a step boundary): its exit code and stderr, each wait bounded by ``seconds``."""
    process = subprocess.Popen([sys.executable, str(ROOT / "hmmtf" / "__main__.py"), *argv, "--run-dir", str(run_dir)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=run_dir.parent,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    lock = run_dir / LOCK_FILE
    deadline = time.monotonic() + seconds
    while not (lock.is_file() and lock.read_text() == f"{process.pid}\n"):
        assert process.poll() is None and time.monotonic() < deadline, "the training never took its lock"
        time.sleep(0.01)
    process.send_signal(number)
    _, stderr = process.communicate(timeout=seconds)
    return process.returncode, stderr


@pytest.mark.long_running
def test_a_run_interrupted_by_sigint_resumes_to_the_uninterrupted_run_bit_for_bit(tmp_path, capsys):
    """A real SIGINT to ``hmmtf train`` in a subprocess, sent once its lock file names it (its
    handlers are installed by then, so the stop comes at a step boundary): one line, exit code 130,
    a checkpoint; the same command resumes it to the uninterrupted run's weights, AdamW state and log.
    The subprocess restarts itself with glibc's training tunables (empirical/training/allocator.py), under the
    same process id; the runs in this process do not, so the bits are also the same under both."""
    steps = 20
    argv = ["--preset", "tiny", "--steps", str(steps), "--threads", "1", "--no-progress"]
    interrupted = tmp_path / "interrupted"
    returncode, stderr = _signalled_once_locked(["train", *argv], interrupted, signal.SIGINT, 120)
    assert returncode == 130, stderr
    (line,) = stderr.splitlines()  # no traceback, and no word of the quiet restart
    stopped = re.fullmatch(rf"hmmtf train: interrupted by SIGINT at step (\d+) of {steps}; checkpoint written to "
                           rf"{re.escape(str(interrupted / CHECKPOINT_DIR))}; rerun the same command to resume", line)
    assert stopped, line
    step = int(stopped[1])
    assert 1 <= step < steps and load_checkpoint(interrupted / CHECKPOINT_DIR).config["step"] == step
    assert (interrupted / LOCK_FILE).read_text() == ""

    assert hmmtf.main(["train", *argv, "--run-dir", str(interrupted)]) == 0
    assert f"resumed from step {step} of {steps} ({interrupted / CHECKPOINT_DIR})\n" in capsys.readouterr().err
    assert hmmtf.main(["train", *argv, "--run-dir", str(tmp_path / "straight")]) == 0
    assert_same_runs(tmp_path / "straight", interrupted)


@pytest.mark.long_running
def test_a_curve_stopped_by_sigterm_checkpoints_and_its_rerun_ends_as_the_uninterrupted_curve(tmp_path):
    """A real SIGTERM to ``hmmtf curve`` once its training holds the run folder's lock: one line,
    exit code 143, a checkpoint at the step it stopped; the same command then finishes it, with the
    uninterrupted run's curve and weights."""
    steps = 20
    argv = ["curve", "--preset", "tiny", "--steps", str(steps), "--every", "10", "--curve-prompts", "4",
            "--fresh-tasks", "8", "--ceiling-particles", "0", "--threads", "1"]
    interrupted = tmp_path / "interrupted"
    returncode, stderr = _signalled_once_locked(argv, interrupted, signal.SIGTERM, 180)
    assert returncode == 143, stderr
    line = stderr.splitlines()[-1]
    stopped = re.fullmatch(rf"hmmtf curve: interrupted by SIGTERM at step (\d+) of {steps}; checkpoint written to "
                           rf"{re.escape(str(interrupted / CHECKPOINT_DIR))}; rerun the same command to resume", line)
    assert stopped, stderr
    assert 1 <= int(stopped[1]) < steps and load_checkpoint(interrupted / CHECKPOINT_DIR).config["step"] == int(stopped[1])
    assert hmmtf.main([*argv, "--run-dir", str(interrupted)]) == 0
    assert hmmtf.main([*argv, "--run-dir", str(tmp_path / "straight")]) == 0
    assert_same_runs(tmp_path / "straight", interrupted)
    curves = [[{key: point[key] for key in ("step", "test_sequence", "all_positions")}
               for point in map(json.loads, (folder / "curve.jsonl").read_text().splitlines())]
              for folder in (tmp_path / "straight", interrupted)]
    assert curves[0] == curves[1] and [point["step"] for point in curves[0]] == [10, 20]


NUMERIC_FIELDS = [(section, field, kind) for section, fields in SECTIONS.items() for field, kind in fields.items()
                  if kind in (int, float)]
"""Every numeric value a run can be given, by flag or by config file (both go through resolve)."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option=st.sampled_from(NUMERIC_FIELDS), data=st.data())
def test_every_numeric_value_is_finite_and_in_range_or_refused_in_one_line_naming_it(option, data):
    """NaN, infinities, zero, negatives and huge values into every numeric field: either a run that
    holds the value (each accepted value has a documented meaning: a long run, seed 0, no weight
    decay), or a ValueError of one line that begins with a field's name and names this field (a
    relation between two fields begins with the other: ``num_heads: 2 does not divide width 1``)."""
    section, field, kind = option
    special = [0, -1, 10**18] if kind is int else [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e300, 5e-324]
    drawn = st.integers(-10**20, 10**20) if kind is int else st.floats(allow_nan=True, allow_infinity=True)
    value = data.draw(st.one_of(st.sampled_from(special), drawn))
    try:
        run = resolve("tiny", {section: {field: value}})
    except ValueError as error:
        message = str(error)
        named = message.split(": ")[0]
        assert "\n" not in message and any(named in fields for fields in SECTIONS.values()), message
        assert re.search(rf"\b{field}\b", message), message
        return
    assert kind is int or math.isfinite(value), (field, value)
    resolved = dict(run.changes)
    assert resolved.get(field, value) == value or field in ("warmup_steps",), (field, value, resolved.get(field))
