"""The batched forward pass against one pass per prompt: the scaled weights are the builders' weights
exactly, the outputs agree to a derived rounding bound, and bad batches are refused."""
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from construction import build_network, forward_batch, parameters_for_prompt
from construction.batch import scaled_weights, unit_tensors
from construction.weights import SCALED_WEIGHTS
from empirical.training.data import held_out_prompts
from empirical.training.presets import get_preset
from test_construction_helpers import hmm_prompt, pass_rounding_bound

P, L, T = 3, 3, 6
# Four prompts of 40 tokens: two of one format, two with their delimiters elsewhere.
PROMPTS = np.stack([
    hmm_prompt(P, [10, 10, 10], 7, seed=1),
    hmm_prompt(P, [10, 10, 10], 7, seed=2),
    hmm_prompt(P, [6, 14, 8], 9, seed=3),
    hmm_prompt(P, [12, 8, 12], 5, seed=4),
])
SPECS = [parameters_for_prompt(tokens, P, L, T) for tokens in PROMPTS]


def test_scaled_weights_are_the_builders_weights_entry_by_entry():
    unit = unit_tensors(replace(SPECS[0], beta=1.0, eta=1.0))
    batched = scaled_weights(unit, SPECS, torch.float64)
    for b, spec in enumerate(SPECS):
        own = build_network(spec).torch_weights(torch.float64)
        for layer, mine, theirs in zip(unit.layers, batched, own):
            for name, value in theirs.items():
                scaled = layer.stage in SCALED_WEIGHTS and name == SCALED_WEIGHTS[layer.stage][0]
                got = mine[name][b] if scaled else mine[name]
                assert got == value if isinstance(value, str) else torch.equal(got, value[0] if scaled else value), \
                    (layer.name, name)


def test_batch_equals_one_pass_per_prompt_to_rounding():
    assert len({spec.eta for spec in SPECS}) == len(SPECS) and len({spec.beta for spec in SPECS}) == len(SPECS)
    batch = forward_batch(SPECS, PROMPTS)
    outputs = batch.slot("output")
    for b, (spec, tokens) in enumerate(zip(SPECS, PROMPTS)):
        trace = build_network(spec).forward(tokens, record_attention=False)
        difference = float((outputs[b] - trace.slot("output")).abs().max())
        assert difference <= pass_rounding_bound(tokens, spec), b
        assert torch.equal(batch.prediction[b], outputs[b, :, -1])
    # The bound is no formality: a prompt given its neighbour's step size lands far outside it.
    swapped = forward_batch([replace(SPECS[0], eta=SPECS[1].eta), *SPECS[1:]], PROMPTS)
    assert float((swapped.prediction[0] - batch.prediction[0]).abs().max()) > 1e3 * pass_rounding_bound(PROMPTS[0], SPECS[0])


@pytest.mark.parametrize(
    "specs, tokens, message",
    [
        ([], PROMPTS, r"specs: empty; expected one ConstructionSpec per prompt"),
        ([SPECS[0], replace(SPECS[1], gd_steps=T + 1)], PROMPTS[:2], r"specs\[1\]: .* expected the spec of specs\[0\]"),
        (SPECS[:3], PROMPTS, r"specs: 3 specs for 4 prompts; expected one spec per prompt"),
        (SPECS[:1], PROMPTS[0], r"tokens: shape \(40,\); expected \(B, n\)"),
        (SPECS[:2], np.stack([PROMPTS[0], np.where(PROMPTS[1] == P, 0, PROMPTS[1])]), r"tokens\[1\]: no delimiter 3"),
    ],
)
def test_bad_batches_are_refused_with_the_argument_named(specs, tokens, message):
    with pytest.raises(ValueError, match=message):
        forward_batch(specs, tokens)


def test_each_prompt_keeps_its_own_refusals():
    small_beta = replace(SPECS[2], beta=SPECS[2].beta / 4)
    with pytest.raises(ValueError, match=r"beta=.* too small for a prompt of N=41 columns"):
        forward_batch([*SPECS[:2], small_beta, SPECS[3]], PROMPTS)
    diverging = replace(SPECS[3], eta=2.5 * SPECS[3].eta, beta=4 * SPECS[3].beta)
    with pytest.raises(ValueError, match=r"eta=.* >= 2/lambda_max = .* for prompt 3 of the batch"):
        forward_batch([*SPECS[:3], diverging], PROMPTS)


def test_benchmark_runs_and_reports_equal_predictions(tmp_path):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_hand_built.py"
    spec = importlib.util.spec_from_file_location("bench_hand_built", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--preset", "tiny", "--prompts", "6", "--loop-prompts", "3", "--L", "2", "--T", "2",
                       "--batch-sizes", "1", "4", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["loop_prompts_per_s"] > 0 and set(result["batched"]) == {"1", "4"}
    preset = get_preset("tiny")
    looped = held_out_prompts(preset.build_mixture(), preset.prompt_format, 3, preset.data_seed).tokens.numpy()
    bound = max(pass_rounding_bound(tokens, parameters_for_prompt(tokens, result["p"], 2, 2)) for tokens in looped)
    assert all(entry["max_abs_difference_to_loop"] <= bound for entry in result["batched"].values())
