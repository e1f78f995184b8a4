#!/usr/bin/env python3
"""Writes validation/collectives/hyperpod-p5-h100-*.json: nccl-tests all_reduce
and all_gather on AWS p5.48xlarge (SageMaker HyperPod) at 2 to 32 nodes, from
github.com/crazyguitar/aws-gpu-communication-benchmark (data/nccl_*.csv).
Usage: validation/p5_hyperpod_collectives.py CLONE
Rerun after changing a rule here and review the diff; the cases are checked in."""
import csv, io, subprocess, sys

import collective_case_file

repo = sys.argv[1] if len(sys.argv) > 1 else "."
COMMIT = "fd167f97ab85009ff342f91e7117a80fd3741f39"  # the data files are unchanged since the first commit
URL = "https://github.com/crazyguitar/aws-gpu-communication-benchmark/blob/%s/data/nccl_%s.csv"


def git_show(path):
    return subprocess.run(["git", "-C", repo, "show", "%s:%s" % (COMMIT, path)], check=True, capture_output=True,
                          text=True).stdout


def write(op, nodes, rows):
    gpus = 8 * nodes
    case = {
        "schema_version": 1,
        "id": "hyperpod-p5-h100-%dg-%s" % (gpus, op),
        "source": {
            "title": "crazyguitar/aws-gpu-communication-benchmark: nccl-tests on SageMaker HyperPod p5.48xlarge",
            "url": URL % (COMMIT, op),
            "where": "rows Nodes=%d, GPUs=%d, columns size(MB) (MiB) and out busbw(GB/s)" % (nodes, gpus),
        },
        "hardware": "AWS p5.48xlarge: 8 x H100 80GB (NVSwitch), 32 EFA devices (3,200 Gb/s) a node, on SageMaker "
                    "HyperPod (EKS)",
        "fabric": "efa",
        "nccl_version": "2.27.7 (the repository's Dockerfile; the data do not say which build ran)",
        "measured_algorithm": "default (aws-ofi-nccl's tuner plugin, NCCL_TUNER_PLUGIN=libnccl-ofi-tuner.so)",
        "use": "score",
        "reason": "",
        "notes": ("k8s/nccl_%s_perf.yaml: nccl-tests %s_perf -b 32M -e 8192M -f 2 -g 1 -c 1 -n 1000%s, one "
                  "process a GPU, FI_PROVIDER=efa, NCCL_BUFFSIZE=8388608 (twice NCCL's default: 1 MiB a Simple "
                  "step), NCCL_P2P_NET_CHUNKSIZE=524288, aws-ofi-nccl 1.16.3. The source gives bus bandwidth "
                  "(out-of-place used; in-place within a few percent), no times; one run a size. Sizes are "
                  "the total buffer (nccl-tests' size).") % (op, op, " --blocking 0" if op == "all_gather" else ""),
        "model": collective_case_file.model("aws-p5", gpus, 8),
        "op": op,
        "placement": "out-of-place",
        "rows": rows,
    }
    return collective_case_file.write(case)


if __name__ == "__main__":
    for op in ("all_reduce", "all_gather"):
        by_nodes = {}
        for r in csv.DictReader(io.StringIO(git_show("data/nccl_%s.csv" % op))):
            by_nodes.setdefault(int(r["Nodes"]), []).append(
                [int(r["size(MB)"]) << 20, None, float(r["out busbw(GB/s)"])])
        for nodes, rows in sorted(by_nodes.items()):
            print(write(op, nodes, sorted(rows)))
