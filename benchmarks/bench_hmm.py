"""Benchmarks of the hmm engine; every figure is a ratio against a baseline or a bound measured in
this run.

1. Filtering throughput (tokens/s) on distinct HMMs, one sequence each (paper sizes S=128, p=16,
   T=256), of both our filters: the engine (``hmm.log_likelihood``, built to share each HMM's
   matrices among many sequences) and the SMC's filter (``hmm.particle_filter.log_likelihood``,
   built for this case: one sequence per HMM, the particles of the prior-predictive ceiling), at
   torch's thread count, against

   - hmmlearn's ``CategoricalHMM.score`` looping over the same HMMs and sequences, in both of its
     implementations, ``"log"`` (its default) and ``"scaling"``;
   - dynamax's ``hmm_filter`` under ``jax.jit(jax.vmap(...))`` in float64 (``jax_enable_x64``),
     on batches of 1, 4, 16, ... HMMs per call and on all of them in one call, timed after the
     call that compiles; skipped, with the reason, when jax or dynamax is missing
     (``pip install -e '.[bench]'``);
   - the read-bandwidth bound. Filtering one token of one HMM reads its transition matrix and the
     token's emission column, ``8 S (S + 1)`` bytes in float64, and with one sequence per HMM no
     other token shares that read, so ``tokens/s <= B / (8 S (S + 1))`` for a read bandwidth B.
     B is measured by re-reading an array the size of three working sets: one HMM's matrices (the
     smallest any filter can have, so the machine's bound), one block of our engine
     (``hmm.filtering.MATRIX_CACHE_BYTES``, re-read at every step) and the transition matrices of
     all HMMs of the dynamax run (what a vmap over all HMMs re-reads at every step).

   Every baseline's log-likelihoods are compared with ours (largest absolute difference). Each
   implementation and setting is timed :data:`REPEATS` times; the fastest run counts. Each
   library's fastest setting is marked, so that speedups can be quoted against it.
2. Bayes-optimal mixture evaluation: achieved GFLOP/s (counting the two matrix products per step,
   ``2 S^2 + 2 S p`` per task, prompt and position) as a fraction of this machine's float64
   matrix-multiply rate, measured here on a square product (one run of 8192 tasks: about 45 s).
3. Paper-scale data generation: wall time to sample the paper's 131,072 prompts.

Usage: ``python benchmarks/bench_hmm.py [--hmms 2048] [--hmmlearn-hmms 256] [--dynamax-hmms 2048]
[--json out.json]``; the JSON records the command line and the git commit it ran at.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import numpy as np
import torch
from hmmlearn.hmm import CategoricalHMM
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hmm  # noqa: E402
from empirical.measurement.roofline import host, matmul_peak, read_bandwidth, timed  # noqa: E402
from empirical.provenance import checkout  # noqa: E402
from hmm import particle_filter  # noqa: E402
from hmm.filtering import MATRIX_CACHE_BYTES  # noqa: E402

NUM_STATES, NUM_TOKENS = 128, 16
"""The paper's HMM size (arXiv 2506.01919, Appendix B)."""

REPEATS = 5
"""Timed runs of each filtering setting; the fastest counts, so that a burst of other work on a
shared machine does not set the rate."""

FLOAT64_BYTES = 8


def filtering_bytes_per_token(num_states: int) -> int:
    """``8 S (S + 1)``: one HMM's float64 transition matrix and the token's emission column
    ``O(., o_t)``, the least a filter reads per token when no other sequence shares the HMM."""
    return FLOAT64_BYTES * num_states * (num_states + 1)


def _baseline(library: str, setting: str, scores, seconds: float, length: int, ours_scores: torch.Tensor, ours_rate: float,
              particle_rate: float, **extra) -> dict:
    """A baseline's rate on the first ``len(scores)`` HMMs, our speedups ``ours_rate / rate`` (the
    engine) and ``particle_rate / rate`` (the SMC's filter), and the largest difference of its
    log-likelihoods from ours."""
    num_hmms = len(scores)
    rate = num_hmms * length / seconds
    difference = np.abs(np.asarray(scores) - ours_scores[:num_hmms].numpy()).max()
    return {"library": library, "setting": setting, **extra, "num_hmms": num_hmms, "seconds": seconds,
            "tokens_per_s": rate, "speedup": ours_rate / rate, "particle_filter_speedup": particle_rate / rate,
            "max_abs_loglik_difference": float(difference)}


