#!/usr/bin/env python3
"""What a small, bandwidth-bound kernel costs on one GPU, through PyTorch.

Usage: kernel_probe.py OUT.json [--tiny]

For hzp's cost of non-GEMM kernels (bytes at a fraction of HBM bandwidth plus
a fixed cost per kernel, the Hopper issue):
  bandwidth: element-wise kernels as eager PyTorch launches them (copy, add,
           mul, SiLU, fp32 -> bf16 and bf16 -> fp32 casts) over 4 KiB to 1 GiB
           tensors: median of 20 timed runs (CUDA events) after 3 warm-ups;
           bytes read plus written per second, and as a fraction of the
           device's HBM bandwidth (--hbm-GBps, default H200's 4,800).
  per kernel: 200 one-element adds back to back, timed as issued by the host
           (eager) and replayed from a CUDA graph (no host): the device's own
           cost per kernel (launch and tail) and the host's issue cost.
--tiny: on the CPU, small sizes (checks the script).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import median_s  # noqa: E402


def ops(n, device):
    """(name, function, bytes read + written) for tensors of n elements."""
    a = torch.randn(n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    a32 = torch.randn(n, device=device, dtype=torch.float32)
    return [
        ("copy bf16", lambda: out.copy_(a), 4 * n),
        ("add bf16", lambda: torch.add(a, b, out=out), 6 * n),
        ("mul bf16", lambda: torch.mul(a, b, out=out), 6 * n),
        ("silu bf16", lambda: F.silu(a), 4 * n),
        ("cast fp32->bf16", lambda: a32.to(torch.bfloat16), 6 * n),
        ("cast bf16->fp32", lambda: a.to(torch.float32), 6 * n),
    ]


def per_kernel(device, count=200):
    x = torch.zeros(1, device=device)

    def burst():
        for _ in range(count):
            x.add_(1.0)

    eager = median_s(burst, device, reps=10) / count
    graph = None
    if device.type == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            burst()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            burst()
        graph = median_s(g.replay, device, reps=10) / count
    return {"kernels": count, "eager_s_per_kernel": eager, "graph_s_per_kernel": graph}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--hbm-GBps", type=float, default=4800.0)
    a = ap.parse_args()
    device = torch.device("cpu" if a.tiny or not torch.cuda.is_available() else "cuda")
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
           "hbm_GBps": a.hbm_GBps, "bandwidth": []}
    top = 22 if a.tiny else 30  # elements: 2^11 .. 2^29 (4 KiB .. 1 GiB of bf16)
    for log2n in range(11, top, 2):
        n = 1 << log2n
        for name, fn, nbytes in ops(n, device):
            s = median_s(fn, device, reps=20)
            res["bandwidth"].append({"op": name, "elements": n, "bytes": nbytes, "seconds": s,
                                     "GBps": nbytes / s / 1e9, "hbm_fraction": nbytes / s / 1e9 / a.hbm_GBps})
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"kernel_probe: 2^{log2n} elements done", flush=True)
    big = [r for r in res["bandwidth"] if r["elements"] == max(x["elements"] for x in res["bandwidth"])]
    res["largest"] = {r["op"]: round(r["hbm_fraction"], 4) for r in big}
    res["per_kernel"] = per_kernel(device)
    print(f"kernel_probe: largest tensors, fraction of HBM: {res['largest']}", flush=True)
    print(f"kernel_probe: per kernel {res['per_kernel']}", flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
