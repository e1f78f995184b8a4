#!/usr/bin/env python3
"""GEMM efficiency by shape: hzp's model against our own H200 probe.

Reads the bf16 shapes `scripts/gpu/gemm_probe.py` timed before the power limit
set in (the rows at the probe's top clock) and prints, for each, the measured
fraction of the bf16 peak beside what hzp's device profile gives: the square
GEMM curve at the cube root of m.n.k alone ("curve"), and with the profile's
gemm_tiling ("tiled", as cost/perf_model.cpp computes it: the curve times
the shape's fill over the fill of the square of its size, never above the
curve's best). Usage:

  validation/gemm_shapes.py [PROBE.json] [CLUSTER.json]
"""
import json
import math
import statistics
import sys

probe = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "validation/gpu/2026-12-04-h200/gemm-probe.json"))
device = json.load(open(sys.argv[2] if len(sys.argv) > 2 else "topologies/catalog/dgx-h200.json"))["device"]
curve, tiling, peak = device["gemm_efficiency"], device["gemm_tiling"], device["peak_tflops"]["bf16"]


def at(size):  # log-linear between the points, clamped at the ends
    if size <= curve[0][0]:
        return curve[0][1]
    for (a, ea), (b, eb) in zip(curve, curve[1:]):
        if size <= b:
            return ea + (math.log(size / a) / math.log(b / a)) * (eb - ea)
    return curve[-1][1]


def fill(m, n, batch=1):
    best = 0.0
    for tm, tn, rate in tiling["tiles"]:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        best = max(best, rate * min(1.0, tiles / tiling["sms"]) * batch * m * n / (tiles * tm * tn))
    return best


top = max(s["sm_MHz"] for s in probe["shapes"])
rows = []
print(f"{'m':>6} {'n':>6} {'k':>6}  measured  curve          tiled")
for s in probe["shapes"]:
    if s["dtype"] != "bfloat16" or s["sm_MHz"] != top:
        continue
    m, n, k = s["m"], s["n"], s["k"]
    size = (m * n * k) ** (1 / 3)
    measured, old = s["tflops"] / peak, at(size)
    new = min(old * fill(m, n) / fill(size, size), max(old, max(e for _, e in curve)))
    rows.append((measured, old, new))
    print(f"{m:6d} {n:6d} {k:6d}  {measured:8.3f}  {old:.3f} {old / measured - 1:+5.0%}  {new:.3f} {new / measured - 1:+5.0%}")
for name, i in (("curve", 1), ("tiled", 2)):
    errs = [abs(r[i] / r[0] - 1) for r in rows]
    print(f"{name}: {len(rows)} shapes at {top} MHz, mean |error| {statistics.mean(errs):.1%}, max {max(errs):.1%}")
