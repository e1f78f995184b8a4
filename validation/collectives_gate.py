#!/usr/bin/env python3
"""Regression gate of the collective model against validation/collectives:
every fabric's mean |error| (bus bandwidth from 1 MiB up, time below) must be
no worse than validation/collectives_baseline.json by more than a point, and
the fabrics the baseline marks within 15 % / 25 % must stay within.
Usage: collectives_gate.py HZP SOURCE_DIR [--update]"""
import json, os, subprocess, sys

hzp, src = sys.argv[1], sys.argv[2]
baseline_path = os.path.join(src, "validation", "collectives_baseline.json")
out = subprocess.run([hzp, "validate", "collectives", "--json", "--dir", os.path.join(src, "validation", "collectives")],
                     check=True, capture_output=True, text=True).stdout
now = {f["fabric"]: f for f in json.loads(out)["fabrics"]}
if "--update" in sys.argv:
    with open(baseline_path, "w") as f:
        json.dump({k: {"busbw_mean_abs_error": round(v["busbw_mean_abs_error"], 4),
                       "time_mean_abs_error": round(v["time_mean_abs_error"], 4), "within": v["within"]}
                   for k, v in sorted(now.items())}, f, indent=2)
        f.write("\n")
    print("wrote", baseline_path)
    sys.exit(0)
with open(baseline_path) as f:
    base = json.load(f)
bad = []
for fabric, b in base.items():
    n = now.get(fabric)
    if n is None:
        bad.append("%s: no scored case any more" % fabric)
        continue
    for key in ("busbw_mean_abs_error", "time_mean_abs_error"):
        if n[key] > b[key] + 0.01:
            bad.append("%s: %s %.1f%% (baseline %.1f%%)" % (fabric, key, 100 * n[key], 100 * b[key]))
    if b["within"] and not n["within"]:
        bad.append("%s: no longer within 15 %% / 25 %%" % fabric)
for fabric, n in sorted(now.items()):
    print("%-12s busbw %5.1f%%  time %5.1f%%  %s" % (fabric, 100 * n["busbw_mean_abs_error"],
                                                     100 * n["time_mean_abs_error"], "within" if n["within"] else "outside"))
if bad:
    print("\n".join("FAIL: " + b for b in bad))
    sys.exit(1)
