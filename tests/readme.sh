#!/usr/bin/env bash
# Every command of the README's "Using hzp" block, run as written: build/bin/
# becomes the binaries under test, in a scratch directory that sees the
# repository's examples/, validation/, scripts/ and models/ (HuggingFace
# configs to import), in the README's order (a
# later command reads what an earlier one wrote). Each must exit 0 with
# non-empty output, and write the file it names with --out/--db/--csv/--trace/
# --report. A command that cannot run here as written needs a line in one of
# the tables below, so a new README command cannot go untested silently:
#   stand_in: a template ("...") or a GPU-only command -> what runs instead
#   prepare:  inputs a command reads that no earlier README command writes
# Usage: tests/readme.sh BIN_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
bin=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
ln -s "$repo/examples" "$repo/validation" "$repo/scripts" "$repo/models" .
mkdir -p build && ln -s "$bin" build/bin
# shellcheck source=tests/lib.sh
. "$here/lib.sh"
have_gpu() { command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; }
# Without a GPU, a cuda run is one clear error line and exit 2 (printed: it is the answer).
refused_without_gpu() {
  "$@" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] && [ ! -e gpu.json ]
}
# As tests/mpi_host.sh: root allowed, more processes than cores, no leak
# checking under AddressSanitizer for OpenMPI's own allocations.
mpi() {
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "$@"
}

# A two-point sweep for the distributed launch's "--spec ...".
cat > small.json <<'JSON'
{"schema_version": 1, "base": {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "global_batch_tokens": "4M",
 "strategy": "hzp", "optim_shard": 64}, "axes": {"param_shard": [8, 16]}}
JSON

declare -A stand_in=(
  ["build/bin/hzp simulate ... --json"]="build/bin/hzp simulate --model llama3-8b --gpus 16 --strategy fsdp --global-batch-tokens 1M --json"
  ["mpirun -np 4 build/bin/hzp sweep --spec ... --db big.db && build/bin/hzp sweep merge big.db big.rank*of4.db"]="mpi -np 2 build/bin/hzp sweep --spec small.json --db big.db && build/bin/hzp sweep merge big.db big.rank*of2.db"
  # A fast variant: one group of cases (a minute of CPU for all of them; the
  # whole set runs as the ctest validation_cases).
  ["build/bin/hzp validate cases"]="build/bin/hzp validate cases --filter zeropp"
)
if ! command -v mpirun > /dev/null; then
  stand_in["mpirun -np 4 build/bin/hzp sweep --spec ... --db big.db && build/bin/hzp sweep merge big.db big.rank*of4.db"]="skip: no mpirun here"
fi
# GPU-only: run as written where a GPU answers, else the stand-in.
if ! have_gpu; then
  stand_in["build/bin/hzp-run s.json --backend cuda --emulate-collectives --trace gpu.json"]="refused_without_gpu build/bin/hzp-run s.json --backend cuda --emulate-collectives --trace gpu.json"
  stand_in["mpirun -np 8 build/bin/hzp-run s.json --backend cuda --trace gpus.json"]="skip: needs 8 GPUs"
  stand_in["build/bin/hzp-run bench gemm --schedule s.json --out gemm.json"]="skip: needs a GPU (prepare: writes gemm.json for calibrate)"
  stand_in["scripts/gpu-check.sh"]="skip: needs a GPU (its --dry-run is the ctest gpu_check_dry_run)"
fi
declare -A prepare=(
  # Two traces of one Schedule: the analytic prediction and a host-backend run.
  ["build/bin/hzp validate compare predicted.json measured.json --report cmp.md"]="build/bin/hzp simulate --model llama3-8b --gpus 16 --strategy fsdp --global-batch-tokens 1M --trace predicted.json && build/bin/hzp-run s.json --clock virtual --trace measured.json"
  # What hzp-run bench writes on an H200 (synthetic figures, the files' own format).
  ["build/bin/hzp calibrate --cluster dgx-h200 gemm.json collectives.json overlap.json --out h200.json"]="write_bench_files"
)
write_bench_files() {
  local head='"schema_version": 1, "device": "H200 SXM 141GB", "provenance": {"gpu": "synthetic"}'
  echo "{$head, \"kind\": \"gemm\", \"results\": [{\"m\": 8192, \"n\": 8192, \"k\": 8192, \"batch\": 1, \"dtype\": \"bf16\", \"seconds\": 0.00171}]}" > gemm.json
  echo "{$head, \"kind\": \"collectives\", \"results\": [{\"collective\": \"all_gather\", \"bytes\": 1073741824, \"ranks\": 8, \"ranks_per_node\": 8, \"seconds\": 0.0031}]}" > collectives.json
  echo "{$head, \"kind\": \"overlap\", \"results\": [{\"m\": 8192, \"n\": 8192, \"k\": 8192, \"collective\": \"all_gather\", \"bytes\": 1073741824, \"channels\": 16, \"alone_seconds\": 0.00171, \"overlapped_seconds\": 0.00201}]}" > overlap.json
}

# The block's commands: continuation lines joined, trailing comments dropped.
commands=$(awk '/^## Using hzp/ {on = 1} on && /^```sh/ {block = 1; next} block && /^```/ {exit}
  block { line = line $0; if (line ~ /\\$/) { sub(/\\$/, "", line); next } print line; line = "" }' "$repo/README.md" |
  sed -E 's/ {2,}# .*$//; s/ +/ /g; s/ +$//')
[ -n "$commands" ] || { echo "FAIL: no commands found in the README's Using hzp block"; exit 1; }
ran=0
while IFS= read -r cmd; do
  run=$cmd
  [ -n "${stand_in[$cmd]+x}" ] && run=${stand_in[$cmd]}
  if [ "$run" = "$cmd" ] && [[ "$cmd" == *"..."* ]]; then
    echo "FAIL: README command is a template with no stand-in here: $cmd"
    fail=1
    continue
  fi
  case $run in skip:*) echo "skipped: $cmd (${run#skip: })"; continue ;; esac
  if [ -n "${prepare[$cmd]+x}" ]; then
    eval "${prepare[$cmd]}" < /dev/null > /dev/null 2> prep.err || { echo "FAIL: preparing for: $cmd"; cat prep.err; fail=1; }
  fi
  start=$(date +%s)
  eval "$run" < /dev/null > out.txt 2> err.txt
  rc=$?
  # A wall-clock host run on a loaded machine is refused as unreliable (exit 4, documented): an answer.
  if [ "$rc" -eq 4 ] && [[ "$run" == "build/bin/hzp-run s.json --trace run.json" ]] && grep -q unreliable err.txt; then
    echo "note: $run: the host fell behind (exit 4, unreliable), as documented"
    rc=0
  fi
  if [ "$rc" -ne 0 ] || { [ ! -s out.txt ] && [ ! -s err.txt ]; }; then
    echo "FAIL: exit $rc: $run"
    head -c 1500 out.txt err.txt
    fail=1
  fi
  # The files it names must exist and not be empty.
  case $run in refused_without_gpu*) ;; *)
  for f in $(grep -oE -- '--(out|db|csv|trace|report) [^ ]+' <<< "$run" | cut -d' ' -f2); do
    [ -s "$f" ] || { echo "FAIL: $run did not write $f"; fail=1; }
  done ;;
  esac
  echo "ok ($(($(date +%s) - start)) s): $run"
  ran=$((ran + 1))
done <<< "$commands"
echo "$ran README commands ran"
exit "$fail"
