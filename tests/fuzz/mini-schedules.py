#!/usr/bin/env python3
"""Writes the fuzzer's small Schedule seeds (a few KB each) into a folder.

libFuzzer spends its time where its corpus is: seeds of 40-200 KB (lowered
plans) held the Schedule target to a few hundred inputs a second under
ASan. These hand-made Schedules reach the same code (every op kind, role,
parameter and buffer class the checker, replay, engine and metrics know;
three host threads; a host sync; expert all-to-alls; a transfer) in 4-8 KB.
The lowered plans stay in tests/fuzz/seeds/schedule-lowered/ for the replay
test. Their sha256 is left empty (the fuzz targets do not verify it).
Usage: tests/fuzz/mini-schedules.py FOLDER
"""
import json
import os
import sys


def op(i, kind, name, **kw):
    d = {"id": i, "kind": kind, "name": name, "role": kw.pop("role", "other"),
         "param_class": kw.pop("param_class", "none")}
    d.update(kw)
    return d


def gemm(i, name, role="forward", param_class="dense", n=256):
    return op(i, "compute", name, op="gemm", flops=2.0 * n ** 3, bytes=6 * n * n, dtype="bf16", gemm=[n, n, n, 1],
              role=role, param_class=param_class)


def thread(i, name):
    return {"id": i, "name": name, "launch_latency_ns": 4000, "collective_launch_latency_ns": 8000,
            "event_latency_ns": 1000, "alloc_latency_ns": 1000, "sync_latency_ns": 2000}


def schedule(name, world, groups, programs):
    return {"schema_version": 6, "name": name, "sha256": "", "provenance": {},
            "step": {"model": "mini", "cluster": "dgx-h100", "strategy": "hzp", "world_size": world, "seq_len": 128,
                     "global_batch_sequences": world, "micro_batches": 1, "model_flops": 1e9},
            "groups": groups, "programs": programs}


def every_op_kind():
    """Two rank classes: compute, alloc/free, record/wait, a host sync, an all-reduce and a send/recv pair."""
    p0 = {"id": 0, "name": "a", "ranks": [0], "threads": [thread(0, "main")], "streams": [
        {"id": 0, "name": "compute", "kind": "compute", "thread": 0, "ops": [
            op(0, "alloc", "alloc act", buffer="act", buffer_class="act", bytes=1 << 20),
            gemm(1, "fwd"),
            op(2, "record", "fwd done", event=0),
            op(4, "collective", "tp all-reduce", op="all_reduce", group=0, seq=0, bytes=1 << 20, dtype="bf16",
               role="model_parallel", param_class="dense"),
            op(6, "compute", "attn", op="attention", flops=1e9, bytes=1 << 20, dtype="bf16", role="backward",
               param_class="dense"),
            op(7, "free", "free act", buffer="act", buffer_class="act", bytes=1 << 20),
            op(8, "record", "done", event=1),
            op(9, "sync", "sync done", event=1)]},
        {"id": 1, "name": "send", "kind": "comm", "thread": 0, "ops": [
            op(3, "wait", "wait fwd", event=0),
            op(5, "send", "send act", peer=1, seq=0, bytes=1 << 16, role="pipeline")]}]}
    p1 = {"id": 1, "name": "b", "ranks": [1], "threads": [thread(0, "main")], "streams": [
        {"id": 0, "name": "compute", "kind": "compute", "thread": 0, "ops": [
            op(0, "recv", "recv act", peer=0, seq=0, bytes=1 << 16, role="pipeline"),
            op(1, "collective", "tp all-reduce", op="all_reduce", group=0, seq=0, bytes=1 << 20, dtype="bf16",
               role="model_parallel", param_class="dense"),
            gemm(2, "fwd")]}]}
    return schedule("mini/every-op-kind", 2, [{"id": 0, "kind": "tp", "ranks": [0, 1]}], [p0, p1])


