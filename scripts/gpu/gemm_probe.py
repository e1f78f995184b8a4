#!/usr/bin/env python3
"""GEMM rates by shape and under sustained load on one GPU, through PyTorch.

Usage: gemm_probe.py OUT.json [--tiny] [--sustain-s S]

Two measurements for hzp's GEMM model (the Hopper issue):
  shapes:  bf16 (and, where torch._scaled_mm runs, FP8 e4m3) GEMMs y = a @ w.T
           with a of (m, k) and w of (n, k), over m at the widths of Llama-3
           8B/70B layers and over square sizes: median of 10 timed runs after
           3 warm-ups, CUDA events, random data. Each row has the SM clock and
           board power read right after it (NVML, where it answers).
  sustained: one 8192^3 bf16 GEMM issued back to back for --sustain-s seconds
           (default 15): TFLOP/s, SM clock and power per half-second window,
           so the rate the device holds at its power limit stands beside the
           burst rate of the first window.
--tiny: fp32 on the CPU, small shapes, 1 s sustained (checks the script).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import median_s  # noqa: E402


def nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

        def read():
            return {"sm_MHz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "power_W": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "temp_C": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)}
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        return read, {"power_limit_W": limit,
                      "max_sm_MHz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)}
    except Exception as e:  # noqa: BLE001 (no NVML: the rates alone)
        return (lambda: {}), {"nvml": f"unavailable: {type(e).__name__}: {e}"}


def shapes(tiny):
    if tiny:
        return [(64, 64, 64), (128, 64, 32)]
    rows = []
    # (n, k): Llama-3 8B's q/o, k/v, gate/up, down, lm_head; 70B's q/o, gate/up, down.
    widths = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096),
              (8192, 8192), (28672, 8192), (8192, 28672)]
    for n, k in widths:
        for m in (1024, 2048, 4096, 8192, 16384):
            rows.append((m, n, k))
    # Tiles over 132 SMs in fractional waves: m just above and below multiples of 128-row tiles.
    for m in (1920, 2048, 2176, 3968, 4096, 4224):
        rows.append((m, 4096, 4096))
    for s in (512, 1024, 2048, 4096, 6144, 8192, 12288, 16384):
        rows.append((s, s, s))
    return rows


def fp8_gemm(device, m, n, k):
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--sustain-s", type=float, default=15.0)
    a = ap.parse_args()
    device = torch.device("cpu" if a.tiny or not torch.cuda.is_available() else "cuda")
    dt = torch.float32 if device.type == "cpu" else torch.bfloat16
    read, facts = nvml() if device.type == "cuda" else ((lambda: {}), {})
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
           "facts": facts, "shapes": [], "sustained": []}
    if device.type == "cuda":
        res["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, k in shapes(a.tiny):
        x = torch.randn(m, k, device=device, dtype=dt)
        w = torch.randn(n, k, device=device, dtype=dt)
        s = median_s(lambda: torch.nn.functional.linear(x, w), device)
        row = {"dtype": str(dt).replace("torch.", ""), "m": m, "n": n, "k": k, "seconds": s,
               "tflops": 2.0 * m * n * k / s / 1e12, **read()}
        res["shapes"].append(row)
        del x, w
        if device.type == "cuda":
            try:
                s8 = median_s(fp8_gemm(device, m, n, k), device)
                res["shapes"].append({"dtype": "float8_e4m3fn", "m": m, "n": n, "k": k, "seconds": s8,
                                      "tflops": 2.0 * m * n * k / s8 / 1e12, **read()})
            except Exception as e:  # noqa: BLE001 (no FP8 GEMM in this torch or shape)
                res.setdefault("fp8_error", f"{type(e).__name__}: {str(e)[:300]}")
        print(f"gemm_probe: {m} x {n} x {k}: {row['tflops']:.1f} TFLOP/s", flush=True)
    size = 256 if a.tiny else 8192
    x = torch.randn(size, size, device=device, dtype=dt)
    w = torch.randn(size, size, device=device, dtype=dt)
    flop = 2.0 * size ** 3
    sustain = 1.0 if a.tiny else a.sustain_s
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < sustain:
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.5:
            for _ in range(20):
                torch.nn.functional.linear(x, w)
            n += 20
            if device.type == "cuda":
                torch.cuda.synchronize()
        dt_s = time.perf_counter() - t0
        res["sustained"].append({"t_s": round(time.perf_counter() - t_start, 3),
                                 "tflops": flop * n / dt_s / 1e12, **read()})
    if res["sustained"]:
        rates = [r["tflops"] for r in res["sustained"]]
        res["sustained_summary"] = {"first_window_tflops": rates[0],
                                    "median_after_5s_tflops": statistics.median(
                                        [r["tflops"] for r in res["sustained"] if r["t_s"] >= 5] or rates)}
        print(f"gemm_probe: sustained {size}^3: {res['sustained_summary']}", flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
