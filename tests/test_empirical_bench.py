"""The training benchmark: its FLOPs formula against torch's FLOP counter, a one-step run, and the
comparison of the ways to use the CPU's cores (empirical/measurement/throughput.py) on the tiny preset, which
checks what it measures and how, not how fast."""
import importlib.util
import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import hmmtf
from empirical import allocator, throughput
from empirical.training.model import RoFormer, RoFormerConfig, forward_flops_per_token, training_flops_per_token

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


def test_the_common_interval_counts_what_every_worker_did_while_all_were_timing():
    # Worker a steps 10 tokens at t = 1, 2, 3, 4 from t = 0; worker b 20 tokens at t = 3, 5 from
    # t = 1. Over [1, 4]: a did 3 steps (30 tokens), b 1.5 steps (30 tokens), in 3 s.
    assert throughput.rate_over_common_interval([[0, 1, 2, 3, 4], [1, 3, 5]], [10, 20]) == (20.0, 3.0)
    assert throughput.rate_over_common_interval([[0, 2, 4]], [5]) == (2.5, 4.0)
    with pytest.raises(ValueError, match="timelines: the last start 2 is not before the first end 1"):
        throughput.rate_over_common_interval([[0, 1], [2, 3]], [1, 1])


def test_the_ways_start_with_todays_path_and_only_ddp_splits_the_batch():
    ways = throughput.layouts(2, 32, compile=True)
    assert [way.name for way in ways] == ["1x1", "1x2", "ddp-2x1", "independent-2x1", "1x1-batch64",
                                          "independent-2x1-batch64", "1x1-tuned-malloc", "ddp-2x1-tuned-malloc",
                                          "independent-2x1-tuned-malloc", "1x1-compiled"]
    assert [way.rows_per_process() for way in ways] == [32, 32, 16, 32, 64, 64, 32, 16, 32, 32]
    assert [way.name for way in ways if way.tuned_malloc] == ["1x1-tuned-malloc", "ddp-2x1-tuned-malloc",
                                                             "independent-2x1-tuned-malloc"]
    assert [way.name for way in throughput.layouts(2, 32)] == [way.name for way in ways[:-1]]


