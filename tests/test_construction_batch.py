"""The batched forward pass against one pass per prompt: the scaled weights are the builders' weights
exactly, the outputs agree to a derived rounding bound, and bad batches are refused."""
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from construction import build_network, forward_batch, parameters_for_prompt, reference
from construction.batch import scaled_weights, unit_network
from construction.weights import SCALED_WEIGHTS
from empirical.data import held_out_prompts
from empirical.presets import get_preset
from rounding import gamma
from test_construction_helpers import hmm_prompt

P, L, T = 3, 3, 6
# Four prompts of 40 tokens: two of one format, two with their delimiters elsewhere.
PROMPTS = np.stack([
    hmm_prompt(P, [10, 10, 10], 7, seed=1),
    hmm_prompt(P, [10, 10, 10], 7, seed=2),
    hmm_prompt(P, [6, 14, 8], 9, seed=3),
    hmm_prompt(P, [12, 8, 12], 5, seed=4),
])
SPECS = [parameters_for_prompt(tokens, P, L, T) for tokens in PROMPTS]


def pass_rounding_bound(tokens: np.ndarray, spec) -> float:
    """Bound on ``|a - b|`` for every output entry of every column, where a and b come from two
    float64 passes of the same network on the same prompt that differ only in the order of the
    terms of the sums inside their matrix products (first order in the unit roundoff u).

    Both passes use the same weights (:data:`SCALED_WEIGHTS`: each scaled entry is one correctly
    rounded product, as in the builders) and the same correctly rounded elementwise operations.
    A sum of n terms computed in any order is within ``gamma_n`` of the sum of its terms'
    magnitudes; no sum the network forms is longer than ``n = N + pL + L + 3`` (N keys; a GD key
    reads ``pL + L + 2`` rows; 2p heads); each pass is within E of the pass in
    exact arithmetic, so the two are within 2E. Magnitudes come from the reference iterates
    ``W_t`` (equal to the network's to the construction error, 1e-9, which changes no digit).

    * Features: a history or label coordinate is a sum of nonnegative terms (softmax weight times
      a copied 0/1 coordinate) passed through at most L copies, so its relative error is at most
      ``L gamma_n``. (D of a sample is leak-sized with the same relative error; its effect,
      ``penalty * D``, is of order ``eps gamma_n`` and is dropped.)
    * GD step t, entry (k, a): the pair writes ``-(eta/N) sum_j x_ja r_jk``, ``r_jk = <w_k, x_j> - y_jk``;
      rounding the residual (with its feature errors), the sum over the keys and the residual add
      gives ``local_t(k, a) <= (L + 2) gamma_n [|W_t(k, a)| + (eta/N) sum_j x_ja (sum_b |W_{t-1}(k, b)| x_jb + |y_jk| + |r_jk|)]``.
    * Propagation: an error E of W is mapped to ``E (I - eta H)``, eigenvalues in [0, 1] for
      ``eta = 1/lambda_max``, so ``||Delta W_T||_F <= sum_t ||local_t||_F``.
    * Read-out: entry k of a column is ``<w_k, x_i>`` averaged over N equal terms, so it errs by
      ``||Delta W_T||_F ||x_i||_2 + (L + 2) gamma_n sum_a |W_T(k, a)| x_ia``, ``||x_i||_2 <= sqrt(L)``.
    """
    p, history_length, steps = spec.num_tokens, spec.history_length, spec.gd_steps
    num_columns = len(tokens) + 1
    factor = (history_length + 2) * gamma(num_columns + p * history_length + history_length + 3)
    X, Y, _ = reference.regression_problem(tokens, p, history_length)
    iterates = reference.gd_iterates(X, Y, spec.eta, steps, num_columns)
    step = spec.eta / num_columns
    propagated = 0.0
    for t in range(1, steps + 1):
        previous = np.abs(iterates[t - 1])
        residual = np.abs(iterates[t - 1] @ X.T - Y.T)
        magnitudes = np.abs(iterates[t]) + step * (previous @ X.T + Y.T + residual) @ X
        propagated += factor * np.linalg.norm(magnitudes)
    features = reference.history(tokens, p, history_length)[:, :, :p].reshape(num_columns, -1)
    readout = factor * (np.abs(iterates[-1]) @ features.T).max()
    return 2 * (propagated * np.sqrt(history_length) + readout)


def test_scaled_weights_are_the_builders_weights_entry_by_entry():
    network = unit_network(replace(SPECS[0], beta=1.0, eta=1.0))
    batched = scaled_weights(network, SPECS, torch.float64)
    for b, spec in enumerate(SPECS):
        own = build_network(spec).torch_weights(torch.float64)
        for layer, mine, theirs in zip(network.layers, batched, own):
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
