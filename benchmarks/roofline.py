"""The roofline every benchmark compares with: the machine's matrix-multiply rate, measured in the
same run as the code it judges."""
from __future__ import annotations

import time

import torch

PEAK_REPEATS = 10
"""Matrix products timed for the peak; the fastest counts."""


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (a no-op on the CPU), so a timer measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int) -> float:
    """Best FLOP/s of ``size x size`` products on ``device`` in ``dtype``: ``2 size^3 / seconds``."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(PEAK_REPEATS):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best
