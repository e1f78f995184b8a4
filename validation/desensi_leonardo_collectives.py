#!/usr/bin/env python3
"""Writes validation/collectives/desensi-leonardo-*.json: NCCL all-reduce and
all-to-all on CINECA Leonardo Booster at 2 to 256 nodes (4 A100 a node, one process a GPU),
from the raw data of De Sensi et al., "Exploring GPU-to-GPU Communication:
Insights into Supercomputer Interconnects" (SC24, arXiv 2408.14090), published
with the paper in github.com/DanieleDeSensi/blink.
Usage: validation/desensi_leonardo_collectives.py BLINK_CLONE
Rerun after changing a rule here and review the diff; the cases are checked in."""
import csv, io, re, statistics, subprocess, sys
from collections import defaultdict

import collective_case_file

repo = sys.argv[1] if len(sys.argv) > 1 else "."
COMMIT = "af08878cf6ed6f73befaa20ff03825c192a9660f"  # "[ADD] RCCL 5.7.1.1 results.", 2024-07-29
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
SOURCE = {
    "title": "De Sensi, Pichetti, Vella, De Matteis, Ren, Fusco, Turisini, Cesarini, Lust, Trivedi, Roweth, "
             "Spiga, Di Girolamo, Hoefler: Exploring GPU-to-GPU Communication: Insights into Supercomputer "
             "Interconnects (SC24, arXiv 2408.14090); raw data in the paper's artifact",
    "url": "https://github.com/DanieleDeSensi/blink/tree/%s/data/leonardo" % COMMIT,
}
HARDWARE = ("Leonardo Booster (CINECA): 4 x A100 SXM 64GB per node (NVLink3), 2 dual-port HDR NICs = 4 x 100 Gb/s "
            "per node (mlx5_0-3, conf/leonardo.sh), InfiniBand HDR Dragonfly+; NCCL not recorded (conf/leonardo.sh "
            "points BLINK_NCCL_HOME at NVHPC 23.1's and also loads the system's nccl module)")


def git_show(path, missing_ok=False):
    r = subprocess.run(["git", "-C", repo, "show", "%s:%s" % (COMMIT, path)], capture_output=True, text=True)
    if r.returncode != 0 and not missing_ok:
        raise RuntimeError("%s: %s" % (path, r.stderr.strip()))
    return r.stdout


def full_commit():
    return subprocess.run(["git", "-C", repo, "rev-parse", COMMIT[:8]], check=True, capture_output=True,
                          text=True).stdout.strip()


# The benchmark's applications: ncclAllReduce of `size` bytes; an all-to-all
# that sends `size` bytes to each peer (so each rank's buffer, nccl-tests'
# size, is `size` x ranks: 2 MiB a peer over 32 GPUs took 5.3 ms, the 29
# peers off the node's 58.7 MB over one 100 Gb/s port at 88 % of its rate).
APPS = {"all_reduce": "ar-nccl", "all_to_all": "a2a-nccl"}


def runs(service_level, op="all_reduce"):
    """{nodes: {bytes: [(median us of the run's iterations, run directory)]}} for the op, 4 processes a
    node, the allocation Slurm gave ('l'), on the given InfiniBand service level, hcoll off."""
    out = defaultdict(lambda: defaultdict(list))
    for d in csv.DictReader(io.StringIO(git_show("data/description.csv"))):
        m = re.match(r"\./apps_mix/gpubench/%s/(\d+)(B|KiB|MiB|GiB)$" % APPS[op], d["app_mix"])
        if (d["system"] != "leonardo" or not m or d["ppn"] != "4" or d["allocation_mode"] != "l"
                or d["extra"] != "SL%d_hcoll0" % service_level):
            continue
        path = d["path"][2:]
        rows = list(csv.reader(io.StringIO(git_show(path + "/data.csv", missing_ok=True))))[1:]  # some runs left none
        times = [float(r[0]) for r in rows if r and r[0]]
        if times:
            size = int(m.group(1)) * UNITS[m.group(2)]
            out[int(d["numnodes"])][size].append((statistics.median(times) * 1e6, path))
    return out


