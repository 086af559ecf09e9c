"""The training benchmark: its FLOPs formula against torch's FLOP counter, and a one-step run."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import hmmtf
from empirical.model import RoFormer, RoFormerConfig, forward_flops_per_token, training_flops_per_token

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_training.py"
spec = importlib.util.spec_from_file_location("bench_training", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.mark.parametrize("tied", [False, True])
def test_flops_per_token_equal_counted_matmul_flops_of_a_forward_pass_and_a_training_step(tied):
    model = RoFormer(RoFormerConfig(vocab_size=7, num_layers=2, num_heads=2, width=16, tie_embeddings=tied))
    tokens = torch.randint(0, 7, (3, 10))
    # The recording path: its attention is explicit matmuls, which the counter sees (it does not
    # count the fused CPU attention kernel); the arithmetic is the same as the fast path's.
    with FlopCounterMode(display=False) as forward:
        model.run_with_cache(tokens)
    with FlopCounterMode(display=False) as step:
        model.run_with_cache(tokens)[0].sum().backward()
    assert forward.get_total_flops() == forward_flops_per_token(model.config, 10) * tokens.numel()
    assert step.get_total_flops() == training_flops_per_token(model.config, 10) * tokens.numel()


def test_benchmark_runs_and_reports_a_utilisation(tmp_path):
    out = tmp_path / "bench.json"
    assert bench.main(["--preset", "tiny", "--steps", "1", "--warmup", "0", "--device", "cpu", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["tokens_per_s"] > 0
    assert 0 < result["mfu"] < 1
    assert result["git_commit"] == hmmtf.source_commit()