def test_the_ratio_over_rounds_is_the_geometric_mean_with_a_student_interval():
    # Log ratios log 2 and log 8 (ratios 2/1 and 16/2): mean log 4, sample sd (log 8 - log 2) / sqrt 2
    # = log(4) / sqrt 2, half-width t_{1, 0.975} sd / sqrt 2 = 12.7062... log(4) / 2.
    summary = throughput.ratio_summary([2.0, 16.0], [1.0, 2.0])
    assert summary["ratios"] == [2.0, 8.0]
    assert summary["ratio"] == pytest.approx(4.0, rel=1e-15)
    half = 12.706204736174698 * math.log(4.0) / 2
    assert summary["interval"] == pytest.approx([4.0 * math.exp(-half), 4.0 * math.exp(half)], rel=1e-12)
    assert throughput.ratio_summary([3.0], [2.0]) == {"ratios": [1.5], "ratio": pytest.approx(1.5, rel=1e-15),
                                                      "interval": None}
    same = throughput.ratio_summary([5.0, 10.0, 20.0], [2.5, 5.0, 10.0])
    assert same["interval"] == pytest.approx([2.0, 2.0], rel=1e-15)
    with pytest.raises(ValueError, match="rates: 2, today_rates: 1; expected the same number of rounds"):
        throughput.ratio_summary([1.0, 2.0], [1.0])


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """The comparison on the tiny preset, one timed step a way (the JSON it wrote)."""
    out = tmp_path_factory.mktemp("compare") / "compare.json"
    assert bench.main(["--compare", "--preset", "tiny", "--steps", "1", "--warmup", "0", "--allow-load",
                       "--out", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.long_running
def test_the_comparison_measures_every_way_against_todays_path_and_the_cores_peak(comparison):
    ways = comparison["configurations"]
    assert [way["name"] for way in ways] == [way.name for way in throughput.layouts(2, 16)]
    assert [way for way in ways if "error" in way] == []
    assert comparison["today"] == "1x1" and comparison["rounds"] == 1
    for way in ways:
        (measured,) = way["rounds"]
        assert way["tokens_per_s"] == measured["tokens_per_s"] > 0 and 0 < way["mfu"] < 1
        assert way["ratios"] == [way["tokens_per_s"] / ways[0]["tokens_per_s"]]
        assert way["ratio_interval"] is None  # one round: no interval, so no way meets the target
        assert way["mfu"] == way["tokens_per_s"] * comparison["model_flops_per_token"] / comparison["matmul_peak"]["flops_per_s"]
    assert ways[0]["ratio_to_today"] == 1.0
    assert comparison["target"] == {"ratio": 2.0, "rule": bench.TARGET_RULE, "met_by": []}
    peak = comparison["matmul_peak"]
    assert peak["flops_per_s"] == max(way["flops_per_s"] for way in peak["ways"].values())
    assert peak["flops_per_s"] == peak["ways"][peak["used"]]["flops_per_s"]
    assert comparison["git_commit"] == hmmtf.source_commit()
    assert comparison["command"][:3] == ["python", "benchmarks/bench_training.py", "--compare"]


def test_the_ways_named_are_measured_beside_todays_path_in_the_comparisons_order():
    ways = throughput.layouts(2, 32, compile=True)
    chosen = bench.chosen_ways(ways, ["1x1-compiled", "independent-2x1-tuned-malloc"])
    assert [way.name for way in chosen] == ["1x1", "independent-2x1-tuned-malloc", "1x1-compiled"]
    assert bench.chosen_ways(ways, None) == ways


def test_a_way_over_rounds_is_its_median_its_ratio_interval_and_the_rule_on_its_lower_end():
    way = throughput.Layout("independent-2x1", "two", 2, 1, 32)
    today = [{"tokens_per_s": rate} for rate in (10.0, 12.0, 11.0)]
    fast = bench.summarise_way(way, [{"tokens_per_s": rate} for rate in (25.0, 29.4, 27.5)], today, 3, 100.0)
    assert fast["tokens_per_s"] == 27.5 and fast["model_flops_per_s"] == 3 * 27.5 and fast["mfu"] == 3 * 27.5 / 100.0
    assert fast["ratios"] == [2.5, 29.4 / 12.0, 2.5]
    assert fast["ratio_to_today"] == pytest.approx((2.5 * 2.45 * 2.5) ** (1 / 3), rel=1e-14)
    assert fast["ratio_interval"] == throughput.ratio_summary([25.0, 29.4, 27.5], [10.0, 12.0, 11.0])["interval"]
    assert fast["ratio_interval"][0] >= 2.0 and bench.meets_target(fast)
    noisy = bench.summarise_way(way, [{"tokens_per_s": rate} for rate in (30.0, 18.0, 26.0)], today, 3, 100.0)
    assert noisy["ratio_to_today"] > 2 and noisy["ratio_interval"][0] < 2 and not bench.meets_target(noisy)
    failed = bench.summarise_way(way, [{"tokens_per_s": 1.0}, {"error": "killed"}, {"tokens_per_s": 1.0}], today, 3, 100.0)
    assert failed["error"] == "killed" and "ratio_to_today" not in failed and not bench.meets_target(failed)
    orphan = bench.summarise_way(way, [{"tokens_per_s": 1.0}] * 3, [*today[:2], {"error": "killed"}], 3, None)
    assert orphan["ratio_to_today"] is None and orphan["mfu"] is None and not bench.meets_target(orphan)


@pytest.mark.long_running
def test_every_worker_runs_on_the_threads_and_the_malloc_it_was_given(comparison):
    tuned = allocator.with_training_tunables(os.environ)["GLIBC_TUNABLES"]
    for way in comparison["configurations"]:
        for measured in way["rounds"]:
            workers = measured["workers"]
            assert [worker["threads"] for worker in workers] == [way["threads"]] * way["processes"], way["name"]
            expected = tuned if way["tuned_malloc"] else os.environ.get("GLIBC_TUNABLES")
            assert [worker["glibc_tunables"] for worker in workers] == [expected] * way["processes"], way["name"]
    ways_of_peak = comparison["matmul_peak"]["ways"]
    assert [worker["threads"] for worker in ways_of_peak["2_processes_x_1_thread"]["workers"]] == [1, 1]
    assert [worker["threads"] for worker in ways_of_peak["1_process_x_2_threads"]["workers"]] == [2]


def test_the_comparison_refuses_to_write_a_timing_of_busy_cores(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", lambda: (2.25, 2.0, 1.5))
    out = tmp_path / "compare.json"
    assert bench.main(["--compare", "--preset", "tiny", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bench_training.py: error: --out: the load average at the start is 2.25, above --max-load 0.5")
    assert line.endswith("pass --allow-load") and not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--compare", "--batch-size", "15"], "--batch-size: 15; expected a multiple of --cores 2"),
    (["--compare", "--threads", "2"], "--threads: 2; the comparison sets each way's threads"),
    (["--compare", "--device", "cuda"], "--device: cuda; expected cpu"),
    (["--cores", "2"], "--cores: only with --compare"),
    (["--compare", "--steps", "0"], "argument --steps: 0; expected an integer >= 1"),
    (["--compare", "--cores", "1"], "argument --cores: 1; expected an integer >= 2"),
    (["--compare", "--max-load", "-1"], "argument --max-load: -1; expected a finite number > 0"),
    (["--compare", "--ways", "1x1"], "--ways: '1x1'; expected names of ways other than today's path among 1x2, "),
    (["--compare", "--ways", "1x1-compiled"], "--ways: '1x1-compiled'; expected names of ways other than today's"),
    (["--ways", "1x2"], "--ways: only with --compare"),
])
def test_a_bad_argument_is_named_in_one_line(argv, message, capsys):
    assert bench.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"bench_training.py: error: {message}")


@pytest.mark.long_running
def test_a_failing_or_late_worker_is_reported_not_raised():
    """A worker that raises breaks the barrier, so the other is not left waiting; a group past its
    timeout is killed. (Long for the imports of the spawned workers: a few seconds.)"""
    failed = throughput.run_together(throughput._peak_worker, [(0, 8), (1, 8)], timeout_s=60)
    assert failed[0] == {"error": "RuntimeError: set_num_threads expects a positive integer"}
    assert "error" in failed[1]
    (late,) = throughput.run_together(throughput._peak_worker, [(1, 2048)], timeout_s=0.01)
    assert late == {"error": "not done within the timeout of 0.01 s; killed"}