def write(service_level, nodes, sizes, op="all_reduce"):
    gpus = 4 * nodes
    factor = (2.0 if op == "all_reduce" else 1.0) * (gpus - 1) / gpus
    per_rank = 1 if op == "all_reduce" else gpus  # nccl-tests' size: the buffer each rank sends
    rows, where = [], []
    for size in sorted(sizes):
        per_run = sorted(t for t, _ in sizes[size])
        t = statistics.median(per_run)
        rows.append([size * per_rank, round(t, 1), round(size * per_rank * factor / t / 1e3, 3)])
        where += [p for _, p in sizes[size]]
    spread = [(s * per_rank, min(t for t, _ in v), max(t for t, _ in v)) for s, v in sorted(sizes.items()) if len(v) > 1]
    quiet = service_level == 1
    case = {
        "schema_version": 1,
        "id": "desensi-leonardo-a100-%dg-%s%s" % (gpus, op, "" if quiet else "-sl0"),
        "source": dict(SOURCE, where="data/description.csv rows app_mix ./apps_mix/gpubench/" + APPS[op] + "/<size>, "
                       "system leonardo, numnodes %d, ppn 4, allocation l, extra SL%d_hcoll0: run directories %s"
                       % (nodes, service_level, ", ".join(sorted(set(p.split("/")[-1] for p in where))))),
        "hardware": HARDWARE,
        "fabric": "infiniband",
        "nccl_version": None,
        "measured_algorithm": "default",
        "use": "figure" if op == "all_to_all" and gpus in (32, 1024) else "score" if quiet else "context",
        "reason": ("hzp's all-to-all cost per peer (cost/nccl.hpp, all_to_all_per_peer_us) is the slope of "
                   "the small-message floors of the 32- and 1,024-GPU curves: these two check themselves")
        if op == "all_to_all" and gpus in (32, 1024) else "" if quiet else (
            "InfiniBand service level 0, the default, which production jobs share: %s (the paper's network "
            "noise); hzp does not model other jobs' traffic" % noise(nodes)),
        "notes": (("The paper's GPU benchmark (blink wrappers/gpubench-ar-nccl.py: one ncclAllReduce of the size per "
                   "iteration" if op == "all_reduce" else
                   "The paper's GPU benchmark (blink wrappers/gpubench-a2a-nccl.py: one all-to-all sending the "
                   "application's size to each peer per iteration; rows give nccl-tests' size, that times the ranks")
                  + ", 100-1,000 iterations after warm-up, ppn 4 = one process a GPU), NCCL_IB_SL=%d. Each "
                  "row is the median iteration time of a run, the median over the runs when several measured the "
                  "size; busbw = size x %s / time (nccl-tests' factor). Node placement is Slurm's (the "
                  "runs' hostnames span 2-20 of the Dragonfly+ cells). The source of the benchmark binary (a "
                  "submodule) is not in the repository, so whether the buffers are in place is not known."
                  % (service_level, "2(n-1)/n" if op == "all_reduce" else "(n-1)/n")) + ("" if not spread else " Runs of one size range (us): " + "; ".join(
                      "%d B %.0f-%.0f" % s for s in spread) + "."),
        "model": collective_case_file.model("leonardo-booster", gpus, 4),
        "op": op,
        "placement": "out-of-place",
        "rows": rows,
    }
    return collective_case_file.write(case)


_SL = {}


def noise(nodes):
    """Service level 0's runs of 1 GiB (the size measured most often) against level 1's median, in words."""
    quiet, noisy = _SL[1].get(nodes, {}), _SL[0].get(nodes, {})
    size = 1 << 30
    t0 = sorted(t for t, _ in noisy[size])
    return "at %d B its %d run(s) took %s us, against %.0f us on service level 1" % (
        size, len(t0), "-".join("%.0f" % t for t in (t0[0], t0[-1])) if len(t0) > 1 else "%.0f" % t0[0],
        statistics.median(t for t, _ in quiet[size]))


if __name__ == "__main__":
    assert full_commit() == COMMIT, "expected the blink clone to hold commit %s" % COMMIT
    _SL[1], _SL[0] = runs(1), runs(0)
    for sl in (1, 0):
        for nodes, sizes in sorted(_SL[sl].items()):
            # Service level 0 is kept as context where its runs differ from level 1's (> 5 % at 1 GiB).
            if sl == 0 and max(t for t, _ in sizes[1 << 30]) < 1.05 * statistics.median(
                    t for t, _ in _SL[1][nodes][1 << 30]):
                continue
            print(write(sl, nodes, sizes))
    for nodes, sizes in sorted(runs(1, "all_to_all").items()):
        print(write(1, nodes, sizes, "all_to_all"))
