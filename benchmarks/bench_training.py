"""Training throughput of the RoFormer: tokens/s and model FLOPs utilisation (MFU) against a
matrix-multiply peak measured in the same run on the same device.

    python benchmarks/bench_training.py --preset cpu-small            # CPU, float32
    python benchmarks/bench_training.py --preset paper --compile      # GPU, bf16 autocast
    python benchmarks/bench_training.py --compare --compile --steps 50 --warmup 5 --rounds 6   # ways to use the CPU's cores

Model FLOPs per trained token (PaLM convention, Chowdhery et al. 2022, Appendix B;
:func:`empirical.training.model.training_flops_per_token`)::

    6 * (N_matrices + V W) + 12 L W N_ctx

with ``N_matrices`` the parameters of the blocks' weight matrices, ``V W`` the unembedding and the
last term the attention scores and mixing (counted over the full N_ctx x N_ctx square, as PaLM
does, though causal attention needs half). MFU = (FLOPs per token x tokens/s) / peak, where the
peak is the best of several ``n x n`` matrix products in the training dtype (float32 on CPU,
bfloat16 on CUDA). A step is forward + backward + gradient clipping + AdamW on a batch of random
tokens of the preset's shape (the data pipeline is excluded: it runs on the CPU beside the GPU).

``--compare`` measures, in one run on the CPU, the whole machine's training tokens/s for one
preset's shape (default ``tasks-8192-small``, the ladder's 4 x 4 x 64) in each way of using its
``--cores`` (:func:`empirical.measurement.throughput.layouts`): today's path (one process, one thread, glibc's
malloc defaults), one process with a thread per core, one DDP run of a process per core,
independent runs of a process per core side by side (the machine's rate is their sum over the
interval all of them were timing), today's path and the independent runs again at twice the
batch, today's path, the DDP run and the independent runs with the training tunables of
:mod:`empirical.training.allocator`, and with ``--compile`` today's path compiled. Each way runs in fresh
processes (:mod:`empirical.measurement.throughput`), ``--rounds`` times, every round measuring every way once
in a rotated order::

    tokens/s       = median over the rounds
    ratio_to_today = exp(mean over rounds r of log(tokens/s_r / tokens/s of today's path_r)),
                     with a 95% Student interval over the rounds (ratio_summary)
    mfu            = FLOPs per token x tokens/s / peak of the cores

with the cores' float32 matmul peak measured in the same run, the larger of ``cores`` one-thread
processes at once (the sum of their peaks) and one process of ``cores`` threads. The JSON's
``target`` names the ways that meet :data:`TARGET_RULE`. ``--ways`` measures only the ways it names
beside today's path: in a round of two ways the two are measured one right after the other, so
their ratio shares more of the machine's drift. Timings on busy cores are not results:
``--out`` is refused when the load average at the start is above ``--max-load``, unless
``--allow-load``.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from empirical.training.model import RoFormer, training_flops_per_token  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.measurement.roofline import host, matmul_peak  # noqa: E402
from empirical.measurement.throughput import (  # noqa: E402
    Layout,
    layouts,
    measure_layout,
    measure_peaks,
    ratio_summary,
    time_steps,
    training_step,
)
from hmmtf import USER_ERROR_EXIT_CODE, Parser, UsageError, error_line, source_commit  # noqa: E402
from hmmtf.options import integer_at_least, non_negative_int, positive_float, positive_int  # noqa: E402

PROG = "bench_training.py"
SINGLE_PRESET = "cpu-small"
COMPARE_PRESET = "tasks-8192-small"
"""The comparison's default shape: the ladder's 4 x 4 x 64 (cpu-small's shape; the 8192-task
mixture only changes the data, which the benchmark does not sample)."""
CPU_PEAK_SIZE = 1024
"""``n`` of the float32 ``n x n`` products of the CPU peak."""
CUDA_PEAK_SIZE = 8192
"""``n`` of the bfloat16 ``n x n`` products of the CUDA peak."""
CORES = 2
"""The comparison's default number of cores: this project's machines'."""
MAX_LOAD = 0.5
"""Highest 1-minute load average at the start for which ``--compare`` writes ``--out``: on idle
cores it is near 0; a run beside a busy process is near 1 per busy core."""
TIMEOUT_S = 900.0
"""Seconds one way of the comparison may take, warm-up (compilation) included, before its workers
are killed and the way reported as failed."""
ROUNDS = 1
"""The comparison's default number of rounds (a quick look; the committed comparison runs 6)."""
TARGET_RATIO = 2.0
"""The throughput target of the issue that asked for this comparison: twice today's tokens/s on
the whole machine for the ladder's 4 x 4 x 64 shape."""
TARGET_RULE = ("a way meets the target when the lower end of the 95% interval of its ratio to today's path, "
               "over the rounds, is at least 2")
