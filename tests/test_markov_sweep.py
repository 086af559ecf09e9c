"""The Markov sweep (:mod:`empirical.markov`): trap criterion, aggregation on planted runs,
prediction summaries of planted predictors, attention scores, wiring of one short training run,
and input validation."""
import json

import numpy as np
import pytest
import torch

from empirical.markov.aggregate import aggregate_cells, plateau_survival
from empirical.markov.attention import attention_scores, induction_targets
from empirical.markov.chains import binary_kernel, is_memoryless, reference_losses, stationary_distribution
from empirical.markov.commands import write_sweep
from empirical.markov.config import ARCHITECTURES, MarkovSweepConfig
from empirical.markov.criterion import (
    TRAP_THRESHOLD,
    escape_step,
    is_trapped,
    relative_excess,
    summarise_predictions,
    unigram_bigram_gap,
)
from empirical.markov.runs import MarkovStream, held_out_sequences, train_and_evaluate
from empirical.model import RoFormer, RoFormerConfig
from markov_oracles import bigram_log_probs
import hmmtf


def planted_run(architecture: str, p: float, q: float, seed: int, relative: float) -> dict:
    """A run record whose final loss sits at ``relative`` of the way from the bigram to the unigram line."""
    gap = unigram_bigram_gap(p, q)
    return {
        "architecture": architecture, "p": p, "q": q, "seed": seed,
        "excess": relative * gap, "relative_excess": relative, "trapped": is_trapped(relative),
        "memory_coordinate": 1.0 - relative, "escape_step": None if relative > 0.5 else 10 * (seed + 1),
        "loss_curve": {"step": [10, 20], "loss": [0.7, reference_losses(binary_kernel(p, q)).bigram + relative * gap]},
    }


PLANTED = {
    # (architecture, p, q): relative excess of seeds 0, 1, 2, ...
    ("1-layer-tied", 0.9, 0.8): [1.0, 0.98, 0.02, TRAP_THRESHOLD],
    ("1-layer-tied", 0.2, 0.3): [0.01, 0.0, 0.49, 0.02],
    ("2-layer-tied", 0.9, 0.8): [0.0, 0.51, 0.03, 0.01],
}


def test_aggregation_counts_the_planted_traps():
    runs = [planted_run(arch, p, q, seed, relative)
            for (arch, p, q), values in PLANTED.items() for seed, relative in enumerate(values)]
    runs.reverse()  # aggregation must not depend on the order of the runs
    cells = {(c["architecture"], c["p"], c["q"]): c for c in aggregate_cells(runs)}
    assert set(cells) == set(PLANTED)
    expected_trapped = {("1-layer-tied", 0.9, 0.8): 3, ("1-layer-tied", 0.2, 0.3): 0, ("2-layer-tied", 0.9, 0.8): 1}
    for key, trapped in expected_trapped.items():
        assert cells[key]["seeds"] == 4
        assert cells[key]["trapped"] == trapped
        assert cells[key]["trapped_fraction"] == trapped / 4
        assert cells[key]["relative_excess"] == pytest.approx(PLANTED[key])
    assert cells[("1-layer-tied", 0.2, 0.3)]["escape_step"] == [10, 20, 30, 40]
    references = reference_losses(binary_kernel(0.9, 0.8))
    assert cells[("2-layer-tied", 0.9, 0.8)]["bigram_loss"] == references.bigram
    assert cells[("2-layer-tied", 0.9, 0.8)]["unigram_loss"] == references.unigram


def test_trap_criterion_is_the_midpoint_between_the_lines():
    gap = unigram_bigram_gap(0.9, 0.8)
    assert relative_excess(gap, 0.9, 0.8) == pytest.approx(1.0)
    assert is_trapped(relative_excess(0.5 * gap, 0.9, 0.8))
    assert not is_trapped(relative_excess(0.499 * gap, 0.9, 0.8))


