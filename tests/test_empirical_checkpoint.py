"""Checkpoints that do not hold what they claim are refused, naming the file: a truncated weight or
optimizer file; a config.json whose model section differs from the config the weights were saved
with (also in fields that change no shape); weights whose tensors do not fit the network the config
describes (the only check for weights saved before the config was stored beside them, such as the
committed models/tasks-8192-small, which keeps loading)."""
import json
import os
import re
import stat
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_model

from empirical.training.checkpoint import CONFIG_FILE, MODEL_CONFIG_KEY, MODEL_FILE, OPTIMIZER_FILE, load_checkpoint, save_checkpoint
from empirical.training.model import RoFormer, RoFormerConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIG = RoFormerConfig(vocab_size=5, num_layers=1, num_heads=2, width=8)


def saved_checkpoint(folder: Path, config: RoFormerConfig = CONFIG) -> Path:
    """A checkpoint of a fresh RoFormer with an AdamW state after one step, in ``folder/checkpoint``."""
    torch.manual_seed(0)
    model = RoFormer(config)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
    optimizer.step()
    save_checkpoint(folder / "checkpoint", model, optimizer, {"step": 1, "task": {}, "train": {}})
    return folder / "checkpoint"


def edit_model_section(checkpoint: Path, **fields) -> None:
    config = json.loads((checkpoint / CONFIG_FILE).read_text())
    config["model"].update(fields)
    (checkpoint / CONFIG_FILE).write_text(json.dumps(config))


def without_stored_config(checkpoint: Path) -> None:
    """Rewrite the weights as :func:`save_checkpoint` did before it stored the model config."""
    model = RoFormer(RoFormerConfig.from_dict(json.loads((checkpoint / CONFIG_FILE).read_text())["model"]))
    model.load_state_dict(load_checkpoint(checkpoint).model.state_dict())
    save_model(model, str(checkpoint / MODEL_FILE))


def test_a_checkpoint_round_trips_and_stores_its_model_config_with_the_weights(tmp_path):
    checkpoint = saved_checkpoint(tmp_path)
    loaded = load_checkpoint(checkpoint)
    assert loaded.model.config == CONFIG and loaded.optimizer_state is not None
    with safe_open(str(checkpoint / MODEL_FILE), framework="pt") as weights:
        assert json.loads(weights.metadata()[MODEL_CONFIG_KEY]) == CONFIG.to_dict()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_tensor_files_have_the_mode_the_umask_gives_a_new_file(tmp_path, umask):
    """safetensors writes 0600 whatever the umask (issue 53: every weight file was 0600 under umask
    022); a checkpoint's files take the mode ``0o666 & ~umask``, as its config.json does."""
    previous = os.umask(umask)
    try:
        checkpoint = saved_checkpoint(tmp_path)
    finally:
        os.umask(previous)
    modes = {name: stat.S_IMODE((checkpoint / name).stat().st_mode) for name in (MODEL_FILE, OPTIMIZER_FILE, CONFIG_FILE)}
    assert modes == dict.fromkeys(modes, 0o666 & ~umask)


@pytest.mark.parametrize("name", [MODEL_FILE, OPTIMIZER_FILE])
@pytest.mark.parametrize("keep", [0.5, 8 / 9, 0.0])
def test_a_truncated_weight_or_optimizer_file_is_refused_naming_it(tmp_path, name, keep):
    checkpoint = saved_checkpoint(tmp_path)
    data = (checkpoint / name).read_bytes()
    (checkpoint / name).write_bytes(data[: int(len(data) * keep)])
    path = re.escape(repr(str(checkpoint / name)))
    with pytest.raises(ValueError, match=f"checkpoint: {path} is not a complete safetensors file"):
        load_checkpoint(checkpoint)


def test_a_missing_weight_file_or_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"checkpoint: {str(tmp_path / 'nothing')!r} does not exist")):
        load_checkpoint(tmp_path / "nothing")
    checkpoint = saved_checkpoint(tmp_path)
    (checkpoint / MODEL_FILE).unlink()
    with pytest.raises(ValueError, match=re.escape(f"checkpoint: {str(checkpoint / MODEL_FILE)!r} does not exist")):
        load_checkpoint(checkpoint)


def test_a_config_that_is_not_json_is_refused_naming_it(tmp_path):
    checkpoint = saved_checkpoint(tmp_path)
    (checkpoint / CONFIG_FILE).write_text('{"model": ')
    with pytest.raises(ValueError, match=re.escape(f"checkpoint: {str(checkpoint / CONFIG_FILE)!r} is not JSON")):
        load_checkpoint(checkpoint)


@pytest.mark.parametrize(("field", "edited", "saved"), [
    ("num_heads", 4, 2),             # the same tensors, another network
    ("rotary_base", 500.0, 10000.0),
    ("init_std", 0.5, 0.02),
    ("tie_embeddings", True, False),
    ("width", 16, 8),
])
def test_a_config_edited_after_saving_is_refused_naming_the_field_and_both_values(tmp_path, field, edited, saved):
    checkpoint = saved_checkpoint(tmp_path)
    edit_model_section(checkpoint, **{field: edited})
    message = (f"checkpoint: the model section of {str(checkpoint / CONFIG_FILE)!r} differs from the config "
               f"{str(checkpoint / MODEL_FILE)!r} was saved with: {field} = {edited!r} there but {saved!r} in the weights; "
               f"expected the config saved with the weights")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_checkpoint(checkpoint)


