"""Timing shared by the GPU probes: the median of timed runs after warm-ups,
CUDA events on a GPU, the wall clock on the CPU (--tiny checks)."""
import statistics
import time

import torch


def median_s(fn, device, reps=10, warmup=3):
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e-3 for s, e in ev)
