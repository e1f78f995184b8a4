#!/usr/bin/env bash
# The GPU check of the runtime, in one go on a GPU machine as it comes (one
# H200, 16 cores, CUDA and NCCL, no package archive; under 8 minutes with the
# build): the runtime-only build (HZP_RUNTIME_ONLY, header libraries from
# HZP_DEPS_DIR, default third_party/offline as scripts/offline-deps prepares
# it), the GPU-labelled tests and the GPU backend's logic tests, a one-GPU
# Schedule (llama3-8b with 4 layers, hierarchical ZeRO async and sync,
# collectives emulated) against the analytic prediction, the GEMM, overlap
# and (two or more GPUs) collective microbenchmarks and a calibration fitted
# from them, and, when `import torch` works, GEMM rates by shape and under
# sustained load, element-wise kernels' bandwidth and per-kernel cost, and
# torch_ref's model three ways: hzp's prediction, hzp-run's measurement of
# the same Schedule and PyTorch's own steps, each with its time per kernel
# class.
#
# Each stage reports ok / FAILED / skipped with the reason; a failed stage
# does not stop the others; the script exits 1 when any failed. A test
# pattern that matches no test fails its stage. Everything goes under $OUT
# (default gpu-check-out/) as at most six files: summary.txt (the tables and
# the stages, also printed last), comparison.json, machine.txt,
# bench-gemm.json, torch-ref.json and gpu-check.tar.gz (every log and file).
#
# --dry-run: no GPU; uses the build in $BUILD_DIR as it is and runs every
# stage the host backend can (the Schedules on the virtual clock against the
# prediction, the GPU backend's logic against its fake, PyTorch's --tiny CPU
# check where torch imports, the summary), the GPU stages reported skipped.
# Usage: scripts/gpu-check.sh [--dry-run]
# Environment: OUT, BUILD_DIR (default build-gpu), HZP_DEPS_DIR,
#   GPU_CHECK_DEADLINE_S (the whole check's seconds, default 480: a stage
#   still running then is stopped and reported, and the files are written),
#   TORCH_BUDGET_S (torch_ref's seconds, default 150 or what the deadline leaves),
#   GPU_CHECK_DEVICE_TESTS (the logic tests' ctest pattern; tests set it),
#   HZP_COMMIT (the revision to report when the copy has no usable .git).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
out=${OUT:-gpu-check-out}
build=${BUILD_DIR:-build-gpu}
deps=${HZP_DEPS_DIR:-}
[ -z "$deps" ] && [ -d third_party/offline ] && deps=third_party/offline
device_tests=${GPU_CHECK_DEVICE_TESTS:-'^(DeviceBackend|DeviceComms|WatchState|Schedules/EveryRank)\.'}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Every log and intermediate file; packed into one tarball at the end.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
py=python3
results=()
failed=0
log() { echo "== $*" >&2; }
# Every stage ends by the deadline (killed at it), so the files and the
# summary are always written; the summary itself has the last 20 seconds.
deadline=${GPU_CHECK_DEADLINE_S:-480}
t_end=$(($(date +%s) + deadline))
left() { echo $((t_end - 20 - $(date +%s))); }
# stage NAME COMMAND...: runs it with its output in $work/NAME.log, reports.
stage() {
  local name=$1 t0=$SECONDS limit
  shift
  limit=$(left)
  [ "$name" = summary ] && limit=20
  if [ "$limit" -le 0 ]; then
    skip "$name" "the ${deadline} s deadline passed"
    failed=1 # the check did not finish
    return
  fi
  log "$name"
  if timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" > "$work/$name.log" 2>&1; then
    results+=("$(printf 'ok       %-18s %4d s' "$name" $((SECONDS - t0)))")
  else
    local rc=$?
    results+=("$(printf 'FAILED   %-18s %4d s  (exit %d; %s.log in the tarball)' "$name" $((SECONDS - t0)) "$rc" "$name")")
    failed=1
    tail -5 "$work/$name.log" >&2
  fi
}
skip() { results+=("$(printf 'skipped  %-18s         (%s)' "$1" "$2")"); }
export work build dry py deps root out

