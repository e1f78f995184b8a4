#!/usr/bin/env python3
"""Two hzp_bench binaries against each other: the Google Benchmark rows that
match --filter, the binaries alternated --rounds times (5 repetitions a run,
the first to run swapped every round: a row can run faster in whichever
binary runs first), then the median and minimum of every row. On a shared, loaded machine read
the median ratio; the minima swing with whatever else runs.

Usage: bench/compare-bench.py OLD_HZP_BENCH NEW_HZP_BENCH [--filter REGEX] [--rounds N]
"""
import argparse
import collections
import json
import statistics
import subprocess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--filter", default="Lower|AnalyticEngine|Simulate|Hash")
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    times = collections.defaultdict(list)  # (row, "old"|"new") -> real times, ms
    for r in range(a.rounds):
        pair = (("old", a.old), ("new", a.new))
        for tag, binary in pair if r % 2 == 0 else reversed(pair):  # neither side always runs first
            out = subprocess.run([binary, f"--benchmark_filter={a.filter}", "--benchmark_repetitions=5",
                                  "--benchmark_format=json"], capture_output=True, text=True, check=True).stdout
            for row in json.loads(out)["benchmarks"]:
                if row.get("run_type") == "iteration":
                    times[(row["run_name"], tag)].append(row["real_time"])
        print(f"round {r + 1} of {a.rounds} done", flush=True)
    for name in sorted({k[0] for k in times}):
        o, n = times[(name, "old")], times[(name, "new")]
        mo, mn = statistics.median(o), statistics.median(n)
        print(f"{name:<48} median {mo:8.2f} -> {mn:8.2f} ms ({mn / mo:.3f}x)   "
              f"min {min(o):8.2f} -> {min(n):8.2f} ms   n={len(o)}")


if __name__ == "__main__":
    main()