def sharded_async():
    """One rank class of four ranks, hzp-style: gathers and reductions issued by their own threads."""
    groups = [{"id": 0, "kind": "dp_shard", "ranks": [0, 1]}, {"id": 1, "kind": "dp_shard", "ranks": [2, 3]},
              {"id": 2, "kind": "dp_grad", "ranks": [0, 1, 2, 3]}, {"id": 3, "kind": "dp_replica", "ranks": [0, 1, 2, 3]}]
    p = {"id": 0, "name": "dp", "ranks": [0, 1, 2, 3],
         "threads": [thread(0, "main"), thread(1, "param"), thread(2, "grad")], "streams": [
        {"id": 0, "name": "compute", "kind": "compute", "thread": 0, "ops": [
            op(0, "alloc", "alloc params", buffer="params", buffer_class="params", bytes=1 << 20),
            op(1, "alloc", "alloc grads", buffer="grads", buffer_class="grads", bytes=1 << 20),
            op(2, "alloc", "alloc states", buffer="states", buffer_class="optimizer_states", bytes=3 << 20),
            op(3, "alloc", "alloc nccl", buffer="nccl", buffer_class="nccl_buffers", bytes=1 << 16),
            op(4, "alloc", "alloc pool", buffer="pool", buffer_class="pool.gathered", bytes=2 << 20),
            op(5, "compute", "zero grads", op="elementwise", flops=0.0, bytes=1 << 20, dtype="fp32",
               role="zero_grads", param_class="dense"),
            op(7, "wait", "wait gathered", event=0),
            op(8, "alloc", "alloc recomputed", buffer="re", buffer_class="recomputed", bytes=1 << 18),
            gemm(9, "recompute", role="recompute"),
            op(10, "compute", "norm", op="norm", flops=1e6, bytes=1 << 18, dtype="bf16", role="forward",
               param_class="dense"),
            op(11, "compute", "loss", op="loss", flops=1e6, bytes=1 << 18, dtype="fp32", role="forward",
               param_class="dense"),
            op(12, "compute", "embed", op="embedding", flops=1e5, bytes=1 << 18, dtype="bf16", role="forward",
               param_class="dense"),
            gemm(13, "bwd", role="backward"),
            op(14, "free", "free recomputed", buffer="re", buffer_class="recomputed", bytes=1 << 18),
            op(15, "record", "bwd done", event=1),
            op(18, "wait", "wait reduced", event=2),
            op(19, "compute", "adam", op="optimizer", flops=1e6, bytes=30 << 16, dtype="fp32", role="optimizer",
               param_class="dense"),
            op(20, "compute", "accumulate", op="elementwise", flops=1e6, bytes=1 << 18, dtype="fp32",
               role="grad_accumulate", param_class="dense")]},
        {"id": 1, "name": "param_allgather", "kind": "param_gather", "thread": 1, "ops": [
            op(6, "collective", "all-gather", op="all_gather", group=0, seq=0, bytes=2 << 20, dtype="bf16",
               role="param_gather", param_class="dense"),
            op(21, "record", "gathered", event=0)]},
        {"id": 2, "name": "grad_reduce", "kind": "grad_reduce", "thread": 2, "ops": [
            op(16, "wait", "wait bwd", event=1),
            op(17, "collective", "reduce-scatter", op="reduce_scatter", group=2, seq=0, bytes=1 << 20, dtype="fp32",
               role="grad_reduce", param_class="dense"),
            op(22, "collective", "replica all-reduce", op="all_reduce", group=3, seq=0, bytes=1 << 18,
               dtype="fp32", role="grad_reduce", param_class="dense"),
            op(23, "record", "reduced", event=2)]}]}
    # Events record in op-id order on their streams; the gather's record (21)
    # follows op 6 on its stream, so the wait (7) sees it.
    return schedule("mini/sharded-async", 4, groups, [p])


def experts():
    """Two expert-parallel rank classes: all-to-all dispatch and combine, expert kernels, a broadcast."""
    groups = [{"id": 0, "kind": "ep", "ranks": [0, 1]}, {"id": 1, "kind": "edp_grad", "ranks": [0]},
              {"id": 2, "kind": "world", "ranks": [0, 1]}]
    def program(i):
        ops = [op(0, "collective", "dispatch", op="all_to_all", group=0, seq=0, bytes=(1 + i) << 16, dtype="bf16",
                  role="model_parallel", param_class="expert"),
               gemm(1, "expert up", param_class="expert", n=128),
               op(2, "collective", "combine", op="all_to_all", group=0, seq=1, bytes=(1 + i) << 16, dtype="bf16",
                  role="model_parallel", param_class="expert"),
               op(3, "collective", "broadcast", op="broadcast", group=2, seq=0, bytes=1 << 12, dtype="bf16",
                  role="other")]
        return {"id": i, "name": f"ep{i}", "ranks": [i], "threads": [thread(0, "main")], "streams": [
            {"id": 0, "name": "compute", "kind": "compute", "thread": 0, "ops": ops}]}
    return schedule("mini/experts", 2, groups, [program(0), program(1)])


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, s in (("mini-every-op-kind", every_op_kind()), ("mini-sharded-async", sharded_async()),
                    ("mini-experts", experts())):
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
