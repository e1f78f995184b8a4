#!/usr/bin/env python3
"""How close can any model get to the measured step times? A floor from the
measurements alone, before any prediction.

Rule: without a pipeline (pp = 1), the same work (model, cluster, GPUs,
parallelism, global batch) run as fewer, larger micro-batches is not slower.
Per-micro-batch host costs do not grow with the micro-batch, GEMMs do not
get less efficient as they grow, and every other op scales with the tokens it
touches; memory pressure is the one way out, so a pair is reported with both
runs' micro-batches for a reader to judge that.

For two time cases A and B under the rule (micro-batch of A larger) whose
measured times contradict it (T_A > T_B), any model that keeps the rule
(P_A <= P_B) misses one of them:
  max(|e_A|, |e_B|) >= (T_A - T_B) / (T_A + T_B)
      (from T_A (1 - E) <= P_A <= P_B <= T_B (1 + E));
  |e_A| + |e_B|    >= (T_A - T_B) / T_A
      (the least total error: P_A = P_B = T_B).
The script lists those pairs and the floors they put under the maximum and the
mean |error| of a case set; no simulation is run.

--linearity CSV (a vTrain ground-truth file) says how far each group of runs
that differ only in the global batch lies from a straight line in the number of
micro-batches, and how much the time difference of groups that differ only in
data-parallel size varies: independent whole-iteration timings scatter; times
composed from measured parts lie on the line and differ by a constant.

Usage: validation/consistency.py [CASES_DIR] [--json]
       validation/consistency.py --linearity VTRAIN_CSV"""
import csv
import json
import os
import sys
from itertools import combinations


