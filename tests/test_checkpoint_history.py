"""``hmmtf restore-checkpoint`` against a real git repository made in ``tmp_path``, and the one line
that a checkpoint folder without its tensors answers with: it names that command."""
import json
import subprocess

import pytest

import hmmtf
from empirical.training.checkpoint import CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE, load_checkpoint
from empirical.training.checkpoint_history import restore_checkpoint
from empirical.training.model import RoFormerConfig
from empirical.training.train import CHECKPOINT_DIR, TrainConfig, branch_run, train
from test_empirical_train import random_batch

MODEL = RoFormerConfig(vocab_size=6, num_layers=1, num_heads=2, width=8)
CONSTANT = TrainConfig(steps=100, batch_size=8, learning_rate=3e-3, min_lr_ratio=1.0, warmup_steps=2, log_every=1)


def git(repository, *arguments) -> str:
    return subprocess.run(["git", *arguments], cwd=repository, capture_output=True, text=True, check=True).stdout


def committed_run(repository):
    """A repository whose first commit holds a run stopped at step 3 (``run/checkpoint``), and whose
    second removes its two tensor files; ``(checkpoint folder, {file: its committed bytes})``."""
    repository.mkdir(exist_ok=True)
    git(repository, "init", "-q")
    git(repository, "config", "user.email", "test@example.com")
    git(repository, "config", "user.name", "test")
    train(MODEL, CONSTANT, random_batch, repository / "run", stop_at=3, progress=False)
    checkpoint = repository / "run" / CHECKPOINT_DIR
    committed = {name: (checkpoint / name).read_bytes() for name in (MODEL_FILE, OPTIMIZER_FILE)}
    git(repository, "add", "run")
    git(repository, "commit", "-q", "-m", "the run at step 3")
    git(repository, "rm", "-q", *(f"run/{CHECKPOINT_DIR}/{name}" for name in committed))
    git(repository, "commit", "-q", "-m", "its tensors leave the tree")
    return checkpoint, committed


def test_restore_writes_back_the_last_committed_tensors_byte_for_byte(tmp_path):
    checkpoint, committed = committed_run(tmp_path)
    first = git(tmp_path, "rev-list", "--max-parents=0", "HEAD").strip()
    assert restore_checkpoint(checkpoint) == {MODEL_FILE: first, OPTIMIZER_FILE: first}
    for name, data in committed.items():
        assert (checkpoint / name).read_bytes() == data, name
    assert load_checkpoint(checkpoint).optimizer_state is not None
    assert restore_checkpoint(checkpoint) == {}  # holds both: nothing to do, nothing touched
    assert sorted(path.name for path in checkpoint.iterdir()) == sorted([CONFIG_FILE, *committed])


def test_restore_then_resume_continues_the_run_bit_for_bit(tmp_path):
    checkpoint, _ = committed_run(tmp_path / "repository")
    straight = train(MODEL, CONSTANT, random_batch, tmp_path / "straight", stop_at=5, progress=False)
    restore_checkpoint(checkpoint)
    resumed = train(MODEL, CONSTANT, random_batch, checkpoint.parent, stop_at=5, progress=False)
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert a.equal(b), name


def test_a_record_added_to_the_config_later_does_not_stop_the_restore(tmp_path):
    """A field outside the run's state (here ``branched_from``, added to committed configs after
    the fact) differs from the commit that holds the tensors: they are still this step's."""
    checkpoint, committed = committed_run(tmp_path)
    config = json.loads((checkpoint / CONFIG_FILE).read_text())
    (checkpoint / CONFIG_FILE).write_text(json.dumps(dict(config, branched_from={"run_dir": "x", "step": 1})))
    git(tmp_path, "commit", "-q", "-am", "a record added")
    restore_checkpoint(checkpoint)
    for name, data in committed.items():
        assert (checkpoint / name).read_bytes() == data, name