def time_hmmlearn(model: hmm.HMM, tokens: torch.Tensor, implementation: str, repeats: int) -> tuple[list[float], float]:
    """hmmlearn's log-likelihoods of ``tokens[k]`` under HMM ``k``, one ``CategoricalHMM.score``
    per HMM in ``implementation`` (``"log"`` or ``"scaling"``), and the fastest time of the loop."""
    references = []
    for k in range(tokens.shape[0]):
        reference = CategoricalHMM(n_components=model.num_states, n_features=model.num_tokens,
                                   init_params="", params="", implementation=implementation)
        reference.startprob_ = model.initial[k].numpy()
        reference.transmat_ = model.transition[k].numpy()
        reference.emissionprob_ = model.emission[k].numpy()
        references.append(reference)
    columns = [sequence.numpy()[:, None] for sequence in tokens]
    return timed(lambda: [reference.score(column) for reference, column in zip(references, columns)], repeats)


def vmap_batches(num_hmms: int) -> list[int]:
    """The dynamax settings timed: HMMs per vmapped call ``1, 4, 16, ...`` below ``num_hmms``, and
    ``num_hmms`` (one call over all). The batch sets dynamax's working set, ``8 S^2`` bytes per HMM
    re-read at every step, so it decides which cache level the filter streams from."""
    return [4**k for k in range(num_hmms.bit_length()) if 4**k < num_hmms] + [num_hmms]


def time_dynamax(model: hmm.HMM, tokens: torch.Tensor, vmap_batch: int, repeats: int) -> tuple[np.ndarray, float, dict]:
    """dynamax's log-likelihoods of ``tokens[k]`` under HMM ``k``: ``hmm_filter`` vmapped over
    ``vmap_batch`` HMMs and jitted, in float64, called once per batch; the fastest time of all
    calls after one untimed round that compiles; the versions. The table ``log O(., o_t)`` is
    gathered inside the jitted function, as our engine gathers ``O(., o_t)`` inside its timed call.
    Raises ``ImportError`` without jax or dynamax."""
    import jax
    from dynamax.hidden_markov_model.inference import hmm_filter

    jax.config.update("jax_enable_x64", True)

    @jax.jit
    @jax.vmap
    def log_likelihoods(initial, transition, log_emission, sequence):
        return hmm_filter(initial, transition, log_emission[:, sequence].T).marginal_loglik

    num_hmms = tokens.shape[0]
    parameters = (model.initial[:num_hmms], model.transition[:num_hmms], model.emission[:num_hmms].log(), tokens)
    arrays = [jax.numpy.asarray(value.numpy()) for value in parameters]
    if arrays[1].dtype != np.float64:
        raise RuntimeError(f"dynamax transition matrices: dtype {arrays[1].dtype}; expected float64 (jax_enable_x64 did not take effect)")
    batches = [[array[start:start + vmap_batch] for array in arrays] for start in range(0, num_hmms, vmap_batch)]

    def run():
        return jax.numpy.concatenate([log_likelihoods(*batch) for batch in batches]).block_until_ready()

    _, first_seconds = timed(run)
    scores, seconds = timed(run, repeats)
    return scores, seconds, {"first_call_seconds": first_seconds, "jax": jax.__version__, "dynamax": importlib.metadata.version("dynamax")}


def bandwidth_bound(name: str, num_bytes: int, bytes_per_token: int, ours_rate: float) -> dict:
    """Read bandwidth B of a ``num_bytes`` working set, the bound ``B / bytes_per_token`` tokens/s
    it puts on filtering, and our rate as a fraction of it."""
    bandwidth = read_bandwidth(torch.device("cpu"), num_bytes)
    bound = bandwidth / bytes_per_token
    return {"working_set": name, "bytes": num_bytes, "read_bytes_per_s": bandwidth,
            "tokens_per_s": bound, "ours_fraction": ours_rate / bound}


