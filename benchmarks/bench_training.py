"""Training throughput of the RoFormer: tokens/s and model FLOPs utilisation (MFU) against a
matrix-multiply peak measured in the same run on the same device.

    python benchmarks/bench_training.py --preset cpu-small            # CPU, float32
    python benchmarks/bench_training.py --preset paper --compile      # GPU, bf16 autocast

Model FLOPs per trained token (PaLM convention, Chowdhery et al. 2022, Appendix B;
:func:`empirical.model.training_flops_per_token`)::

    6 * (N_matrices + V W) + 12 L W N_ctx

with ``N_matrices`` the parameters of the blocks' weight matrices, ``V W`` the unembedding and the
last term the attention scores and mixing (counted over the full N_ctx x N_ctx square, as PaLM
does, though causal attention needs half). MFU = (FLOPs per token x tokens/s) / peak, where the
peak is the best of several ``n x n`` matrix products in the training dtype (float32 on CPU,
bfloat16 on CUDA). A step is forward + backward + gradient clipping + AdamW on a batch of random
tokens of the preset's shape (the data pipeline is excluded: it runs on the CPU beside the GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from empirical.model import RoFormer, training_flops_per_token  # noqa: E402
from empirical.presets import PRESETS, get_preset  # noqa: E402
from empirical.roofline import matmul_peak, synchronize  # noqa: E402
from empirical.train import (  # noqa: E402
    IGNORE_INDEX,
    Batch,
    DistributedContext,
    accumulate_gradients,
    build_optimizer,
)
from hmmtf import source_commit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu-small", choices=sorted(PRESETS))
    parser.add_argument("--device", help="default: CUDA if available, else CPU")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation, allocator)")
    parser.add_argument("--batch-size", type=int, help="default: the preset's")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    precision = "bf16" if cuda else "fp32"
    preset = get_preset(args.preset)
    batch_size = args.batch_size or preset.train.batch_size
    fmt = preset.prompt_format
    num_tokens = preset.mixture_spec.num_tokens

    load_average = os.getloadavg()[0]  # other processes on the cores: a timing is only as clean as its machine
    peak = matmul_peak(device, torch.bfloat16 if cuda else torch.float32, 8192 if cuda else 1024)

    torch.manual_seed(0)
    model = RoFormer(preset.model_config(num_tokens)).to(device)
    optimizer = build_optimizer(model, preset.train)
    trained = torch.compile(model) if args.compile else model
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, num_tokens + 1, (batch_size, fmt.length), generator=generator)
    targets = torch.cat([tokens[:, 1:], torch.full((batch_size, 1), IGNORE_INDEX)], dim=1)
    batch = Batch(tokens, targets)
    single = DistributedContext(0, 1)

    def step() -> None:
        accumulate_gradients(trained, batch, single, device, precision)
        torch.nn.utils.clip_grad_norm_(model.parameters(), preset.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize(device)
    seconds = time.perf_counter() - start

    tokens_per_s = args.steps * tokens.numel() / seconds
    model_flops = training_flops_per_token(model.config, fmt.length) * tokens_per_s
    result = {
        "command": ["python", *sys.argv],
        "git_commit": source_commit(),
        "device": torch.cuda.get_device_name(device) if cuda else f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "load_average_at_start": load_average,
        "preset": preset.name,
        "precision": precision,
        "compile": args.compile,
        "batch_size": batch_size,
        "context": fmt.length,
        "parameters": model.num_parameters(),
        "seconds_per_step": seconds / args.steps,
        "tokens_per_s": tokens_per_s,
        "model_flops_per_token": training_flops_per_token(model.config, fmt.length),
        "model_flops_per_s": model_flops,
        "matmul_peak_flops_per_s": peak,
        "mfu": model_flops / peak,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