configure_args() {
  local a=(-DCMAKE_BUILD_TYPE=Release -DHZP_RUNTIME_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  [ -n "$deps" ] && a+=("-DHZP_DEPS_DIR=$root/$deps")
  command -v ninja > /dev/null && a+=(-G Ninja)
  printf '%s\n' "${a[@]}"
}
build_runtime() {
  if [ -z "$deps" ] && [ ! -e /usr/include/nlohmann/json.hpp ]; then
    echo "no nlohmann-json, CLI11, fmt or GoogleTest here and no HZP_DEPS_DIR: prepare third_party/offline" \
      "with scripts/offline-deps where the package archive is reachable, and bring it along" >&2
    return 1
  fi
  local args
  mapfile -t args < <(configure_args)
  cmake -S . -B "$build" "${args[@]}" || return 1
  local targets=(hzp hzp-run hzp-devices device_backend_test)
  # The help read whole: under pipefail `| grep -q` fails when grep exits first.
  [[ "$(cmake --build "$build" --target help)" == *cuda_backend_test* ]] && targets+=(cuda_backend_test)
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
}
machine() {
  "$build/bin/hzp-devices"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem --format=csv
  fi
  echo "nproc: $(nproc); $(uname -srm); $(c++ --version 2> /dev/null | head -1); cmake $(cmake --version | head -1)"
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2> /dev/null || echo "torch: none"
  # HZP_COMMIT names the commit where the tree was copied without its .git
  # (or with a stale one).
  if [ -n "${HZP_COMMIT:-}" ]; then
    echo "hzp: $HZP_COMMIT"
  else
    echo "hzp: $(git -C "$root" rev-parse HEAD 2> /dev/null || echo unknown)$(git -C "$root" diff --quiet 2> /dev/null || echo ' (modified)')"
  fi
}
# run_ctest ARGS...: a ctest run in which matching no test fails.
run_ctest() { (cd "$build" && ctest --no-tests=error --output-on-failure "$@"); }
model_4l() {
  "$py" - "$work/llama3-8b-4l.json" << 'PY'
import json, sys
m = json.load(open("models/catalog/llama3-8b.json"))
m["name"], m["layers"] = "llama3-8b-4l", 4
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
}
# run_schedule NAME ARGS...: the Schedule of hzp's ARGS, its prediction (trace
# and JSON summary), a run of it on one GPU (the host backend's virtual clock
# in a dry run) and the comparison of the two traces.
run_schedule() {
  local name=$1 backend=(--backend cuda --emulate-collectives --warmup 2 --steps 5) interference=()
  shift
  if [ "$dry" -eq 1 ]; then
    backend=(--backend host --clock virtual --warmup 1 --steps 1)
    interference=(--no-interference --no-link-sharing) # the host backend has neither
  fi
  "$build/bin/hzp" schedule "$@" --out "$work/$name.schedule.json" --force > /dev/null &&
    "$build/bin/hzp" simulate "$@" "${interference[@]}" --json --trace "$work/$name.predicted.json" \
      --force > "$work/$name.predicted-summary.json" &&
    "$build/bin/hzp-run" "$work/$name.schedule.json" "${backend[@]}" --trace "$work/$name.measured.json" \
      --summary "$work/$name.run.json" --force &&
    "$build/bin/hzp" validate compare "$work/$name.predicted.json" "$work/$name.measured.json" --json \
      > "$work/$name.compare.json"
}
hzp_plan() {
  local flag=--async
  [ "$1" = sync ] && flag=--no-async
  run_schedule "hzp-$1" --model "$work/llama3-8b-4l.json" --cluster dgx-h200 --gpus 8 --strategy hzp \
    --param-shard 2 --grad-shard 8 --optim-shard 8 "$flag" --seq-len 4096 --global-batch-seqs 16 --recompute full
}
# torch_ref's model and step as hzp runs it: one H200, sequence 8192,
# micro-batch 1, no recompute, under PyTorch's eager or compiled stack.
torch_model() {
  run_schedule "torch-$1" --model "$work/llama3-8b-4l.json" --cluster dgx-h200 --gpus 1 --strategy fsdp \
    --stack "$1" --seq-len 8192 --global-batch-seqs 1 --recompute none
}
torch_ref() {
  if [ "$dry" -eq 1 ]; then
    "$py" scripts/gpu/torch_ref.py "$work/torch-ref.json" --tiny
  else
    # Its own budget: 150 s, or what the deadline leaves for it after the
    # GEMM probe's and torch_prof's two minutes.
    local budget=${TORCH_BUDGET_S:-150} room=$(($(left) - 120))
    [ "$room" -lt "$budget" ] && budget=$room
    "$py" scripts/gpu/torch_ref.py "$work/torch-ref.json" --budget "$budget"
  fi
}
torch_prof() {
  local tiny=()
  [ "$dry" -eq 1 ] && tiny=(--tiny)
  "$py" scripts/gpu/torch_prof.py "$work/torch-prof.json" "${tiny[@]}"
}
# GEMM rates by shape and under 15 s of back-to-back load, with clocks and power.
gemm_probe() {
  local tiny=()
  [ "$dry" -eq 1 ] && tiny=(--tiny)
  "$py" scripts/gpu/gemm_probe.py "$work/gemm-probe.json" "${tiny[@]}"
}
# Element-wise kernels' bandwidth and per-kernel cost (kernel_tail_us).
kernel_probe() {
  local tiny=()
  [ "$dry" -eq 1 ] && tiny=(--tiny)
  "$py" scripts/gpu/kernel_probe.py "$work/kernel-probe.json" "${tiny[@]}"
}
collectives() {
  rm -rf "$work/rendezvous" && mkdir -p "$work/rendezvous" &&
    mpirun --allow-run-as-root -np "$gpus" "$build/bin/hzp-run" bench collectives --ranks-per-node "$gpus" \
      --cluster dgx-h200 --rendezvous "$work/rendezvous" --out "$work/bench-collectives.json" --force
}
export -f left configure_args build_runtime machine run_ctest model_4l run_schedule hzp_plan torch_model torch_ref \
  torch_prof gemm_probe kernel_probe collectives

if [ "$dry" -eq 1 ]; then
  [ -x "$build/bin/hzp" ] && [ -x "$build/bin/hzp-run" ] || { echo "gpu-check: no build in $build" >&2; exit 1; }
  skip build "dry run: the build in $build as it is"
  gpus=0
else
  stage build build_runtime
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
fi
export gpus t_end
stage machine machine
if [ "$gpus" -ge 1 ]; then
  stage ctest-gpu run_ctest -L gpu
else
  skip ctest-gpu "no GPU"
fi
# The GPU backend's logic against its recording fake: no GPU needed.
stage ctest-device run_ctest -R "$device_tests"
stage model model_4l
stage hzp-async hzp_plan async
stage hzp-sync hzp_plan sync
stage torch-eager torch_model torch-fsdp2
stage torch-compile torch_model torch-fsdp2-compile
if [ "$gpus" -ge 1 ]; then
  stage bench-gemm "$build/bin/hzp-run" bench gemm --schedule "$work/torch-torch-fsdp2.schedule.json" --cluster dgx-h200 \
    --out "$work/bench-gemm.json" --force
  stage bench-overlap "$build/bin/hzp-run" bench overlap --cluster dgx-h200 --out "$work/bench-overlap.json" --force
else
  skip bench-gemm "no GPU"
  skip bench-overlap "no GPU"
fi
if [ "$gpus" -ge 2 ] && command -v mpirun > /dev/null; then
  stage bench-collectives collectives
else
  skip bench-collectives "needs 2 GPUs and mpirun"
fi
if "$py" -c "import torch" 2> /dev/null && { [ "$gpus" -ge 1 ] || [ "$dry" -eq 1 ]; }; then
  stage torch-ref torch_ref
  stage gemm-probe gemm_probe
  stage kernel-probe kernel_probe
  stage torch-prof torch_prof
else
  skip torch-ref "no PyTorch here"
  skip gemm-probe "no PyTorch here"
  skip kernel-probe "no PyTorch here"
  skip torch-prof "no PyTorch here"
fi
bench=()
for f in bench-gemm bench-overlap bench-collectives; do [ -s "$work/$f.json" ] && bench+=("$work/$f.json"); done
if [ "${#bench[@]}" -gt 0 ]; then
  stage calibrate "$build/bin/hzp" calibrate --cluster dgx-h200 "${bench[@]}" --out "$work/calibration-h200.json" --force
else
  skip calibrate "no microbenchmark results"
fi
stage summary "$py" scripts/gpu/compare.py "$work" --json "$work/comparison.json"

# At most six files under $OUT: the summary, the comparison, the machine, two
# measurements and a tarball of everything else.
{
  cat "$work/summary.log"
  echo
  echo "stages"
  printf '  %s\n' "${results[@]}"
} > "$work/summary.txt"
cp "$work/summary.txt" "$out/summary.txt"
[ -s "$work/machine.log" ] && cp "$work/machine.log" "$out/machine.txt"
for f in comparison bench-gemm torch-ref; do [ -s "$work/$f.json" ] && cp "$work/$f.json" "$out/$f.json"; done
tar -C "$work" -czf "$out/gpu-check.tar.gz" .
cat "$out/summary.txt"
exit "$failed"