def time_baselines(model: hmm.HMM, tokens: torch.Tensor, num_hmmlearn: int, num_dynamax: int, ours_scores: torch.Tensor,
                   ours_rate: float, particle_rate: float, repeats: int) -> list[dict]:
    """Every baseline setting (hmmlearn's two implementations, dynamax at each of
    :func:`vmap_batches`), each marked ``default`` (what a user gets without tuning: hmmlearn's
    default ``"log"``, dynamax in one call over all HMMs) and ``best`` (its library's fastest); a
    library that cannot be imported gets one entry saying why it was skipped."""
    length = tokens.shape[1]
    baselines = []
    for implementation in ("log", "scaling"):
        scores, seconds = time_hmmlearn(model, tokens[:num_hmmlearn], implementation, repeats)
        baselines.append(_baseline("hmmlearn", f'implementation="{implementation}"', scores, seconds, length, ours_scores, ours_rate,
                                   particle_rate, implementation=implementation, default=implementation == "log"))
    try:
        for batch in vmap_batches(num_dynamax):
            scores, seconds, details = time_dynamax(model, tokens[:num_dynamax], batch, repeats)
            baselines.append(_baseline("dynamax", f"jit(vmap) over {batch} HMM{'s' * (batch > 1)} per call", scores, seconds, length, ours_scores, ours_rate,
                                       particle_rate, vmap_batch=batch, default=batch == num_dynamax, **details))
    except ImportError as error:
        baselines.append({"library": "dynamax", "skipped": f"{error}; install the bench extra: pip install -e '.[bench]'"})
    for library in {baseline["library"] for baseline in baselines}:
        settings = [baseline for baseline in baselines if baseline["library"] == library and "tokens_per_s" in baseline]
        fastest = max(settings, key=lambda baseline: baseline["tokens_per_s"], default=None)
        for baseline in settings:
            baseline["best"] = baseline is fastest
    return baselines


def bench_filtering(num_hmms: int, num_hmmlearn: int, num_dynamax: int, length: int, repeats: int) -> dict:
    for name, value in (("hmmlearn-hmms", num_hmmlearn), ("dynamax-hmms", num_dynamax)):
        if not 1 <= value <= num_hmms:
            raise ValueError(f"--{name}: {value}; expected between 1 and --hmms ({num_hmms}): baselines run on a subset of our HMMs")
    mixture = hmm.MixtureSpec(num_hmms, NUM_STATES, NUM_TOKENS).build(seed=0)
    model = mixture.hmm
    tokens, _ = hmm.sample_sequences(model, torch.arange(num_hmms), length, seed=1)
    ours_scores, ours_seconds = timed(lambda: hmm.log_likelihood(model, tokens), repeats)
    ours_rate = num_hmms * length / ours_seconds
    threads = torch.get_num_threads()
    arrays = [value.numpy() for value in (model.transition, model.emission, model.initial, tokens)]
    particle_scores, particle_seconds = timed(lambda: particle_filter.log_likelihood(*arrays, threads=threads), repeats)
    particle_rate = num_hmms * length / particle_seconds

    per_token = filtering_bytes_per_token(NUM_STATES)
    bounds = [
        bandwidth_bound("one HMM", per_token, per_token, ours_rate),
        bandwidth_bound("one block of our engine", MATRIX_CACHE_BYTES, per_token, ours_rate),
        bandwidth_bound(f"{num_dynamax} HMMs", num_dynamax * FLOAT64_BYTES * NUM_STATES**2, per_token, ours_rate),
    ]
    return {
        "num_hmms": num_hmms,
        "num_states": NUM_STATES,
        "num_tokens": NUM_TOKENS,
        "length": length,
        "repeats": repeats,
        "ours_tokens_per_s": ours_rate,
        "particle_filter": {"tokens_per_s": particle_rate, "threads": threads,
                            "max_abs_loglik_difference": float(np.abs(particle_scores - ours_scores.numpy()).max())},
        "baselines": time_baselines(model, tokens, num_hmmlearn, num_dynamax, ours_scores, ours_rate, particle_rate, repeats),
        "bytes_per_token": per_token,
        "bandwidth_bounds": bounds,
    }


