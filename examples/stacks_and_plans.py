#!/usr/bin/env python3
"""The same plans under three software stacks: hzp (g_p, g_g, g_o) issued
asynchronously and synchronously, FSDP, HSDP and a Megatron plan, for a dense
and an MoE model on two clusters at 256 and 1,024 GPUs, 16M-token batches,
under hzp's own runtime (hzp-async), PyTorch FSDP2 (eager) and DeepSpeed ZeRO,
and a Megatron plan (distributed optimizer, TP/PP or EP) under Megatron-Core
with Transformer Engine.
Each row ends with the term that decides its step, read off hzp's own output
(memory when the plan does not fit; else the exposed communication when it is
at least a tenth of the step; else compute). Nothing here is tuned to an
expected outcome: it prints what the model says.

Usage: examples/stacks_and_plans.py [path/to/hzp] > examples/stacks_and_plans.txt"""
import json
import subprocess
import sys

HZP = sys.argv[1] if len(sys.argv) > 1 else "build/bin/hzp"

MODELS = {
    # model: (flags of every plan, the data-parallel plans' recompute, the Megatron plan's flags)
    "llama3-70b": ([], ["--recompute", "full"],
                   ["--strategy", "zero1", "--tp", "8", "--pp", "4", "--vpp", "5", "--recompute", "selective"]),
    "qwen3-30b-a3b": (["--seq-len", "4096", "--ep", "8"], ["--recompute", "full"],
                      ["--strategy", "zero1", "--recompute", "selective"]),
}
PLANS = [  # (label, flags (None: the model's Megatron plan), the stacks it runs under)
    ("hzp async", ["--strategy", "hzp", "--async"], ["hzp-async"]),  # background threads: hzp's runtime only
    ("hzp sync", ["--strategy", "hzp", "--no-async"], ["hzp-async", "torch-fsdp2", "deepspeed-zero"]),
    ("fsdp", ["--strategy", "fsdp"], ["hzp-async", "torch-fsdp2", "deepspeed-zero"]),
    ("hsdp", ["--strategy", "hsdp"], ["hzp-async", "torch-fsdp2", "deepspeed-zero"]),
    ("megatron", None, ["megatron-core-te"]),
]


def simulate(args):
    run = subprocess.run([HZP, "simulate", *args, "--json"], capture_output=True, text=True)
    if run.returncode not in (0, 3):  # 3: does not fit, still an answer
        raise SystemExit("hzp %s failed (%d): %s" % (" ".join(args), run.returncode, run.stderr.strip()))
    return json.loads(run.stdout)["results"][0]


def decides(r):
    step = r["step_time_s"]
    if not r["fits_in_memory"]:
        return "memory decides: %.0f GiB at the peak does not fit in %.0f" % (r["peak_reserved_GiB"], r["hbm_GiB"])
    exposed = r["exposed_comm_s"]
    total = sum(exposed.values())
    if exposed and total >= 0.1 * step:
        kind = max(exposed, key=exposed.get)
        return "exposed communication decides: %.1f of %.1f s, most on %s (%.1f s)" % (total, step, kind, exposed[kind])
    return "compute decides: the compute stream is busy %.0f %%, exposed communication %.1f s" % (
        100 * r["stream_busy_fraction"]["compute"], total)


def main():
    print(__doc__.split("Usage:")[0].strip())
    print()
    header = "%-14s %-14s %5s %-17s %-10s %-16s %9s %6s %8s  %s" % (
        "model", "cluster", "gpus", "stack", "plan", "(g_p,g_g,g_o)", "step (s)", "MFU", "res GiB", "what decides")
    for model, (common, recompute, megatron) in MODELS.items():
        print(header)
        for cluster in ["mesh16-roce200", "dgx-h100"]:
            for gpus in [256, 1024]:
                for label, flags, stacks in PLANS:
                    for stack in stacks:
                        args = ["--model", model, "--cluster", cluster, "--gpus", str(gpus), "--stack", stack,
                                "--global-batch-tokens", "16M"] + common + (flags + recompute if flags else megatron)
                        r = simulate(args)
                        shards = r["plan"].get("param_shard"), r["plan"].get("grad_shard"), r["plan"].get("optim_shard")
                        print("%-14s %-14s %5d %-17s %-10s %-16s %9.2f %5.1f%% %8.1f  %s" % (
                            model, cluster, gpus, stack, label, "(%s,%s,%s)" % shards, r["step_time_s"],
                            100 * r["mfu"], r["peak_reserved_GiB"], decides(r)))
        print()


if __name__ == "__main__":
    main()
