"""The trained models shipped under models/ (models/README.md): each loads by path and its weights
reproduce the loss its committed evaluation recorded on fresh HMMs. Most of their weights are in git
history, not in the tree (README, "The tracked tree stays at most 35 MiB"): the test writes them back
first, as ``hmmtf restore-checkpoint models/NAME --weights-only`` does."""
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import hmm
from empirical.training.checkpoint import CONFIG_FILE, MODEL_CONFIG_KEY, MODEL_FILE, load_checkpoint
from empirical.training.checkpoint_history import restore_checkpoint
from empirical.yardsticks.competence import per_prompt_loss, scope_rows
from empirical.training.data import stream_seed
from empirical.yardsticks.evaluate import model_predictor
from empirical.training.presets import preset_from_task
from empirical.yardsticks.regime import FRESH_MIXTURE_STREAM, FRESH_PROMPT_STREAM, unseen_mixture

ROOT = Path(__file__).resolve().parents[1]
MODELS = sorted(path.parent for path in (ROOT / "models").glob(f"*/{CONFIG_FILE}"))
"""The shipped models: a folder of models/ that is a checkpoint (``config.json``, its weights beside it
or in git history)."""
FLOAT32_LOSS_BOUND = 1e-5
"""Relative: the recorded loss came from this code on these weights; another machine's float32
kernels may sum the logits' products in another order. Each logit's relative rounding is at most
about (depth x 3 products + norms) x width x eps32 ~ 8 x 4 x 64 x 6e-8 = 1.5e-4 in the worst case;
averaged over 100,000 tokens with independent signs it is far below 1e-5 of a loss of 1.9."""


EVALUATIONS = {"cpu-small": "figures/ladder/cpu-small", "tasks-64-small": "figures/ladder/tasks-64-small",
               "tasks-1024-small": "figures/ladder/tasks-1024-small", "tasks-1024-deep": "figures/ladder/tasks-1024-deep",
               "tasks-8192-small": "figures/ladder/tasks-8192-small", "tasks-8192-deep": "figures/ladder/tasks-8192-deep",
               "observable-2x4x64": "figures/observable/2x4x64", "observable-4x4x64": "figures/observable/4x4x64",
               "paper-2x4x64": "figures/paper/2x4x64", "paper-4x4x64": "figures/paper/4x4x64",
               "paper-4x4x64-long": "figures/paper/4x4x64-long"}
"""The folder of each shipped model's committed evaluation (models/README.md's "its results")."""


def test_models_are_shipped_each_with_its_evaluation():
    assert MODELS, f"no models/*/{CONFIG_FILE}"
    assert (ROOT / "models" / "README.md").is_file()
    assert {folder.name for folder in MODELS} == set(EVALUATIONS)


COMMITTED_WEIGHTS = sorted((ROOT / "models").rglob(MODEL_FILE))
"""Every weights file under models/: the shipped models and the run folders' checkpoints."""


@pytest.mark.parametrize("weights", COMMITTED_WEIGHTS, ids=[str(path.parent.relative_to(ROOT)) for path in COMMITTED_WEIGHTS])
def test_every_committed_network_carries_its_config_so_that_an_edited_config_is_refused(weights):
    """No exception to load_checkpoint's full check (empirical/training/checkpoint.py): the config
    stored in the weights file equals config.json's model section beside it."""
    with safe_open(str(weights), "pt") as stored:
        metadata = stored.metadata() or {}
    assert MODEL_CONFIG_KEY in metadata, f"{weights} has no stored config"
    assert json.loads(metadata[MODEL_CONFIG_KEY]) == json.loads((weights.parent / CONFIG_FILE).read_text())["model"]


@pytest.mark.long_running
@pytest.mark.parametrize("folder", MODELS, ids=[path.name for path in MODELS])
def test_a_shipped_model_reproduces_its_recorded_fresh_hmm_loss(folder):
    restore_checkpoint(folder, weights_only=True)
    evaluation = json.loads((ROOT / EVALUATIONS[folder.name] / "evaluation.json").read_text())
    saved = load_checkpoint(folder)
    assert saved.config["step"] == evaluation["step"] and saved.config["model"] == evaluation["model"]
    preset = preset_from_task(saved.config["task"])
    regime = evaluation["regime"]
    fresh = unseen_mixture(preset, regime["fresh_tasks"], FRESH_MIXTURE_STREAM)
    prompts = hmm.sample_prompts(fresh, regime["fresh_hmms"]["num_prompts"], preset.prompt_format,
                                 seed=stream_seed(preset.data_seed, FRESH_PROMPT_STREAM, 0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        probabilities = model_predictor(saved.model, fresh.num_tokens)(prompts.tokens)
    finally:
        torch.set_num_threads(threads)
    rows = scope_rows(preset.prompt_format)["all_positions"]
    loss = per_prompt_loss(probabilities, prompts.tokens, fresh.num_tokens, rows).mean().item()
    assert loss == pytest.approx(regime["fresh_hmms"]["all_positions"]["model"]["loss"], rel=FLOAT32_LOSS_BOUND, abs=0)
