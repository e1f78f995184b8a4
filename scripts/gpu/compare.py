#!/usr/bin/env python3
"""The tables of scripts/gpu-check.sh, from the files its stages wrote.

Usage: compare.py WORK_DIR [--json OUT.json]

Prints, from whatever the stages left in WORK_DIR:
  - GEMM rates by shape (hzp-run bench gemm);
  - the one-GPU hzp (2,8,8) Schedules: predicted and measured step, exposed
    communication, peak memory;
  - torch_ref's model three ways: hzp's prediction (hzp simulate), hzp-run's
    measurement of the same Schedule, and PyTorch's own steps (torch_ref.py),
    each with its time per kernel class (from the two traces and from
    torch_prof.py's profile of one eager step).
The classes: gemm, attention, norm/rotary/activation, loss, optimizer,
copies/casts, other kernels, and idle (the compute stream waiting: PyTorch's
unprofiled step less its profiled kernel time; in hzp's Schedules the step
less the compute stream's busy time).
"""
import argparse
import json
import os
import sys

CLASSES = ["gemm", "attention", "norm_rotary_act", "loss", "optimizer", "copies", "other", "idle"]
LABELS = {"gemm": "GEMM", "attention": "attention", "norm_rotary_act": "norm/rotary/act", "loss": "loss",
          "optimizer": "optimizer", "copies": "copies/casts", "other": "other", "idle": "idle/host-bound"}
# The Schedule's compute kinds (core::ComputeKind, the trace's "cat") by class.
HZP_CLASS = {"gemm": "gemm", "attention": "attention", "norm": "norm_rotary_act", "elementwise": "norm_rotary_act",
             "loss": "loss", "optimizer": "optimizer", "host_copy": "copies", "embedding": "other",
             "host_optimizer": "optimizer"}
# torch_prof.py's classes.
TORCH_CLASS = {"gemm": "gemm", "attention_fwd": "attention", "attention_bwd": "attention",
               "reduction_norm": "norm_rotary_act", "elementwise": "norm_rotary_act", "loss": "loss",
               "optimizer": "optimizer", "copy_cast": "copies", "other": "other"}


def load(work, name):
    path = os.path.join(work, name)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    with open(path) as f:
        return json.load(f)


def trace_classes(trace, step_s):
    """Seconds per class on the first rank class's busiest stream (its compute
    stream) of an hzp Timeline; idle is the step less that stream's busy time."""
    if not trace:
        return None
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    pids = sorted({e["pid"] for e in events if e.get("ph") == "X"})
    if not pids:
        return None
    per_stream = {}
    for e in events:
        if e.get("ph") != "X" or e["pid"] != pids[0]:
            continue
        cls = HZP_CLASS.get(e.get("cat", ""))
        if cls is None:
            continue  # collectives, sends, memory and event ops
        per_stream.setdefault(e["tid"], {}).setdefault(cls, 0.0)
        per_stream[e["tid"]][cls] += e["dur"] * 1e-6
    if not per_stream:
        return None
    compute = max(per_stream.values(), key=lambda c: sum(c.values()))
    out = {c: compute.get(c, 0.0) for c in CLASSES if c != "idle"}
    out["idle"] = max(0.0, step_s - sum(out.values())) if step_s else None
    return out


def torch_classes(prof, variant, step_s):
    """Kernel seconds per class of the profiled step; idle is the unprofiled
    median step (torch_ref) less the kernel time, since the profiler itself
    slows the host (its own wall time is longer)."""
    if not prof:
        return None
    for v in prof.get("variants", []):
        if v.get("variant") == variant and "classes_s" in v:
            out = {c: 0.0 for c in CLASSES}
            for k, s in v["classes_s"].items():
                out[TORCH_CLASS.get(k, "other")] += s
            out["idle"] = max(0.0, step_s - v["kernel_time_per_step_s"]) if step_s else None
            return out
    return None


def torch_variant(ref, name):
    if not ref:
        return None
    for v in ref.get("variants", []):
        if v.get("variant") == name:
            return v
    return None


def gemm_table(work, lines):
    g = load(work, "bench-gemm.json")
    if not g:
        return None
    lines.append("GEMM (bf16, cuBLASLt)                 TFLOP/s")
    rows = []
    for r in g["results"]:
        tf = 2 * r["m"] * r["n"] * r["k"] * r["batch"] / r["seconds"] / 1e12
        rows.append({"m": r["m"], "n": r["n"], "k": r["k"], "batch": r["batch"], "tflops": tf})
        lines.append(f"  {r['m']:>6} x {r['n']:>6} x {r['k']:>6} x{r['batch']:<4} {tf:8.1f}")
    return rows


def schedule_row(work, name):
    c, run, pred = load(work, f"{name}.compare.json"), load(work, f"{name}.run.json"), \
        load(work, f"{name}.predicted-summary.json")
    if not (c and run and pred):
        return None
    p = pred["results"][0]
    return {"backend": run["backend"], "predicted_step_s": c["step_s"]["predicted"],
            "measured_step_s": c["step_s"]["measured"], "error": c["step_s"]["error"],
            "exposed_comm_s": [c["exposed_communication_s"]["predicted"], c["exposed_communication_s"]["measured"]],
            "peak_reserved_GiB": [p["peak_reserved_GiB"], run["peak_reserved_GiB"]],
            "predicted_classes_s": trace_classes(load(work, f"{name}.predicted.json"), c["step_s"]["predicted"]),
            "measured_classes_s": trace_classes(load(work, f"{name}.measured.json"), c["step_s"]["measured"])}


