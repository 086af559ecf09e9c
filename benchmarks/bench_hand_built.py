"""Hand-built network on held-out prompts: the batched pass (``construction.forward_batch``) against
one network per prompt (``build_network(spec).forward``), measured in the same run.

    python benchmarks/bench_hand_built.py --preset cpu-small --prompts 1024 --L 3 --T 10

Both paths get the same prompts (the preset's held-out prompts) and the same specs
(``parameters_for_prompt``: each prompt its own eta and beta; the time to choose them is reported
apart, since both paths need it). The loop runs the first ``--loop-prompts`` prompts, the batched
pass all of them in chunks of each ``--batch-sizes``; rates are prompts per second, the ratio is
loop seconds per prompt over batched seconds per prompt, and the predictions of the looped prompts
are compared (max |batched - loop|; the rounding bound is in docs/construction.md, section 9).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import construction  # noqa: E402
from empirical.training.data import held_out_prompts  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.measurement.roofline import host  # noqa: E402
from hmmtf import source_commit  # noqa: E402


def timed(function):
    """``(function(), seconds it took)``."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def batched_predictions(specs, tokens, batch_size: int) -> torch.Tensor:
    """``(B, p)``: :func:`construction.forward_batch` over chunks of ``batch_size`` prompts."""
    return torch.cat([construction.forward_batch(specs[start : start + batch_size], tokens[start : start + batch_size]).prediction
                      for start in range(0, len(specs), batch_size)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu-small", choices=sorted(PRESETS))
    parser.add_argument("--prompts", type=int, default=1024, help="held-out prompts of the batched pass")
    parser.add_argument("--loop-prompts", type=int, default=64, help="the first of them, one network each")
    parser.add_argument("--L", type=int, default=3, help="history length")
    parser.add_argument("--T", type=int, default=10, help="gradient-descent layers")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16], help="prompts per batched pass")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: see docs/empirical.md on shared cores)")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)

    commit = source_commit()  # before anything is written
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    mixture = preset.build_mixture()
    tokens = held_out_prompts(mixture, preset.prompt_format, args.prompts, preset.data_seed).tokens.numpy()
    p = mixture.num_tokens
    specs, spec_seconds = timed(lambda: [construction.parameters_for_prompt(prompt, p, args.L, args.T) for prompt in tokens])
    looped = min(args.loop_prompts, args.prompts)
    loop, loop_seconds = timed(lambda: torch.stack([
        construction.build_network(spec).forward(prompt, record_attention=False).prediction
        for spec, prompt in zip(specs[:looped], tokens[:looped])]))
    loop_per_prompt = loop_seconds / looped
    batched = {}
    for batch_size in args.batch_sizes:
        # timed() calls the function within this iteration, with this batch_size.
        predictions, seconds = timed(lambda: batched_predictions(specs, tokens, batch_size))  # noqa: B023
        batched[batch_size] = {
            "seconds": seconds,
            "prompts_per_s": args.prompts / seconds,
            "speedup_over_loop": loop_per_prompt / (seconds / args.prompts),
            "max_abs_difference_to_loop": float((predictions[:looped] - loop).abs().max()),
        }
    best = max(batched, key=lambda size: batched[size]["prompts_per_s"])
    result = {
        "command": ["python", *sys.argv] if argv is None else ["python", "benchmarks/bench_hand_built.py", *argv],
        "git_commit": commit,
        "host": host(),
        "machine": {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "preset": preset.name, "prompt_length": int(tokens.shape[1]), "p": p, "L": args.L, "T": args.T,
        "depth": len(construction.build_network(specs[0]).layers), "width": specs[0].layout.width,
        "prompts": args.prompts, "loop_prompts": looped,
        "spec_seconds_per_prompt": spec_seconds / args.prompts,
        "loop_seconds_per_prompt": loop_per_prompt, "loop_prompts_per_s": 1.0 / loop_per_prompt,
        "batched": batched, "best_batch_size": best,
    }
    print(f"{args.prompts} prompts of {tokens.shape[1]} tokens, p={p} L={args.L} T={args.T}, "
          f"{torch.get_num_threads()} threads; specs {result['spec_seconds_per_prompt'] * 1e3:.2f} ms/prompt")
    print(f"loop (one network per prompt, {looped} prompts): {1.0 / loop_per_prompt:.1f} prompts/s")
    for batch_size, entry in batched.items():
        print(f"batched, {batch_size:>3} prompts per pass: {entry['prompts_per_s']:.1f} prompts/s "
              f"({entry['seconds']:.1f} s for {args.prompts}), {entry['speedup_over_loop']:.2f}x the loop, "
              f"max |batched - loop| = {entry['max_abs_difference_to_loop']:.1e}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
