"""A candidate form of the rotary embedding against the shipped one, in a whole training step.

`empirical.training.model.apply_rotary` computes the formula as written: four products of the
strided halves ``x_{2i}``, ``x_{2i+1}`` and a copy that interleaves the rotated pairs.
:func:`rotary_contiguous` computes ``x * C + swap(x) * S`` with ``C = (cos_i, cos_i)``,
``S = (-sin_i, sin_i)`` per pair and ``swap`` exchanging each pair's coordinates: the same bits,
values and gradients, since ``a * (-s) = -(a s)`` and ``p + (-q) = p - q`` exactly and a sum of two
terms does not depend on their order (tests/test_bench_rotary.py). On a contiguous tensor alone it
is about 20% faster; what counts is the step. This bench times a training step of ``--preset``'s
RoFormer (one thread, a fixed batch: the step of `benchmarks/bench_training.py`) with each, in
alternating order over ``--rounds`` rounds, and prints tokens/s and the ratio of the candidate to
the shipped form, paired within rounds, with its 95% interval
(`empirical.measurement.throughput.ratio_summary`). It also trains both from the same seed for the
timed steps and says whether the weights are equal bit for bit.

    python benchmarks/bench_rotary.py --preset tasks-8192-small --rounds 8 --out figures/benchmarks/rotary.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from empirical.measurement.roofline import host  # noqa: E402
from empirical.measurement.throughput import ratio_summary, time_steps, training_step  # noqa: E402
from empirical.training import model as roformer  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from hmmtf import source_commit  # noqa: E402



def rotary_contiguous(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The module docstring's candidate: ``x * C + swap(x) * S``, in the tables' dtype, returned in
    ``x.dtype`` (as :func:`~empirical.training.model.apply_rotary`)."""
    wide = x.to(cos.dtype)
    swapped = wide.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    paired_cos = cos.repeat_interleave(2, dim=-1)
    paired_sin = torch.stack((-sin, sin), dim=-1).flatten(-2)
    return (wide * paired_cos + swapped * paired_sin).to(x.dtype)


FORMS = {"shipped (pairwise formula)": roformer.apply_rotary, "candidate (contiguous)": rotary_contiguous}
"""The two forms of the rotation, the shipped one first."""


def timed_form(form, preset, steps: int, warmup: int) -> tuple[float, dict[str, torch.Tensor]]:
    """Tokens/s of ``steps`` training steps with the rotation ``form``, and the weights after them."""
    shipped = roformer.apply_rotary
    roformer.apply_rotary = form
    try:
        model, step, batch = training_step(preset, preset.train.batch_size, torch.device("cpu"))
        timing = time_steps(step, steps, warmup, torch.device("cpu"))
    finally:
        roformer.apply_rotary = shipped
    return batch.inputs.numel() * steps / timing.seconds, {name: value.detach().clone()
                                                          for name, value in model.state_dict().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tasks-8192-small", choices=sorted(PRESETS))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.rounds < 2 or args.steps < 1 or args.warmup < 0:
        parser.error(f"--rounds {args.rounds}, --steps {args.steps}, --warmup {args.warmup}: expected at least 2 "
                     f"rounds, 1 step and no negative warm-up")
    torch.set_num_threads(1)
    preset = get_preset(args.preset)
    load = os.getloadavg()[0]
    rates: dict[str, list[float]] = {name: [] for name in FORMS}
    weights: dict[str, dict[str, torch.Tensor]] = {}
    for index in range(args.rounds):
        for name in (list(FORMS) if index % 2 == 0 else list(reversed(FORMS))):
            rate, weights[name] = timed_form(FORMS[name], preset, args.steps, args.warmup)
            rates[name].append(rate)
    shipped, candidate = list(FORMS)
    same_bits = all(torch.equal(weights[shipped][key], weights[candidate][key]) for key in weights[shipped])
    result = {
        "command": ["python", "benchmarks/bench_rotary.py", *(argv if argv is not None else sys.argv[1:])],
        "git_commit": source_commit(), "host": host(), "torch": torch.__version__, "threads": 1, "load_average_at_start": load,
        "preset": args.preset, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
        "tokens_per_s": rates,
        "median_tokens_per_s": {name: float(torch.tensor(values).median()) for name, values in rates.items()},
        "candidate_over_shipped": ratio_summary(rates[candidate], rates[shipped]),
        "same_weights_after_the_steps": same_bits,
    }
    summary = result["candidate_over_shipped"]
    print(f"{args.preset}, {args.rounds} rounds of {args.steps} steps, one thread (load {load:.2f} at the start)")
    for name in FORMS:
        print(f"  {name}: median {result['median_tokens_per_s'][name]:,.0f} tokens/s")
    print(f"  candidate / shipped: {summary['ratio']:.3f} [{summary['interval'][0]:.3f}, {summary['interval'][1]:.3f}]; "
          f"same weights after the steps: {same_bits}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