def test_a_task_edited_after_saving_is_refused_naming_the_field_and_both_values(tmp_path):
    """Issue 68, item 6: an edited mixture seed would have the network scored on another mixture."""
    torch.manual_seed(0)
    model, task = RoFormer(CONFIG), {"preset": "tiny", "mixture": "tiny", "mixture_seed": 0, "data_seed": 0}
    save_checkpoint(tmp_path / "checkpoint", model, None, {"step": 1, "task": task, "train": {}})
    config = json.loads((tmp_path / "checkpoint" / CONFIG_FILE).read_text())
    config["task"]["mixture_seed"] = 7
    (tmp_path / "checkpoint" / CONFIG_FILE).write_text(json.dumps(config))
    message = (f"checkpoint: the task section of {str(tmp_path / 'checkpoint' / CONFIG_FILE)!r} differs from the config "
               f"{str(tmp_path / 'checkpoint' / MODEL_FILE)!r} was saved with: mixture_seed = 7 there but 0 in the "
               f"weights; expected the config saved with the weights")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_checkpoint(tmp_path / "checkpoint")
    config["task"]["mixture_seed"] = 0
    (tmp_path / "checkpoint" / CONFIG_FILE).write_text(json.dumps(config))
    assert load_checkpoint(tmp_path / "checkpoint").config["task"] == task


def test_without_a_stored_config_the_shapes_are_checked_naming_the_tensor_and_both_shapes(tmp_path):
    checkpoint = saved_checkpoint(tmp_path)
    without_stored_config(checkpoint)
    assert load_checkpoint(checkpoint).model.config == CONFIG
    edit_model_section(checkpoint, mlp_ratio=2)
    message = (f"checkpoint: tensor 'blocks.0.mlp.0.weight' has shape [32, 8] in {str(checkpoint / MODEL_FILE)!r} but "
               f"[16, 8] in the network {str(checkpoint / CONFIG_FILE)!r} describes")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_checkpoint(checkpoint)
    edit_model_section(checkpoint, mlp_ratio=4, num_layers=2)
    with pytest.raises(ValueError, match="has tensor 'blocks.1.ln1.weight' of shape \\[8\\], which .* lacks"):
        load_checkpoint(checkpoint)
    edit_model_section(checkpoint, num_layers=1, tie_embeddings=True)
    with pytest.raises(ValueError, match=re.escape("holds separate tensors ['embed.weight', 'unembed.weight'], one "
                                                   "shared tensor in the network")):
        load_checkpoint(checkpoint)


def test_tied_embeddings_round_trip_and_must_stay_tied(tmp_path):
    """safetensors saves a tied matrix once (and names its other name in the metadata)."""
    tied = RoFormerConfig(vocab_size=5, num_layers=1, num_heads=2, width=8, tie_embeddings=True)
    loaded = load_checkpoint(saved_checkpoint(tmp_path, tied)).model
    assert loaded.unembed.weight is loaded.embed.weight
    without_stored_config(tmp_path / "checkpoint")
    assert load_checkpoint(tmp_path / "checkpoint").model.config == tied
    edit_model_section(tmp_path / "checkpoint", tie_embeddings=False)
    with pytest.raises(ValueError, match="has tensor 'unembed.weight' of shape \\[5, 8\\], which .* lacks"):
        load_checkpoint(tmp_path / "checkpoint")


def test_an_invalid_model_field_is_refused_naming_the_config_file(tmp_path):
    checkpoint = saved_checkpoint(tmp_path)
    without_stored_config(checkpoint)
    edit_model_section(checkpoint, num_heads=3)
    with pytest.raises(ValueError, match=re.escape(f"checkpoint: {str(checkpoint / CONFIG_FILE)!r}, model section: "
                                                   f"num_heads: 3 does not divide width 8")):
        load_checkpoint(checkpoint)


def test_a_copy_of_the_oldest_shipped_model_with_edited_heads_and_rotary_base_is_refused(tmp_path):
    """models/tasks-8192-small predates the stored config and was re-saved with it (models/README.md):
    an edit that changes no shape, in a copy, is refused like any other checkpoint's."""
    folder = ROOT / "models" / "tasks-8192-small"
    with safe_open(str(folder / MODEL_FILE), framework="pt") as weights:
        assert json.loads(weights.metadata()[MODEL_CONFIG_KEY]) == json.loads((folder / CONFIG_FILE).read_text())["model"]
    copy = tmp_path / "tasks-8192-small"
    copy.mkdir()
    for name in (MODEL_FILE, CONFIG_FILE):
        (copy / name).write_bytes((folder / name).read_bytes())
    assert load_checkpoint(copy).model.config.num_heads == 4
    edit_model_section(copy, num_heads=8, rotary_base=500.0)
    with pytest.raises(ValueError, match=re.escape("num_heads = 8 there but 4 in the weights; rotary_base = 500.0 there "
                                                   "but 10000.0 in the weights")):
        load_checkpoint(copy)