"""The decision rule, stated before the comparison was run; one round gives no interval and meets nothing."""
COMPARE_ONLY = ("cores", "max_load", "allow_load", "timeout", "rounds", "ways")


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help=f"default: {SINGLE_PRESET}, or {COMPARE_PRESET} with --compare")
    parser.add_argument("--device", help="default: CUDA if available, else CPU (--compare: CPU only)")
    parser.add_argument("--steps", type=positive_int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=non_negative_int, default=3,
                        help="untimed steps first (compilation, allocator)")
    parser.add_argument("--batch-size", type=positive_int, help="default: the preset's")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (--compare: add today's path compiled)")
    parser.add_argument("--threads", type=positive_int, help="torch.set_num_threads (CPU; not with --compare)")
    parser.add_argument("--out", help="also write the JSON result here")
    compare = parser.add_argument_group("comparison of the ways to use the CPU's cores")
    compare.add_argument("--compare", action="store_true", help="compare the ways (module docstring)")
    compare.add_argument("--cores", type=integer_at_least(2), help=f"cores to use (default {CORES}; the ways differ from 2 on)")
    compare.add_argument("--max-load", type=positive_float,
                         help=f"highest load average at the start for which --out is written (default {MAX_LOAD})")
    compare.add_argument("--allow-load", action="store_true", help="write --out whatever the load")
    compare.add_argument("--rounds", type=positive_int,
                         help=f"measure every way this many times, in rotated order (default {ROUNDS})")
    compare.add_argument("--ways", nargs="+", metavar="NAME",
                         help="measure only these ways beside today's path (their JSON names, e.g. "
                              "independent-2x1-tuned-malloc): more rounds in the same time, each way next to today's")
    compare.add_argument("--timeout", type=positive_float,
                         help=f"seconds one way may take before it is killed and reported failed (default {TIMEOUT_S:g})")
    return parser


def resolve(args):
    """``args`` with the mode's defaults; ``UsageError`` for an option the mode does not take, and
    for a batch the DDP way cannot split."""
    args.preset = args.preset or (COMPARE_PRESET if args.compare else SINGLE_PRESET)
    if not args.compare:
        given = [name for name in COMPARE_ONLY if getattr(args, name) not in (None, False)]
        if given:
            raise UsageError(PROG, f"--{given[0].replace('_', '-')}: only with --compare")
        return args
    args.cores = args.cores or CORES
    args.max_load = args.max_load or MAX_LOAD
    args.timeout = args.timeout or TIMEOUT_S
    args.rounds = args.rounds or ROUNDS
    if args.threads is not None:
        raise UsageError(PROG, f"--threads: {args.threads}; the comparison sets each way's threads, "
                                              "expected no --threads with --compare")
    if args.device not in (None, "cpu"):
        raise UsageError(PROG, f"--device: {args.device}; expected cpu (the comparison is of CPU cores)")
    batch_size = args.batch_size or get_preset(args.preset).train.batch_size
    if batch_size % args.cores:
        raise UsageError(PROG, f"--batch-size: {batch_size}; expected a multiple of --cores "
                                              f"{args.cores} (a DDP run splits the batch across its processes)")
    names = [way.name for way in layouts(args.cores, batch_size, compile=args.compile)]
    unknown = [name for name in args.ways or () if name not in names[1:]]
    if unknown:
        raise UsageError(PROG, f"--ways: {unknown[0]!r}; expected names of ways other than today's path among "
                               f"{', '.join(names[1:])}")
    return args


def chosen_ways(ways: list[Layout], names: list[str] | None) -> list[Layout]:
    """Today's path (the first way) and the ways named, in the order of ``ways``; all of them
    without names."""
    return ways if names is None else [ways[0], *(way for way in ways[1:] if way.name in names)]


def single(args, command: list[str]) -> dict:
    """One configuration in this process (the mode the committed cpu-small benchmarks use)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    precision = "bf16" if cuda else "fp32"
    preset = get_preset(args.preset)
    batch_size = args.batch_size or preset.train.batch_size
    length = preset.prompt_format.length

    load_average = os.getloadavg()[0]  # other processes on the cores: a timing is only as clean as its machine
    peak = matmul_peak(device, torch.bfloat16 if cuda else torch.float32, CUDA_PEAK_SIZE if cuda else CPU_PEAK_SIZE)

    model, step, batch = training_step(preset, batch_size, device, compile=args.compile, precision=precision)
    seconds = time_steps(step, args.steps, args.warmup, device).seconds

    tokens_per_s = args.steps * batch.inputs.numel() / seconds
    model_flops = training_flops_per_token(model.config, length) * tokens_per_s
    return {
        "command": command,
        "git_commit": source_commit(),
        "host": host(),
        "device": torch.cuda.get_device_name(device) if cuda else f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "load_average_at_start": load_average,
        "preset": preset.name,
        "precision": precision,
        "compile": args.compile,
        "batch_size": batch_size,
        "context": length,
        "parameters": model.num_parameters(),
        "seconds_per_step": seconds / args.steps,
        "tokens_per_s": tokens_per_s,
        "model_flops_per_token": training_flops_per_token(model.config, length),
        "model_flops_per_s": model_flops,
        "matmul_peak_flops_per_s": peak,
        "mfu": model_flops / peak,
    }


def measure_round(ways: list[Layout], index: int, preset, args) -> list[dict]:
    """Round ``index``: every way measured once (:func:`empirical.measurement.throughput.measure_layout`), in
    the list's order rotated by ``index`` so that no way always follows the same one; the results
    in the list's order."""
    start = index % len(ways)
    order = list(range(start, len(ways))) + list(range(start))
    measured = {position: measure_layout(ways[position], preset, args.steps, args.warmup, args.timeout)
                for position in order}
    return [measured[position] for position in range(len(ways))]


def summarise_way(way: Layout, measured: list[dict], today: list[dict], flops_per_token: int,
                  peak_flops_per_s: float | None) -> dict:
    """One way over the rounds: each round's measurement, the median tokens/s, the ratio to today's
    path with its interval (:func:`empirical.measurement.throughput.ratio_summary`) and the MFU of the median;
    the first round's ``error`` instead when the way failed in any round, and no ratio when today's
    path did."""
    result = {**asdict(way), "rounds": measured}
    failed = [round_["error"] for round_ in measured if "error" in round_]
    if failed:
        return {**result, "error": failed[0]}
    rates = [round_["tokens_per_s"] for round_ in measured]
    median = float(np.median(rates))
    result.update(tokens_per_s=median, model_flops_per_s=flops_per_token * median,
                  mfu=flops_per_token * median / peak_flops_per_s if peak_flops_per_s else None,
                  ratio_to_today=None, ratio_interval=None, ratios=None)
    if not any("error" in round_ for round_ in today):
        summary = ratio_summary(rates, [round_["tokens_per_s"] for round_ in today])
        result.update(ratio_to_today=summary["ratio"], ratio_interval=summary["interval"], ratios=summary["ratios"])
    return result


def meets_target(way: dict) -> bool:
    """:data:`TARGET_RULE`: the lower end of the way's ratio interval is at least :data:`TARGET_RATIO`."""
    return way.get("ratio_interval") is not None and way["ratio_interval"][0] >= TARGET_RATIO


def compare(args, command: list[str], load_average: float) -> dict:
    """Every way of :func:`empirical.measurement.throughput.layouts` in ``args.rounds`` rounds, and the cores'
    peak, measured in fresh processes; each way's median tokens/s, ``ratio_to_today`` with its
    interval and ``mfu`` (module docstring), ``None`` where the way, today's path or the peak failed
    (the failed one's ``error`` says why); and the ways that meet :data:`TARGET_RULE`."""
    preset = get_preset(args.preset)
    batch_size = args.batch_size or preset.train.batch_size
    length = preset.prompt_format.length
    config = preset.model_config(preset.mixture_spec.num_tokens)
    flops_per_token = training_flops_per_token(config, length)
    peak = measure_peaks(args.cores, CPU_PEAK_SIZE, args.timeout)
    ways = chosen_ways(layouts(args.cores, batch_size, compile=args.compile), args.ways)
    rounds = [measure_round(ways, index, preset, args) for index in range(args.rounds)]
    today = [round_[0] for round_ in rounds]
    configurations = [summarise_way(way, [round_[position] for round_ in rounds], today, flops_per_token,
                                    peak["flops_per_s"]) for position, way in enumerate(ways)]
    return {
        "command": command,
        "git_commit": source_commit(),
        "host": host(),
        "device": "cpu",
        "torch": torch.__version__,
        "cores": args.cores,
        "load_average_at_start": load_average,
        "max_load": args.max_load,
        "preset": preset.name,
        "shape": {"layers": config.num_layers, "heads": config.num_heads, "width": config.width},
        "precision": "fp32",
        "batch_size": batch_size,
        "context": length,
        "steps": args.steps,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "parameters": RoFormer(config).num_parameters(),
        "model_flops_per_token": flops_per_token,
        "matmul_peak": peak,
        "today": ways[0].name,
        "target": {"ratio": TARGET_RATIO, "rule": TARGET_RULE,
                   "met_by": [way["name"] for way in configurations if meets_target(way)]},
        "configurations": configurations,
    }


def _number(value: float | None, form: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, form)


def comparison_table(result: dict) -> str:
    """The comparison as text: its shape, load and peak, then a row a way (median tokens/s over
    the rounds, ratio to today's path with its interval, the slowest worker's warm-up seconds of
    any round, compilation included), then the ways that meet the target."""
    shape, peak = result["shape"], result["matmul_peak"]
    peaks = ", ".join(f"{name.replace('_', ' ')}: {_number(way['flops_per_s'], '.1f', 1e9)}"
                      for name, way in peak["ways"].items())
    lines = [
        f"{result['preset']}: {shape['layers']} layers x {shape['heads']} heads x width {shape['width']}, batch "
        f"{result['batch_size']} x {result['context']} tokens, {result['steps']} timed steps after "
        f"{result['warmup']} warm-up, {result['rounds']} round(s); load average "
        f"{result['load_average_at_start']:.2f} at the start",
        f"{result['cores']}-core float32 matmul peak: {_number(peak['flops_per_s'], '.1f', 1e9)} GFLOP/s, "
        f"the larger of ({peaks})",
        "",
        f"{'way':<52} {'tokens/s':>10} {'x today':>8} {'95% interval':>14} {'MFU':>6} {'warm-up s':>9}  threads",
    ]
    for way in result["configurations"]:
        if "error" in way:
            lines.append(f"{way['description']:<52} failed: {way['error']}")
            continue
        threads = ",".join(str(worker["threads"]) for worker in way["rounds"][0]["workers"])
        warmup_s = max(worker["warmup_s"] for round_ in way["rounds"] for worker in round_["workers"])
        interval = way["ratio_interval"]
        interval_text = "-" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"
        lines.append(f"{way['description']:<52} {way['tokens_per_s']:>10,.0f} {_number(way['ratio_to_today'], '.2f'):>8} "
                     f"{interval_text:>14} {_number(way['mfu'], '.3f'):>6} {warmup_s:>9.1f}  {threads}")
    met = result["target"]["met_by"]
    lines += ["", f"target {result['target']['ratio']:g}x ({result['target']['rule']}): "
                  + (f"met by {', '.join(met)}" if met else "met by no way")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = ["python", Path(__file__).resolve().relative_to(ROOT).as_posix(), *argv]
    try:
        args = resolve(build_parser().parse_args(argv))
    except UsageError as error:
        print(error_line(error.prog, str(error)), file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    if not args.compare:
        text = json.dumps(single(args, command), indent=2, allow_nan=False)
        print(text)
    else:
        load_average = os.getloadavg()[0]
        if args.out and load_average > args.max_load and not args.allow_load:
            print(error_line(PROG, f"--out: the load average at the start is {load_average:.2f}, above "
                             f"--max-load {args.max_load:g}: a timing on busy cores is not a result; wait for idle "
                             "cores or pass --allow-load"), file=sys.stderr)
            return USER_ERROR_EXIT_CODE
        result = compare(args, command, load_average)
        print(comparison_table(result))
        text = json.dumps(result, indent=2, allow_nan=False)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