def bench_bayes(num_tasks: int, num_prompts: int, length: int, peak: float) -> dict:
    mixture = hmm.MixtureSpec(num_tasks, NUM_STATES, NUM_TOKENS).build(seed=2)
    fmt = hmm.PromptFormat(num_demos=1, demo_length=length // 2, test_length=length - length // 2 - 1)
    prompts = hmm.sample_prompts(mixture, num_prompts, fmt, seed=3)
    _, seconds = timed(lambda: hmm.bayes_predictive(mixture, prompts.tokens))
    S, p = NUM_STATES, NUM_TOKENS
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
    mixture, build_seconds = timed(lambda: hmm.mixture_preset("paper", seed=0))
    fmt = hmm.PROMPT_FORMATS["paper"]

    def sample_all():
        for chunk in tqdm(range(8), desc="sampling 8 x 16384 prompts", leave=False):
            hmm.sample_prompts(mixture, 16_384, fmt, seed=chunk)

    _, sample_seconds = timed(sample_all)
    return {
        "num_prompts": 131_072,
        "prompt_length": fmt.length,
        "mixture_hmms": hmm.MIXTURE_SPECS["paper"].num_tasks,
        "mixture_build_seconds": build_seconds,
        "sampling_seconds": sample_seconds,
        "tokens_per_s": 131_072 * fmt.length / sample_seconds,
    }


def provenance() -> dict:
    """The command line of this run and the commit of the checkout (``git_dirty``: it had
    uncommitted changes, so the commit alone does not reproduce the run;
    :func:`empirical.provenance.checkout`); None outside git."""
    state = checkout()
    return {"command": shlex.join(["python", *sys.argv]), "git_commit": state.commit, "git_dirty": state.dirty,
            "host": host()}


def print_filtering(f: dict) -> None:
    print(f"filtering {f['num_hmms']} HMMs x {f['length']} tokens (S={f['num_states']}, p={f['num_tokens']}): "
          f"ours {f['ours_tokens_per_s']:.3g} tok/s, the SMC's filter {f['particle_filter']['tokens_per_s']:.3g} tok/s")
    for baseline in f["baselines"]:
        if "skipped" in baseline:
            print(f"  {baseline['library']}: skipped ({baseline['skipped']})")
        else:
            print(f"  {baseline['library']} {baseline['setting']} on {baseline['num_hmms']} HMMs: {baseline['tokens_per_s']:.3g} tok/s, "
                  f"ours {baseline['speedup']:.2f}x, the SMC's filter {baseline['particle_filter_speedup']:.2f}x (max |log-lik difference| {baseline['max_abs_loglik_difference']:.1e})"
                  f"{' <- fastest' if baseline.get('best') else ''}")
    for bound in f["bandwidth_bounds"]:
        print(f"  bound from re-reading {bound['working_set']} ({bound['bytes'] / 2**10:.0f} KiB at "
              f"{bound['read_bytes_per_s'] / 1e9:.0f} GB/s) / {f['bytes_per_token']} bytes per token: "
              f"{bound['tokens_per_s']:.3g} tok/s, ours {bound['ours_fraction']:.0%} of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hmms", type=int, default=2048, help="distinct HMMs filtered by our engine (the baselines get the first ones)")
    parser.add_argument("--hmmlearn-hmms", type=int, default=256, help="HMMs looped through hmmlearn (its rate is per token)")
    parser.add_argument("--dynamax-hmms", type=int, default=2048, help="HMMs in dynamax's vmap (its rate is per token)")
    parser.add_argument("--length", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed runs of each filtering setting; the fastest counts")
    parser.add_argument("--bayes-tasks", type=int, default=8192, help="tasks of the mixture (its GFLOP/s fall with fewer tasks)")
    parser.add_argument("--bayes-prompts", type=int, default=256, help="prompts per evaluation batch (rows of each task's matrix product)")
    parser.add_argument("--bayes-length", type=int, default=32)
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    machine = {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(), "torch": torch.__version__,
               "load_average_1min_at_start": os.getloadavg()[0]}  # other processes on the cores slow every rate
    peak = matmul_peak(torch.device("cpu"), torch.float64, 2048) / 1e9
    results = {
        **provenance(),
        "machine": machine,
        "matmul_peak_gflops_float64": peak,
        "filtering": bench_filtering(args.hmms, args.hmmlearn_hmms, args.dynamax_hmms, args.length, args.repeats),
        "bayes": bench_bayes(args.bayes_tasks, args.bayes_prompts, args.bayes_length, peak),
    }
    if not args.skip_generation:
        results["generation"] = bench_generation()
    b = results["bayes"]
    print(f"float64 matmul peak: {peak:.1f} GFLOP/s ({results['machine']['threads']} threads)")
    print_filtering(results["filtering"])
    print(f"Bayes mixture {b['num_tasks']} tasks x {b['num_prompts']} prompts x {b['prompt_length']} tokens: "
          f"{b['gflops']:.1f} GFLOP/s = {b['fraction_of_peak']:.1%} of matmul peak ({b['seconds']:.1f} s)")
    if "generation" in results:
        g = results["generation"]
        print(f"paper data: {g['num_prompts']} prompts x {g['prompt_length']} tokens sampled in {g['sampling_seconds']:.1f} s "
              f"(mixture built in {g['mixture_build_seconds']:.1f} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2, allow_nan=False)
            handle.write("\n")


if __name__ == "__main__":
    main()