def load(cases_dir):
    cases = []
    for name in sorted(os.listdir(cases_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(cases_dir, name)) as f:
            c = json.load(f)
        if c["measured"]["quantity"] == "iteration_time_s":
            cases.append(c)
    return cases


def same_work_key(c):
    """What must be equal for the rule to compare two cases; None when it does not apply."""
    plan = dict(c["plan"])
    if plan.get("pp", 1) != 1:
        return None
    plan.pop("micro_batch")
    return json.dumps([c["model"], c["cluster"], c["gpus"], c.get("nic_gbps"), plan], sort_keys=True)


def contradictions(cases):
    """Pairs (A, B) under the rule with A's micro-batch larger and A measured slower."""
    groups = {}
    for c in cases:
        key = same_work_key(c)
        if key is not None:
            groups.setdefault(key, []).append(c)
    pairs = []
    for members in groups.values():
        for x, y in combinations(members, 2):
            a, b = (x, y) if x["plan"]["micro_batch"] > y["plan"]["micro_batch"] else (y, x)
            if a["plan"]["micro_batch"] == b["plan"]["micro_batch"]:
                continue
            ta, tb = a["measured"]["value"], b["measured"]["value"]
            if ta > tb:
                pairs.append({"slower": a["name"], "slower_micro_batch": a["plan"]["micro_batch"], "slower_s": ta,
                              "faster": b["name"], "faster_micro_batch": b["plan"]["micro_batch"], "faster_s": tb,
                              "max_error_floor": (ta - tb) / (ta + tb), "error_sum_floor": (ta - tb) / ta})
    pairs.sort(key=lambda p: (-p["max_error_floor"], p["slower"], p["faster"]))
    return pairs


def mean_floor(pairs, n_cases):
    """A floor on the mean |error| over n_cases: pairs that share no case add their floors."""
    used, total = set(), 0.0
    for p in sorted(pairs, key=lambda p: -p["error_sum_floor"]):
        if p["slower"] in used or p["faster"] in used:
            continue
        used.update((p["slower"], p["faster"]))
        total += p["error_sum_floor"]
    return total / n_cases if n_cases else 0.0


def report(cases_dir):
    cases = load(cases_dir)
    pairs = contradictions(cases)
    return {"cases_dir": cases_dir, "time_cases": len(cases),
            "max_error_floor": pairs[0]["max_error_floor"] if pairs else 0.0,
            "mean_error_floor": mean_floor(pairs, len(cases)), "pairs": pairs}


def linearity(csv_path):
    """Groups of vTrain rows equal but for the global batch (three or more), and
    the largest relative distance of a row from the line through the group's
    first two in micro-batches per replica."""
    with open(csv_path) as f:
        rows = [list(map(float, r)) for r in list(csv.reader(f))[1:]]
    # The files end in: # GPUs, global batch, micro batch, hidden, heads,
    # layers, sequence, TP, DP, PP, iteration time (ms).
    groups = {}
    for r in rows:
        gb, mb, dp, ms = r[-10], r[-9], r[-3], r[-1]
        key = tuple(v for i, v in enumerate(r) if i not in (len(r) - 10, len(r) - 1))
        groups.setdefault(key, []).append((gb / (dp * mb), ms))
    worst, n = 0.0, 0
    for pts in groups.values():
        pts.sort()
        if len(pts) < 3 or pts[1][0] == pts[0][0]:
            continue
        (n0, t0), (n1, t1) = pts[0], pts[1]
        slope = (t1 - t0) / (n1 - n0)
        worst = max(worst, max(abs(t0 + slope * (k - n0) - t) / t for k, t in pts))
        n += 1
    # Groups equal but for the data-parallel size (and so the GPU count): the
    # spread, over the micro-batch counts both have, of their time difference.
    # Keys end in: # GPUs, micro batch, hidden, heads, layers, sequence, TP, DP, PP.
    by_dp = {}
    for key, pts in groups.items():
        rest = tuple(v for i, v in enumerate(key) if i not in (len(key) - 9, len(key) - 2))
        by_dp.setdefault(rest, {})[key[-2]] = dict(pts)
    spread, dp_pairs = 0.0, 0
    for runs in by_dp.values():
        for a, b in combinations(sorted(runs), 2):
            common = set(runs[a]) & set(runs[b])
            if len(common) >= 2:
                diffs = [runs[b][k] - runs[a][k] for k in common]
                spread, dp_pairs = max(spread, max(diffs) - min(diffs)), dp_pairs + 1
    return {"csv": csv_path, "groups": n, "max_relative_deviation": worst,
            "dp_pairs": dp_pairs, "dp_difference_spread_ms": spread}


def fail(message):
    print("consistency.py: error: " + message, file=sys.stderr)
    return 2


def main(argv):
    if argv[:1] == ["--linearity"]:
        if len(argv) != 2:
            return fail("--linearity: expected one vTrain CSV file")
        try:
            r = linearity(argv[1])
        except (OSError, ValueError, IndexError) as e:
            return fail("%s: expected a vTrain ground-truth CSV (%s)" % (argv[1], e))
        print("%d groups of three or more runs equal but for the global batch in %s; largest distance from a "
              "line in the number of micro-batches: %.2g (relative)"
              % (r["groups"], r["csv"], r["max_relative_deviation"]))
        print("%d pairs of such groups equal but for the data-parallel size; largest spread of their time "
              "difference over the micro-batch counts both have: %.2g ms"
              % (r["dp_pairs"], r["dp_difference_spread_ms"]))
        return 0
    args = [a for a in argv if a != "--json"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        return fail("expected [CASES_DIR] [--json] or --linearity VTRAIN_CSV, got %s" % " ".join(argv))
    cases_dir = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")
    try:
        r = report(cases_dir)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return fail("%s: expected a directory of hzp case files (%s)" % (cases_dir, e))
    if "--json" in argv:
        json.dump(r, sys.stdout, indent=2)
        print()
        return 0
    print("%d iteration-time cases in %s; rule: with pp = 1, the same work in larger micro-batches is not slower"
          % (r["time_cases"], cases_dir))
    print("%-22s %5s %9s   %-22s %5s %9s   %s" % ("slower case", "mb", "measured", "faster case", "mb", "measured",
                                                 "floor on max |err|"))
    for p in r["pairs"]:
        print("%-22s %5d %8.3fs   %-22s %5d %8.3fs   %5.1f%%" % (
            p["slower"], p["slower_micro_batch"], p["slower_s"], p["faster"], p["faster_micro_batch"], p["faster_s"],
            100 * p["max_error_floor"]))
    print("any model that keeps the rule: max |error| >= %.1f%%, mean |error| >= %.2f%% over these cases"
          % (100 * r["max_error_floor"], 100 * r["mean_error_floor"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
