#!/usr/bin/env python3
"""Fits the calibration of one (device, stack) on that stack's measurements
that are NOT scored as cases, and writes
validation/calibration/<device>.<stack>.json. Targets:
  internevo  (A100 SXM 80GB, internevo): the rows of InternEvo's 'FLOPS
             Testing' tables that the scored TGS table does not hold
             (generate_cases.INTERNEVO_FIT_ROWS);
  leonardo   (A100 SXM 64GB, torch-fsdp1): the rows of the Modalities
             Leonardo table that no scored case holds
             (generate_cases.MODALITIES_FIT_ROWS).

What it may move, each within what a public figure allows:
  - gemm_scale: one factor on the catalog's whole GEMM efficiency curve, at
    most 1 (the curve is short-burst measured maxima; a long run holds a lower
    clock, so only a lower figure is physical);
  - attention_efficiency: at most the catalog's FlashAttention-2 maximum;
  - scale_out ring_efficiency: the bandwidth a ring gets of the NICs' line
    rate on this stack's network (InternEvo's 4 x 100 Gb/s RoCE), at most the
    catalog's InfiniBand figure;
  - launch_latency_us: the host enqueue cost per kernel;
  - net_step_latency_us: the latency of one ring step across the network
    (NCCL's Simple figure, 14 us, unless moved), which grows a collective's
    cost with its group.
Coordinate descent over grids of those values, minimising the mean |error|
of the measured quantity over the fit rows.
Usage: validation/fit_stack_calibration.py HZP TARGET"""
import datetime, json, os, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import fit_common  # noqa: E402
import generate_cases as g  # noqa: E402

TARGETS = {  # name -> (device, its file name, stack, catalog cluster, fit cases, what they are)
    "internevo": ("A100 SXM 80GB", "A100-SXM-80GB", "internevo", "dgx-a100", g.internevo_fit_cases,
                  "the %d rows of InternEvo's 'FLOPS Testing' tables that are not scored as validation cases "
                  "(generate_cases.INTERNEVO_FIT_ROWS: InternLM-7B, tp 1, ZeRO-1 over 8 ranks, 8-1,024 A100 with "
                  "and without activation checkpointing, configurations the scored TGS table does not hold)"),
    "leonardo": ("A100 SXM 64GB", "A100-SXM-64GB", "torch-fsdp1", "leonardo-booster", g.modalities_fit_cases,
                 "the %d rows of the Modalities Leonardo scaling table that no scored case holds "
                 "(generate_cases.MODALITIES_FIT_ROWS: the 2.7B at micro-batch 4, its HYBRID_SHARD run at 256 GPUs "
                 "and micro-batch 1, every 6.7B run; FULL_SHARD and HYBRID_SHARD on 8-256 A100 64GB)"),
}


def main():
    hzp, target = sys.argv[1], sys.argv[2]
    device, device_file, stack, cluster, make_cases, what = TARGETS[target]
    fit_cases = make_cases()
    scored = {os.path.splitext(f)[0] for f in os.listdir(g.out_dir)}
    assert not scored & {c["name"] for c in fit_cases}, "a fit row is also a scored case"

    work = tempfile.mkdtemp(prefix="hzp-fit-stack-")
    cases, cal_dir = os.path.join(work, "cases"), os.path.join(work, "cal")
    os.makedirs(cases)
    os.makedirs(cal_dir)
    fit_common.write_cases(fit_cases, cases)

    with open(os.path.join(here, "..", "topologies", "catalog", cluster + ".json")) as f:
        catalog = json.load(f)
    gemm_curve = catalog["device"]["gemm_efficiency"]
    grid = {"gemm_scale": [round(0.6 + 0.025 * i, 3) for i in range(17)],
            "attention_efficiency": [0.35, 0.4, 0.45, 0.5, 0.55, catalog["device"]["attention_efficiency"]],
            "ring_efficiency": [0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9,
                                catalog["scale_out"]["ring_efficiency"]],
            "launch_latency_us": [4, 10, 20, 40, 80],
            "net_step_latency_us": [None, 20, 30, 45, 60, 90, 120]}
    current = {"gemm_scale": 1.0, "attention_efficiency": catalog["device"]["attention_efficiency"],
               "ring_efficiency": catalog["scale_out"]["ring_efficiency"],
               "launch_latency_us": catalog["device"]["launch_latency_us"],
               "net_step_latency_us": catalog["scale_out"]["step_latency_us"]}

    def calibration(params, source):
        return {"schema_version": 1, "device": device, "stack": stack, "source": source,
                "device_profile": {
                    "gemm_efficiency": [[size, round(eff * params["gemm_scale"], 4)] for size, eff in gemm_curve],
                    "attention_efficiency": params["attention_efficiency"],
                    "launch_latency_us": params["launch_latency_us"]},
                "scale_out": {"ring_efficiency": params["ring_efficiency"],
                              **({"step_latency_us": params["net_step_latency_us"]}
                                 if params["net_step_latency_us"] is not None else {})}}

    seen = {}

    def score(params):
        key = json.dumps(params, sort_keys=True)
        if key not in seen:
            with open(os.path.join(cal_dir, "%s.%s.json" % (device_file, stack)), "w") as f:
                json.dump(calibration(params, "trial"), f)
            seen[key] = fit_common.mean_max_error(hzp, cases, cal_dir)
            print("%s  mean |err| %5.2f%%  max %5.1f%%" % (" ".join("%s=%s" % kv for kv in sorted(params.items())),
                                                          100 * seen[key][0], 100 * seen[key][1]), flush=True)
        return seen[key]

    best, current = fit_common.coordinate_descent(grid, current, score, rounds=4)

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    source = (("Fitted %s by validation/fit_stack_calibration.py %s (hzp %s) on " + what + ": coordinate descent "
               "over one factor on the catalog's GEMM efficiency curve (%.3f: GEMMs sustained at that share of the "
               "short-burst measured maxima), the attention efficiency, the ring efficiency and the per-step "
               "latency of the scale-out and the host cost per kernel, minimising the mean |error| of the measured quantity: %.1f%% mean, "
               "%.1f%% max on the fit rows. Everything else stays the catalog's public figures.")
              % (datetime.date.today().isoformat(), target, rev, len(fit_cases), current["gemm_scale"],
                 100 * best[0], 100 * best[1]))
    out_path = os.path.join(here, "calibration", "%s.%s.json" % (device_file, stack))
    with open(out_path, "w") as f:
        json.dump(calibration(current, source), f, indent=2)
        f.write("\n")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