def test_weights_only_restores_the_weights_alone(tmp_path):
    checkpoint, committed = committed_run(tmp_path)
    assert list(restore_checkpoint(checkpoint, weights_only=True)) == [MODEL_FILE]
    assert (checkpoint / MODEL_FILE).read_bytes() == committed[MODEL_FILE]
    assert not (checkpoint / OPTIMIZER_FILE).exists()
    assert load_checkpoint(checkpoint).optimizer_state is None


def test_restore_refuses_tensors_of_another_step_and_writes_nothing(tmp_path):
    """The run moved on (its config.json says step 4) without committing tensors: the committed
    ones are of step 3, so they are refused."""
    checkpoint, _ = committed_run(tmp_path)
    config = json.loads((checkpoint / CONFIG_FILE).read_text())
    (checkpoint / CONFIG_FILE).write_text(json.dumps(dict(config, step=4), indent=2) + "\n")
    with pytest.raises(ValueError, match=r"no commit holds .*model\.safetensors.* of this config\.json's run and step 4"):
        restore_checkpoint(checkpoint)
    assert sorted(path.name for path in checkpoint.iterdir()) == [CONFIG_FILE]


def test_restore_refuses_a_file_never_committed(tmp_path):
    checkpoint, _ = committed_run(tmp_path)
    git(tmp_path, "mv", "run", "moved")
    git(tmp_path, "commit", "-q", "-m", "a folder whose tensors were never committed under its name")
    with pytest.raises(ValueError, match="no commit holds .*moved/checkpoint/model.safetensors"):
        restore_checkpoint(tmp_path / "moved" / CHECKPOINT_DIR)


def test_restore_refuses_outside_a_git_checkout(tmp_path):
    train(MODEL, CONSTANT, random_batch, tmp_path / "run", stop_at=1, progress=False)
    checkpoint = tmp_path / "run" / CHECKPOINT_DIR
    (checkpoint / MODEL_FILE).unlink()
    with pytest.raises(ValueError, match="is not in a git checkout"):
        restore_checkpoint(checkpoint)


def test_the_command_restores_and_reports_in_one_line(tmp_path, capsys):
    checkpoint, committed = committed_run(tmp_path)
    assert hmmtf.main(["restore-checkpoint", str(checkpoint), "--weights-only"]) == 0
    assert capsys.readouterr().out.startswith(f"{checkpoint / MODEL_FILE}: restored from commit ")
    (checkpoint / CONFIG_FILE).write_text(json.dumps({"step": 2}) + "\n")
    assert hmmtf.main(["restore-checkpoint", str(checkpoint)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("hmmtf restore-checkpoint: error: checkpoint: no commit holds ")


def test_without_its_tensors_a_committed_run_refuses_to_resume_or_branch_naming_the_restore(tmp_path):
    """A run folder as models/curves holds it (config.json alone): evaluating, resuming and
    branching all stop at the missing weights, in one line that names the restore command."""
    checkpoint, _ = committed_run(tmp_path)
    restore = f"hmmtf restore-checkpoint {checkpoint}"
    with pytest.raises(ValueError, match="model.safetensors' does not exist") as error:
        train(MODEL, CONSTANT, random_batch, checkpoint.parent, stop_at=4, progress=False)
    assert restore in str(error.value) and "\n" not in str(error.value)
    decaying = TrainConfig(steps=8, batch_size=8, learning_rate=3e-3, min_lr_ratio=0.0, warmup_steps=2,
                           decay_steps=5, log_every=1)
    with pytest.raises(ValueError, match="model.safetensors' does not exist") as error:
        branch_run(checkpoint.parent, tmp_path / "branch", MODEL, decaying)
    assert restore in str(error.value)


def test_without_its_weights_a_checkpoint_names_the_restore_command(tmp_path):
    train(MODEL, CONSTANT, random_batch, tmp_path / "run", stop_at=1, progress=False)
    checkpoint = tmp_path / "run" / CHECKPOINT_DIR
    (checkpoint / MODEL_FILE).unlink()
    with pytest.raises(ValueError, match=f"model.safetensors' does not exist.*hmmtf restore-checkpoint {checkpoint}"):
        load_checkpoint(checkpoint)
