"""The rooflines every benchmark compares with: the machine's matrix-multiply rate and its read
bandwidth, measured in the same run as the code they judge."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

PEAK_REPEATS = 10
"""Timed calls for a peak or a bandwidth; the fastest counts."""

STREAMED_BYTES = 1 << 30
"""Bytes one timed bandwidth call reads (a small array is re-read until this many): 1 GiB takes
tens of milliseconds even from cache, so the call overhead does not count."""


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (a no-op on the CPU), so a timer measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(function, repeats: int = 1, device: torch.device = torch.device("cpu")):
    """``(function(), seconds of the fastest of repeats calls)``, each call timed between two
    synchronizations of ``device``; the result is the last call's."""
    if repeats < 1:
        raise ValueError(f"repeats: {repeats}; expected at least 1 timed call")
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = function()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return result, best


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int) -> float:
    """Best FLOP/s of ``size x size`` products on ``device`` in ``dtype``: ``2 size^3 / seconds``."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    _, seconds = timed(lambda: a @ b, PEAK_REPEATS, device)
    return 2 * size**3 / seconds


def read_bandwidth(device: torch.device, num_bytes: int) -> float:
    """Best bytes/s of re-reading one float64 array of ``num_bytes`` bytes:
    ``r * num_bytes / seconds`` for ``x.expand(r, n).sum()``, which reads the same ``n`` elements
    ``r = max(1, STREAMED_BYTES // num_bytes)`` times in one call.

    Re-reading one array is what a filter does with its matrices at every step, so the array stays
    in the fastest level of the memory hierarchy that holds ``num_bytes``: the size picks the level.
    """
    if num_bytes < 8:
        raise ValueError(f"num_bytes: {num_bytes}; expected at least one float64 (8 bytes)")
    x = torch.ones(num_bytes // 8, device=device, dtype=torch.float64)
    repeats = max(1, STREAMED_BYTES // num_bytes)
    stream = x.expand(repeats, x.numel())
    stream.sum()
    _, seconds = timed(stream.sum, PEAK_REPEATS, device)
    return repeats * x.numel() * 8 / seconds


def host() -> dict:
    """The machine a timing was measured on, as its record carries it: the CPU's model name (from
    ``/proc/cpuinfo``; the platform's processor elsewhere), its logical cores, and the instruction
    set torch's CPU kernels dispatch to (``kernels``: ``AVX512``, ``AVX2``, ``DEFAULT`` under
    ``ATEN_CPU_CAPABILITY=default``), which sets the rate as much as the code does."""
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
              if line.startswith("model name")] if cpuinfo.is_file() else []
    return {"cpu": models[0] if models else platform.processor() or "an unnamed CPU", "cores": os.cpu_count(),
            "kernels": torch.backends.cpu.get_cpu_capability()}