def test_planted_bigram_and_unigram_predictors_are_classified():
    """The kernel itself reaches the bigram line exactly (excess 0, memory 1); predicting ``pi``
    everywhere sits on the unigram line (relative excess 1 up to the sampling error of the
    prefixes: the mean KL over 256 x 64 positions, a few per cent here) and is trapped."""
    p, q = 0.8, 0.7
    kernel = binary_kernel(p, q)
    tokens = held_out_sequences(kernel, 256, 64, seed=0)
    bigram = summarise_predictions(bigram_log_probs(kernel, tokens).exp(), tokens, p, q)
    assert bigram["excess"] == pytest.approx(0.0, abs=1e-12)
    assert bigram["final_loss"] == pytest.approx(reference_losses(kernel).bigram, abs=1e-12)
    assert not bigram["trapped"]
    assert bigram["memory_coordinate"] == pytest.approx(1.0, abs=1e-12)
    unigram = summarise_predictions(torch.from_numpy(stationary_distribution(kernel)).expand(256, 64, 2), tokens, p, q)
    assert unigram["relative_excess"] == pytest.approx(1.0, abs=0.05)
    assert unigram["trapped"]
    assert unigram["memory_coordinate"] == pytest.approx(0.0, abs=1e-12)


def test_escape_step_is_the_first_log_below_the_midpoint():
    references = reference_losses(binary_kernel(0.9, 0.8))
    midpoint = (references.unigram + references.bigram) / 2
    curve = {"step": [10, 20, 30, 40], "loss": [0.7, midpoint + 1e-3, midpoint - 1e-3, midpoint + 1e-3]}
    assert escape_step(curve, 0.9, 0.8) == 30
    assert escape_step({"step": [10], "loss": [midpoint + 1e-3]}, 0.9, 0.8) is None


def test_induction_targets_point_after_the_previous_occurrence():
    tokens = torch.tensor([[0, 1, 1, 0, 1, 0, 0]])
    # t=3 (x=0): previous 0 at s=0 -> target 1; t=4 (x=1): previous 1 at s=2 -> 3; t=5 (x=0): s=3 -> 4;
    # t=2 and t=6 repeat the token before them (s = t-1): no target; t=0, 1: no previous occurrence.
    assert induction_targets(tokens).tolist() == [[-1, -1, -1, 1, 3, 4, -1]]


def test_uniform_attention_scores_the_uniform_baseline():
    """Zero query weights make every attention row uniform over the causal window, so the
    previous-token score is ``mean 1/(t+1)`` and the induction score equals its baseline."""
    model = RoFormer(RoFormerConfig(vocab_size=2, num_layers=2, num_heads=2, width=8))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:8].zero_()
            block.attn.qkv.bias[:8].zero_()
    tokens = held_out_sequences(binary_kernel(0.3, 0.6), 16, 20, seed=1)
    _, cache = model.run_with_cache(tokens)
    scores = attention_scores(cache, tokens)
    uniform_previous = float(np.mean([1 / (t + 1) for t in range(1, 20)]))
    assert np.allclose(scores["previous_token"], uniform_previous, atol=1e-6)
    assert np.allclose(scores["induction"], scores["uniform_induction"], atol=1e-6)
    assert np.array(scores["induction"]).shape == (2, 2)


def test_markov_stream_targets_are_the_next_tokens_and_depend_only_on_the_step():
    stream = MarkovStream(binary_kernel(0.2, 0.9), batch_size=4, length=10, seed=3)
    batch = stream(7)
    assert batch.inputs.shape == batch.targets.shape == (4, 10)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert torch.equal(stream(7).inputs, batch.inputs)
    assert not torch.equal(stream(8).inputs, batch.inputs)


def test_one_short_run_is_wired_through_the_training_loop(tmp_path):
    config = MarkovSweepConfig(p_values=(0.9,), q_values=(0.8,), architectures=("2-layer-tied",), seeds=1,
                               steps=30, warmup_steps=2, log_every=10, eval_sequences=8, sequence_length=16,
                               batch_size=8, init_std=0.05, workers=1)
    run = train_and_evaluate(config, "2-layer-tied", 0.9, 0.8, seed=0)
    assert run["loss_curve"]["step"] == [10, 20, 30]
    assert len(run["attention"]["induction"]) == 2
    assert run["excess"] >= 0
    assert run["final_loss"] == pytest.approx(reference_losses(binary_kernel(0.9, 0.8)).bigram + run["excess"])
    document = write_sweep([run], config, tmp_path, command="hmmtf markov-sweep", wall_seconds=1.0)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["cells"] == document["cells"] and saved["cells"][0]["seeds"] == 1
    assert saved["config"]["init_std"] == 0.05
    assert saved["command"] == "hmmtf markov-sweep"
    assert (tmp_path / "phase_diagram.png").stat().st_size > 0
    assert (tmp_path / "loss_curves.png").stat().st_size > 0
    assert (tmp_path / "plateau_survival.png").stat().st_size > 0


