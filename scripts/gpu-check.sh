#!/usr/bin/env bash
# The GPU check of the runtime (one GPU, under 8 minutes on an H200): builds
# with CUDA for sm_90, runs the GPU-labelled tests, runs a one-GPU Schedule
# (llama3-8b with 4 layers, hierarchical ZeRO async and sync, collectives
# emulated) against the analytic prediction, runs the GEMM, overlap and (with
# two or more GPUs) collective microbenchmarks, fits a calibration from them,
# and prints a short table last. Every result file goes under $OUT (default
# gpu-check-out/). Usage: scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
log() { echo "== $*" >&2; }

log "build (CUDA, sm_90)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHZP_BUILD_BENCH=OFF \
  > "$out/cmake.log"
cmake --build "$build" -j "$(nproc)" --target hzp hzp-run hzp-devices cuda_backend_test > "$out/build.log"
"$build/bin/hzp-devices" | tee "$out/devices.txt"
gpus=$(nvidia-smi -L 2> /dev/null | wc -l || echo 0)
[ "$gpus" -ge 1 ] || { echo "gpu-check: no GPU here" >&2; exit 1; }

log "GPU-labelled tests"
(cd "$build" && ctest -L gpu --output-on-failure) | tee "$out/ctest-gpu.txt"

log "one-GPU Schedules: llama3-8b (4 layers), dgx-h200 x8, hzp (2,8,8) async and sync, collectives emulated"
python3 - "$out/llama3-8b-4l.json" <<'PY'
import json, sys
m = json.load(open("models/catalog/llama3-8b.json"))
m["name"], m["layers"] = "llama3-8b-4l", 4
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
for mode in async sync; do
  flag=--$mode
  [ "$mode" = sync ] && flag=--no-async
  args=(--model "$out/llama3-8b-4l.json" --cluster dgx-h200 --gpus 8 --strategy hzp --param-shard 2 --grad-shard 8
    --optim-shard 8 "$flag" --seq-len 4096 --global-batch-seqs 16 --recompute full)
  "$build/bin/hzp" schedule "${args[@]}" --out "$out/hzp-$mode.schedule.json" --force > /dev/null
  "$build/bin/hzp" simulate "${args[@]}" --json --trace "$out/hzp-$mode.predicted.json" --force \
    > "$out/hzp-$mode.predicted-summary.json"
  "$build/bin/hzp-run" "$out/hzp-$mode.schedule.json" --backend cuda --emulate-collectives --warmup 2 --steps 5 \
    --trace "$out/hzp-$mode.measured.json" --summary "$out/hzp-$mode.run.json" --force | tee "$out/hzp-$mode.run.txt"
  "$build/bin/hzp" validate compare "$out/hzp-$mode.predicted.json" "$out/hzp-$mode.measured.json" --json \
    > "$out/hzp-$mode.compare.json"
  "$build/bin/hzp" validate compare "$out/hzp-$mode.predicted.json" "$out/hzp-$mode.measured.json" \
    --report "$out/hzp-$mode.compare.md" --force > /dev/null 2>&1 || true
done

log "microbenchmarks"
"$build/bin/hzp-run" bench gemm --schedule "$out/hzp-async.schedule.json" --out "$out/bench-gemm.json" --force
"$build/bin/hzp-run" bench overlap --out "$out/bench-overlap.json" --force
results=("$out/bench-gemm.json" "$out/bench-overlap.json")
if [ "$gpus" -ge 2 ] && command -v mpirun > /dev/null; then
  rm -rf "$out/rendezvous" && mkdir -p "$out/rendezvous"
  mpirun --allow-run-as-root -np "$gpus" "$build/bin/hzp-run" bench collectives --ranks-per-node "$gpus" \
    --rendezvous "$out/rendezvous" --out "$out/bench-collectives.json" --force
  results+=("$out/bench-collectives.json")
fi
"$build/bin/hzp" calibrate --cluster dgx-h200 "${results[@]}" --out "$out/calibration-h200.json" --force \
  | tee "$out/calibrate.txt"

log "summary"
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
print("GEMM (bf16, cuBLASLt)          TFLOP/s")
for r in json.load(open(f"{out}/bench-gemm.json"))["results"]:
    tf = 2 * r["m"] * r["n"] * r["k"] * r["batch"] / r["seconds"] / 1e12
    print(f"  {r['m']:>6} x {r['n']:>6} x {r['k']:>6} x{r['batch']:<4} {tf:8.1f}")
print("one-GPU step (emulated collectives)  predicted   measured   error   exposed comm pred/meas   peak GiB pred/meas")
for mode in ("async", "sync"):
    c = json.load(open(f"{out}/hzp-{mode}.compare.json"))
    s, e = c["step_s"], c["exposed_communication_s"]
    pred = json.load(open(f"{out}/hzp-{mode}.predicted-summary.json"))["results"][0]
    run = json.load(open(f"{out}/hzp-{mode}.run.json"))
    print(f"  hzp (2,8,8) {mode:<5}              {s['predicted']:9.4f} s {s['measured']:9.4f} s {100*s['error']:+6.1f}%"
          f"   {e['predicted']:.4f} / {e['measured']:.4f} s   {pred['peak_reserved_GiB']:.1f} / {run['peak_reserved_GiB']:.1f}")
print("GEMM slowdown beside a collective on N SMs")
for r in json.load(open(f"{out}/bench-overlap.json"))["results"]:
    print(f"  {r['channels']:>3} SMs: {r['overlapped_seconds'] / r['alone_seconds']:.3f}x")
PY
