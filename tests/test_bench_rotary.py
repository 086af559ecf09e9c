"""benchmarks/bench_rotary.py's candidate form of the rotary embedding gives the bits of the shipped
one (values and gradients), as its docstring argues, and the bench runs and says so."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from empirical.training.model import apply_rotary, rotary_cos_sin

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_rotary.py"
spec = importlib.util.spec_from_file_location("bench_rotary", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.mark.parametrize("dtype, table_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                                (torch.float64, torch.float64)])
def test_the_contiguous_candidate_gives_the_bits_of_the_pairwise_formula_and_its_gradient(dtype, table_dtype):
    """On a permuted (non-contiguous) view, as the attention's queries and keys are: equal bit for bit,
    values and gradients (a negated product and a two-term sum are exact rewrites in IEEE arithmetic)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 37, 2, 8, generator=generator).to(dtype).transpose(1, 2).requires_grad_()
    reference = x.detach().clone().requires_grad_()
    cos, sin = rotary_cos_sin(torch.arange(37), 8, 10000.0, table_dtype)
    rotated, expected = bench.rotary_contiguous(x, cos, sin), apply_rotary(reference, cos, sin)
    assert torch.equal(rotated, expected)
    upstream = torch.randn(rotated.shape, generator=generator).to(dtype)
    (rotated * upstream).sum().backward()
    (expected * upstream).sum().backward()
    assert torch.equal(x.grad, reference.grad)


def test_the_bench_times_both_forms_and_finds_the_same_weights(tmp_path, capsys):
    out = tmp_path / "rotary.json"
    assert bench.main(["--preset", "tiny", "--rounds", "2", "--steps", "2", "--warmup", "0", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["same_weights_after_the_steps"] is True
    assert len(result["candidate_over_shipped"]["ratios"]) == 2 and all(len(rates) == 2 for rates in
                                                                     result["tokens_per_s"].values())
