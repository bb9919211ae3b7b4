"""Timing for the benchmarks: calls timed one by one or in interleaved blocks, summarised as a
mean with its 95% t interval (``nac.stats.mean_ci``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nac.stats import mean_ci


def ci(values: Sequence[float]) -> dict:
    """``{"mean", "lo", "hi", "n", "values"}``: the mean of ``values`` with its 95% t interval."""
    iv = mean_ci(values)
    return {"mean": iv.estimate, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "values": list(values)}


def time_call(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of ``fn``."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def timed_blocks(fns: dict, blocks: int, steps: int, sync: Callable[[], object] = lambda: None) -> dict:
    """``{key: [seconds per call, per block]}``: 3 warm-up calls of each of ``fns``, then
    ``blocks`` blocks of ``steps`` calls of each, interleaved; ``sync`` (the device's
    synchronize, ``torch.cuda.synchronize`` on CUDA; nothing on the CPU) around every block."""
    for fn in fns.values():  # warm-up (cuDNN / cuBLAS heuristics, allocator)
        for _ in range(3):
            fn()
    sync()
    t = {k: [] for k in fns}
    for _ in range(blocks):
        for k, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            sync()
            t[k].append((time.perf_counter() - t0) / steps)
    return t


def fmt(iv: dict, scale: float = 1.0, digits: int = 1) -> str:
    """``mean [lo, hi]`` of a ``ci`` result, times ``scale``."""
    if iv["lo"] is None:
        return f"{iv['mean'] * scale:.{digits}f}"
    return f"{iv['mean'] * scale:.{digits}f} [{iv['lo'] * scale:.{digits}f}, {iv['hi'] * scale:.{digits}f}]"


__all__ = ["ci", "fmt", "time_call", "timed_blocks"]
