"""Benchmarks of the hmm engine; every figure is a ratio against a baseline measured in this run.

1. Filtering throughput (tokens/s) on distinct HMMs (paper sizes S=128, p=16, T=256): ours vs
   hmmlearn's CategoricalHMM.score looping over the same HMMs and sequences.
2. Bayes-optimal mixture evaluation: achieved GFLOP/s (counting the two matrix products per step,
   ``2 S^2 + 2 S p`` per task, prompt and position) as a fraction of this machine's float64
   matrix-multiply rate, measured here on a square product.
3. Paper-scale data generation: wall time to sample the paper's 131,072 prompts.

Usage: ``python benchmarks/bench_hmm.py [--hmms 8192] [--hmmlearn-hmms 256] [--json out.json]``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from hmmlearn.hmm import CategoricalHMM
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hmm  # noqa: E402
from empirical.roofline import matmul_peak  # noqa: E402


def _timed(function):
    """``(function(), seconds it took)``."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def bench_filtering(num_hmms: int, num_hmmlearn: int, length: int) -> dict:
    mixture = hmm.MixtureSpec(num_hmms, 128, 16).build(seed=0)
    tokens, _ = hmm.sample_sequences(mixture.hmm, torch.arange(num_hmms), length, seed=1)
    ours_scores, ours_seconds = _timed(lambda: hmm.log_likelihood(mixture.hmm, tokens))
    ours_rate = num_hmms * length / ours_seconds

    references = []
    for k in range(num_hmmlearn):
        reference = CategoricalHMM(n_components=128, n_features=16, init_params="", params="")
        reference.startprob_ = mixture.hmm.initial[k].numpy()
        reference.transmat_ = mixture.hmm.transition[k].numpy()
        reference.emissionprob_ = mixture.hmm.emission[k].numpy()
        references.append(reference)
    columns = [tokens[k].numpy()[:, None] for k in range(num_hmmlearn)]

    def run_hmmlearn():
        return [reference.score(column) for reference, column in tqdm(zip(references, columns), total=num_hmmlearn, desc="hmmlearn", leave=False)]

    scores, hmmlearn_seconds = _timed(run_hmmlearn)
    hmmlearn_rate = num_hmmlearn * length / hmmlearn_seconds
    return {
        "num_hmms": num_hmms,
        "num_hmms_hmmlearn": num_hmmlearn,
        "length": length,
        "ours_tokens_per_s": ours_rate,
        "hmmlearn_tokens_per_s": hmmlearn_rate,
        "speedup_vs_hmmlearn": ours_rate / hmmlearn_rate,
        "max_abs_loglik_difference": float(np.abs(np.array(scores) - ours_scores[:num_hmmlearn].numpy()).max()),
    }


def bench_bayes(num_tasks: int, num_prompts: int, length: int, peak: float) -> dict:
    mixture = hmm.MixtureSpec(num_tasks, 128, 16).build(seed=2)
    fmt = hmm.PromptFormat(num_demos=1, demo_length=length // 2, test_length=length - length // 2 - 1)
    prompts = hmm.sample_prompts(mixture, num_prompts, fmt, seed=3)
    _, seconds = _timed(lambda: hmm.bayes_predictive(mixture, prompts.tokens))
    S, p = 128, 16
    flops = num_tasks * num_prompts * fmt.length * (2 * S * S + 2 * S * p)
    achieved = flops / seconds / 1e9
    return {
        "num_tasks": num_tasks,
        "num_prompts": num_prompts,
        "prompt_length": fmt.length,
        "seconds": seconds,
        "gflops": achieved,
        "matmul_peak_gflops": peak,
        "fraction_of_peak": achieved / peak,
    }


def bench_generation() -> dict:
    mixture, build_seconds = _timed(lambda: hmm.mixture_preset("paper", seed=0))
    fmt = hmm.PROMPT_FORMATS["paper"]

    def sample_all():
        for chunk in tqdm(range(8), desc="sampling 8 x 16384 prompts", leave=False):
            hmm.sample_prompts(mixture, 16_384, fmt, seed=chunk)

    _, sample_seconds = _timed(sample_all)
    return {
        "num_prompts": 131_072,
        "prompt_length": fmt.length,
        "mixture_build_seconds": build_seconds,
        "sampling_seconds": sample_seconds,
        "tokens_per_s": 131_072 * fmt.length / sample_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hmms", type=int, default=8192, help="distinct HMMs filtered by our engine")
    parser.add_argument("--hmmlearn-hmms", type=int, default=256, help="HMMs looped through hmmlearn (its rate is per token)")
    parser.add_argument("--length", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--bayes-tasks", type=int, default=8192)
    parser.add_argument("--bayes-prompts", type=int, default=256, help="prompts per evaluation batch (rows of each task's matrix product)")
    parser.add_argument("--bayes-length", type=int, default=32)
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    peak = matmul_peak(torch.device("cpu"), torch.float64, 2048) / 1e9
    results = {
        "machine": {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(), "torch": torch.__version__},
        "matmul_peak_gflops_float64": peak,
        "filtering": bench_filtering(args.hmms, args.hmmlearn_hmms, args.length),
        "bayes": bench_bayes(args.bayes_tasks, args.bayes_prompts, args.bayes_length, peak),
    }
    if not args.skip_generation:
        results["generation"] = bench_generation()
    f, b = results["filtering"], results["bayes"]
    print(f"float64 matmul peak: {peak:.1f} GFLOP/s ({results['machine']['threads']} threads)")
    print(f"filtering {f['num_hmms']} HMMs x {f['length']} tokens: ours {f['ours_tokens_per_s']:.3g} tok/s, "
          f"hmmlearn {f['hmmlearn_tokens_per_s']:.3g} tok/s -> {f['speedup_vs_hmmlearn']:.2f}x "
          f"(max |log-lik difference| {f['max_abs_loglik_difference']:.2e})")
    print(f"Bayes mixture {b['num_tasks']} tasks x {b['num_prompts']} prompts x {b['prompt_length']} tokens: "
          f"{b['gflops']:.1f} GFLOP/s = {b['fraction_of_peak']:.1%} of matmul peak ({b['seconds']:.1f} s)")
    if "generation" in results:
        g = results["generation"]
        print(f"paper data: {g['num_prompts']} prompts x {g['prompt_length']} tokens sampled in {g['sampling_seconds']:.1f} s "
              f"(mixture built in {g['mixture_build_seconds']:.1f} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
