#!/usr/bin/env bash
# The GPU check of the runtime (one GPU, under 8 minutes on an H200): builds
# with CUDA for sm_90, runs the GPU-labelled tests, runs a one-GPU Schedule
# (llama3-8b with 4 layers, hierarchical ZeRO async and sync, collectives
# emulated) against the analytic prediction, runs the GEMM, overlap and (with
# two or more GPUs) collective microbenchmarks, fits a calibration from them,
# and prints a short table last. Each stage reports ok / FAILED / skipped; a
# failed stage does not stop the others, and the script exits 1 at the end
# when any failed. Every file goes under $OUT (default gpu-check-out/).
# --dry-run: no GPU; uses the build in $BUILD_DIR as is and runs every stage
# that can run on the host backend (the Schedules on the virtual clock
# against the prediction, the summary), the GPU stages reported as skipped.
# Usage: scripts/gpu-check.sh [--dry-run]
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
out=${OUT:-gpu-check-out}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
results=()
failed=0
log() { echo "== $*" >&2; }
# stage NAME COMMAND...: runs it with its output in $out/NAME.log, reports.
stage() {
  local name=$1
  shift
  log "$name"
  if "$@" > "$out/$name.log" 2>&1; then
    results+=("ok       $name")
  else
    results+=("FAILED   $name (exit $?; see $out/$name.log)")
    failed=1
    tail -5 "$out/$name.log" >&2
  fi
}
skip() { results+=("skipped  $1 ($2)"); }

build_cuda() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHZP_BUILD_BENCH=OFF &&
    cmake --build "$build" -j "$(nproc)" --target hzp hzp-run hzp-devices cuda_backend_test device_backend_test
}
model_4l() {
  python3 - "$out/llama3-8b-4l.json" << 'PY'
import json, sys
m = json.load(open("models/catalog/llama3-8b.json"))
m["name"], m["layers"] = "llama3-8b-4l", 4
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
}
# one_gpu MODE: the Schedule, its prediction, a run, the comparison.
one_gpu() {
  local mode=$1 flag=--async backend=(--backend cuda --emulate-collectives --warmup 2 --steps 5) interference=()
  [ "$mode" = sync ] && flag=--no-async
  if [ "$dry" -eq 1 ]; then
    backend=(--backend host --clock virtual --warmup 1 --steps 1)
    interference=(--no-interference --no-link-sharing)  # the host backend has neither
  fi
  local args=(--model "$out/llama3-8b-4l.json" --cluster dgx-h200 --gpus 8 --strategy hzp --param-shard 2
    --grad-shard 8 --optim-shard 8 "$flag" --seq-len 4096 --global-batch-seqs 16 --recompute full)
  "$build/bin/hzp" schedule "${args[@]}" --out "$out/hzp-$mode.schedule.json" --force > /dev/null &&
    "$build/bin/hzp" simulate "${args[@]}" "${interference[@]}" --json --trace "$out/hzp-$mode.predicted.json" \
      --force > "$out/hzp-$mode.predicted-summary.json" &&
    "$build/bin/hzp-run" "$out/hzp-$mode.schedule.json" "${backend[@]}" --trace "$out/hzp-$mode.measured.json" \
      --summary "$out/hzp-$mode.run.json" --force &&
    "$build/bin/hzp" validate compare "$out/hzp-$mode.predicted.json" "$out/hzp-$mode.measured.json" --json \
      > "$out/hzp-$mode.compare.json"
}
collectives() {
  rm -rf "$out/rendezvous" && mkdir -p "$out/rendezvous" &&
    mpirun --allow-run-as-root -np "$gpus" "$build/bin/hzp-run" bench collectives --ranks-per-node "$gpus" \
      --cluster dgx-h200 --rendezvous "$out/rendezvous" --out "$out/bench-collectives.json" --force
}
summary() {
  python3 - "$out" << 'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    path = f"{out}/{name}"
    return json.load(open(path)) if os.path.exists(path) else None
g = load("bench-gemm.json")
if g:
    print("GEMM (bf16, cuBLASLt)          TFLOP/s")
    for r in g["results"]:
        tf = 2 * r["m"] * r["n"] * r["k"] * r["batch"] / r["seconds"] / 1e12
        print(f"  {r['m']:>6} x {r['n']:>6} x {r['k']:>6} x{r['batch']:<4} {tf:8.1f}")
print("one-GPU step  predicted   measured   error   exposed comm pred/meas   peak GiB pred/meas")
for mode in ("async", "sync"):
    c, run = load(f"hzp-{mode}.compare.json"), load(f"hzp-{mode}.run.json")
    pred = load(f"hzp-{mode}.predicted-summary.json")
    if not (c and run and pred):
        print(f"  hzp (2,8,8) {mode:<5}: no result")
        continue
    s, e = c["step_s"], c["exposed_communication_s"]
    p = pred["results"][0]
    print(f"  hzp (2,8,8) {mode:<5} ({run['backend']}) {s['predicted']:9.4f} s {s['measured']:9.4f} s "
          f"{100*s['error']:+6.1f}%   {e['predicted']:.4f} / {e['measured']:.4f} s   "
          f"{p['peak_reserved_GiB']:.1f} / {run['peak_reserved_GiB']:.1f}")
o = load("bench-overlap.json")
if o:
    print("GEMM slowdown beside a collective on N SMs")
    for r in o["results"]:
        print(f"  {r['channels']:>3} SMs: {r['overlapped_seconds'] / r['alone_seconds']:.3f}x")
PY
}

if [ "$dry" -eq 1 ]; then
  [ -x "$build/bin/hzp" ] && [ -x "$build/bin/hzp-run" ] || { echo "gpu-check: no build in $build" >&2; exit 1; }
  skip "build (CUDA, sm_90)" "dry run: the build in $build"
  gpus=0
else
  stage build build_cuda
  stage devices "$build/bin/hzp-devices"
  gpus=$(nvidia-smi -L 2> /dev/null | wc -l)
fi
if [ "$gpus" -ge 1 ]; then
  stage ctest-gpu bash -c "cd '$build' && ctest -L gpu --output-on-failure && ctest -R device_backend --output-on-failure"
else
  skip ctest-gpu "no GPU"
fi
stage model model_4l
stage hzp-async one_gpu async
stage hzp-sync one_gpu sync
if [ "$gpus" -ge 1 ]; then
  stage bench-gemm "$build/bin/hzp-run" bench gemm --schedule "$out/hzp-async.schedule.json" --cluster dgx-h200 \
    --out "$out/bench-gemm.json" --force
  stage bench-overlap "$build/bin/hzp-run" bench overlap --cluster dgx-h200 --out "$out/bench-overlap.json" --force
else
  skip bench-gemm "no GPU"
  skip bench-overlap "no GPU"
fi
if [ "$gpus" -ge 2 ] && command -v mpirun > /dev/null; then
  stage bench-collectives collectives
else
  skip bench-collectives "needs 2 GPUs and mpirun"
fi
bench=()
for f in bench-gemm bench-overlap bench-collectives; do [ -s "$out/$f.json" ] && bench+=("$out/$f.json"); done
if [ "${#bench[@]}" -gt 0 ]; then
  stage calibrate "$build/bin/hzp" calibrate --cluster dgx-h200 "${bench[@]}" --out "$out/calibration-h200.json" --force
else
  skip calibrate "no microbenchmark results"
fi
stage summary summary
cat "$out/summary.log"
log "stages"
printf '  %s\n' "${results[@]}" | tee "$out/stages.txt"
exit "$failed"