def fmt_s(x):
    return "      -" if x is None else f"{x:7.4f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--json")
    a = ap.parse_args()
    lines, result = [], {}
    result["gemm"] = gemm_table(a.work, lines)

    lines.append("one-GPU step          predicted   measured   error   exposed comm pred/meas   peak GiB pred/meas")
    result["hzp"] = {}
    for mode in ("async", "sync"):
        r = schedule_row(a.work, f"hzp-{mode}")
        result["hzp"][mode] = r
        if not r:
            lines.append(f"  hzp (2,8,8) {mode:<5}: no result")
            continue
        lines.append(f"  hzp (2,8,8) {mode:<5} ({r['backend']}) {r['predicted_step_s']:9.4f} s {r['measured_step_s']:9.4f} s "
                     f"{100 * r['error']:+6.1f}%   {r['exposed_comm_s'][0]:.4f} / {r['exposed_comm_s'][1]:.4f} s   "
                     f"{r['peak_reserved_GiB'][0]:.1f} / {r['peak_reserved_GiB'][1]:.1f}")

    ref, prof = load(a.work, "torch-ref.json"), load(a.work, "torch-prof.json")
    # torch_ref's variants beside the hzp stack that models each.
    pairs = [("eager", "eager", "torch-torch-fsdp2", "eager-amp"),
             ("torch.compile", "compile", "torch-torch-fsdp2-compile", None)]
    cols, three = [], []
    for variant, short, name, prof_variant in pairs:
        r = schedule_row(a.work, name)
        t = torch_variant(ref, variant)
        t_step = t.get("median_step_s") if t else None
        row = {"variant": variant, "hzp": r, "torch": t,
               "torch_classes_s": torch_classes(prof, prof_variant, t_step) if prof_variant else None}
        three.append(row)
        if r:
            cols.append((f"hzp ({short})", r["predicted_step_s"], r["predicted_classes_s"]))
            cols.append((f"hzp-run ({r['backend']})", r["measured_step_s"], r["measured_classes_s"]))
        else:
            cols.append((f"hzp ({short})", None, None))
        cols.append((f"PyTorch ({short})", t_step, row["torch_classes_s"]))
    result["torch_model"] = three
    lines.append("")
    lines.append("torch_ref's model (4 layers of Llama-3 8B, seq 8192, micro-batch 1, no recompute) on one GPU, "
                 "seconds per step")
    width = 18
    lines.append("  " + " " * 16 + "".join(f"{c[0][:width - 1]:>{width}}" for c in cols))
    lines.append("  " + f"{'step':<16}" + "".join(f"{fmt_s(c[1]):>{width}}" for c in cols))
    for cls in CLASSES:
        cells = [fmt_s(c[2].get(cls)) if c[2] else fmt_s(None) for c in cols]
        lines.append("  " + f"{LABELS[cls]:<16}" + "".join(f"{x:>{width}}" for x in cells))
    if ref:
        lines.append("  PyTorch variants (torch_ref.py): " + "; ".join(
            f"{v['variant']} {v['median_step_s']:.4f} s, {v.get('mfu_model_pct', 0):.1f} % MFU"
            if "median_step_s" in v else f"{v['variant']} skipped ({v.get('skipped') or v.get('error', '?')})"
            for v in ref.get("variants", [])))
        for r in three:
            if r["hzp"] and r["torch"] and r["torch"].get("median_step_s"):
                m = r["torch"]["median_step_s"]
                lines.append(f"  {r['variant']}: hzp predicts {100 * (r['hzp']['predicted_step_s'] / m - 1):+.1f} % "
                             f"against PyTorch's step ({'a CPU check: --tiny' if ref.get('tiny') else 'same GPU'})")

    g = load(a.work, "gemm-probe.json")
    if g and g.get("sustained_summary"):
        ss, w = g["sustained_summary"], g["sustained"]
        clocks = [r["sm_MHz"] for r in w if "sm_MHz" in r]
        power = [r["power_W"] for r in w if "power_W" in r]
        lines.append("")
        lines.append(f"GEMM 8192^3 back to back ({g['device']}, PyTorch): first half-second "
                     f"{ss['first_window_tflops']:.1f} TFLOP/s, median after 5 s {ss['median_after_5s_tflops']:.1f}"
                     + (f"; SM clock {clocks[0]} -> {clocks[-1]} MHz" if clocks else "")
                     + (f", power {max(power):.0f} W of {g['facts'].get('power_limit_W', 0):.0f} W" if power else ""))
        result["gemm_sustained"] = ss
    o = load(a.work, "bench-overlap.json")
    if o:
        lines.append("GEMM slowdown beside a collective on N SMs")
        result["overlap"] = []
        for r in o["results"]:
            lines.append(f"  {r['channels']:>3} SMs: {r['overlapped_seconds'] / r['alone_seconds']:.3f}x")
            result["overlap"].append({"channels": r["channels"],
                                      "slowdown": r["overlapped_seconds"] / r["alone_seconds"]})
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
