"""``load_run``: a checkpoint with the preset, mixture and held-out prompts it was trained on, from
a shipped model, a run folder or its checkpoint folder; bad paths and counts refused by name. The
``hmmtf`` commands that read a checkpoint accept the same folders and refuse the same paths with
the same message (one resolver, :func:`empirical.training.runs.checkpoint_folder`)."""
import json
import shutil
from pathlib import Path

import pytest
import torch

import hmm
import hmmtf
import tiny_pipeline
from empirical.training.checkpoint import load_checkpoint
from empirical.training.data import held_out_prompts
from empirical.training.runs import checkpoint_folder, load_run
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE
from recorded_figures import figures_recorded_not_drawn

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "tasks-8192-small"


def assert_same_weights(first: torch.nn.Module, second: torch.nn.Module) -> None:
    assert first.state_dict().keys() == second.state_dict().keys()
    for name, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[name]), name


def test_a_shipped_model_loads_with_its_mixture_and_prompts():
    run = load_run(SHIPPED, num_prompts=3)
    assert run.checkpoint == SHIPPED and not run.model.training
    assert_same_weights(run.model, load_checkpoint(SHIPPED).model)
    task = run.config["task"]
    assert (run.preset.name, run.preset.mixture_seed, run.preset.data_seed) == (
        "tasks-8192-small", task["mixture_seed"], task["data_seed"])
    assert run.mixture.num_tasks == task["mixture_spec"]["num_tasks"] == 8192
    assert run.prompt_format == hmm.PromptFormat(**task["prompt_format"])
    assert run.prompts.tokens.shape == (3, run.prompt_format.length)
    assert run.prompts.format == run.prompt_format
    delimiters = run.prompts.tokens[:, run.prompt_format.is_delimiter]
    assert torch.all(delimiters == run.mixture.delimiter)
    assert run.model.config.vocab_size == run.mixture.num_tokens + 1


@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_a_run_folder_and_its_checkpoint_folder_load_the_same_run(tiny_run):
    from_run, from_checkpoint = load_run(tiny_run, num_prompts=5), load_run(tiny_run / CHECKPOINT_DIR, num_prompts=5)
    assert from_run.checkpoint == from_checkpoint.checkpoint == tiny_run / CHECKPOINT_DIR
    assert_same_weights(from_run.model, from_checkpoint.model)
    assert torch.equal(from_run.prompts.tokens, from_checkpoint.prompts.tokens)
    assert from_run.config["step"] == tiny_pipeline.STEPS and from_run.preset.name == "tiny"


@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_held_out_prompts_are_the_evaluation_stream(tiny_run):
    """The prompts of ``hmmtf evaluate`` (:func:`held_out_prompts` of the preset's data seed); by
    default as many as the preset evaluates."""
    run = load_run(tiny_run)
    expected = held_out_prompts(run.mixture, run.prompt_format, run.preset.eval_prompts, run.preset.data_seed)
    assert torch.equal(run.prompts.tokens, expected.tokens)
    assert torch.equal(run.prompts.task_ids, expected.task_ids)


@pytest.mark.parametrize("count", [0, -1, 2.0, True])
def test_a_count_below_one_or_not_an_integer_is_refused(count):
    with pytest.raises(ValueError, match=rf"^num_prompts: {count!r}; expected an integer >= 1"):
        load_run(SHIPPED, num_prompts=count)


def test_a_folder_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(ValueError, match=rf"^path: '{tmp_path}' holds no checkpoint; expected a checkpoint folder"):
        checkpoint_folder(tmp_path)


@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_a_run_whose_save_was_interrupted_is_refused_with_the_paths_to_restore(tiny_run, tmp_path):
    """``runs/NAME`` whose ``checkpoint`` was renamed away by a save that did not finish: the
    checkpoint module's refusal, not "holds no checkpoint"."""
    shutil.copytree(tiny_run / CHECKPOINT_DIR, tmp_path / f"{CHECKPOINT_DIR}.old")
    with pytest.raises(ValueError, match=r"a save was interrupted"):
        load_run(tmp_path)


CHECKPOINT_COMMANDS = {
    "evaluate": ["evaluate", "{path}"],
    "analyze": ["analyze", "{path}"],
    "heads": ["heads", "{path}", "--out", "{out}"],
    "export": ["export", "{path}", "--to", "transformer-lens", "{out}"],
}
"""A command line of each way a checkpoint is read from the command line (``klmap`` and
``beliefs`` are ``heads``'s kind of command, :func:`hmmtf.commands.analyze.add_measure_command`)."""


@pytest.mark.parametrize("command", CHECKPOINT_COMMANDS)
@pytest.mark.parametrize("made", ["missing", "empty"])
def test_every_command_refuses_what_load_run_refuses_with_its_message(command, made, tmp_path, capsys):
    path = tmp_path / "run"
    if made == "empty":
        path.mkdir()
    with pytest.raises((ValueError, FileNotFoundError)) as refusal:
        load_run(path)
    argv = [word.format(path=path, out=tmp_path / "out") for word in CHECKPOINT_COMMANDS[command]]
    assert hmmtf.main(argv) == 2
    message = str(refusal.value)
    assert message.startswith("path: ")
    assert capsys.readouterr().err == f"hmmtf {command}: error: checkpoint: {message.removeprefix('path: ')}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_evaluate_reads_a_run_folder_as_load_run_does_and_says_the_loss_figure_it_cannot_draw(tiny_run, tmp_path,
                                                                                               capsys):
    """A run folder whose training log is missing (copied without it): ``hmmtf evaluate RUN_DIR``
    evaluates its checkpoint/ and says, in one line, that ``training_loss.png`` is not drawn and why."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run / CHECKPOINT_DIR, run / CHECKPOINT_DIR)
    out = tmp_path / "evaluation"
    with figures_recorded_not_drawn() as figures:
        assert hmmtf.main(["evaluate", str(run), "--num-prompts", "4", "--out", str(out), "--hand-built-prompts", "0",
                           "--fresh-tasks", "0", "--ceiling-particles", "0"]) == 0
    assert [path.name for path in figures] == ["in_context.png"]
    said = (f"hmmtf evaluate: training_loss.png not drawn and metrics.jsonl not copied: {str(run / METRICS_FILE)!r} "
            f"does not exist (expected the training log of hmmtf train, beside its checkpoint/, one JSON record a line)")
    assert said in capsys.readouterr().err.replace("\r", "\n").splitlines()  # among the progress bars
    report = json.loads((out / "evaluation.json").read_text())
    assert report["checkpoint"] == str(load_run(run, num_prompts=1).checkpoint) == str(run / CHECKPOINT_DIR)
    assert report["step"] == tiny_pipeline.STEPS