def test_command_line_runs_a_tiny_sweep(tmp_path):
    """``hmmtf markov-sweep`` end to end (one worker process, one cell, 20 steps)."""
    argv = ["markov-sweep", "--out", str(tmp_path), "--p-values", "0.9", "--q-values", "0.8", "--seeds", "1",
            "--steps", "20", "--warmup-steps", "2", "--architectures", "1-layer-untied", "--workers", "1",
            "--no-progress"]
    assert hmmtf.main(argv) == 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"] == "hmmtf " + " ".join(argv)
    assert [(c["architecture"], c["p"], c["q"], c["seeds"]) for c in saved["cells"]] == [("1-layer-untied", 0.9, 0.8, 1)]


def test_plateau_survival_counts_runs_not_yet_escaped():
    runs = [{"escape_step": 10}, {"escape_step": 30}, {"escape_step": None}, {"escape_step": 20}]
    assert plateau_survival(runs, [0, 10, 20, 30, 100]) == [1.0, 0.75, 0.5, 0.25, 0.25]


def test_init_std_reaches_the_model():
    config = MarkovSweepConfig(width=64, init_std=0.5)
    model = RoFormer(config.model_config("1-layer-tied"))
    # 128 entries ~ N(0, 0.5^2): the sample std has standard error 0.5 / sqrt(256) ~ 0.03.
    assert abs(model.embed.weight.std().item() - 0.5) < 0.15
    assert model.unembed.weight is model.embed.weight
    assert not RoFormer(config.model_config("1-layer-untied")).unembed.weight is model.embed.weight


def test_iid_cells_are_not_trained():
    config = MarkovSweepConfig(p_values=(0.3, 0.5), q_values=(0.5, 0.7))
    assert is_memoryless(0.3, 0.7) and is_memoryless(0.5, 0.5)
    assert config.cells() == [(0.3, 0.5), (0.5, 0.7)]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"p_values": (0.2, 1.5)}, r"p_values: contains 1.5; expected switching probabilities in \[0, 1\]"),
        ({"q_values": (-0.1,)}, r"q_values: contains -0.1"),
        ({"q_values": ()}, r"q_values: empty"),
        ({"architectures": ("3-layer",)}, r"architectures: \['3-layer'\]; expected a non-empty subset"),
        ({"seeds": 0}, r"seeds: 0; expected an integer >= 1"),
        ({"init_std": -0.1}, r"init_std: -0.1; expected a finite number > 0"),
        ({"learning_rate": 0.0}, r"learning_rate: 0.0; expected a number > 0"),
    ],
)
def test_sweep_config_rejects_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        MarkovSweepConfig(**overrides)


def test_every_architecture_builds():
    config = MarkovSweepConfig()
    for name, shape in ARCHITECTURES.items():
        model_config = config.model_config(name)
        assert (model_config.num_layers, model_config.tie_embeddings) == (shape["num_layers"], shape["tie_embeddings"])


def test_config_is_a_json_config_with_the_results_keys():
    import dataclasses

    from empirical.configs import JSONConfig

    config = MarkovSweepConfig(p_values=(0.2, 0.7), seeds=2)
    assert isinstance(config, JSONConfig)
    # The results JSON's "config": every field, in declaration order, as dataclasses.asdict writes it.
    assert config.to_dict() == dataclasses.asdict(config)
    assert list(config.to_dict()) == [field.name for field in dataclasses.fields(MarkovSweepConfig)]
    assert MarkovSweepConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"unknown keys \['depth'\]"):
        MarkovSweepConfig.from_dict(config.to_dict() | {"depth": 3})
