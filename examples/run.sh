#!/usr/bin/env bash
# Regenerates every example's output in examples/*.txt from the current build;
# review the diff before committing. Usage: examples/run.sh [path/to/hzp]
set -euo pipefail
cd "$(dirname "$0")/.."
hzp=${1:-build/bin/hzp}
[ -x "$hzp" ] || make build >/dev/null

# The revision line changes with every commit; the rest is deterministic.
run() {
  local out=$1
  shift
  local status=0
  echo "\$ hzp $*" >> "$out"
  "$hzp" "$@" > "$out.tmp" 2>&1 || status=$?
  sed -E 's/^hzp ([0-9.]+) \([0-9a-f]+(-dirty)?\)/hzp \1 (<rev>)/' "$out.tmp" >> "$out"
  rm -f "$out.tmp"
  # Exit code 3 (a plan that does not fit) is an answer, not a failure.
  if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
    echo "examples/run.sh: hzp $* failed with exit code $status" >&2
    exit "$status"
  fi
  [ "$status" -eq 3 ] && echo "(exit code 3: infeasible)" >> "$out"
  echo >> "$out"
}

# 1. Asynchronous vs synchronous issue of the same hierarchical ZeRO plan:
# background threads with pooled buffers against inline issue with host syncs
# and the caching allocator; small kernels (short sequences, a small model)
# make host issue matter.
out=examples/async_vs_sync.txt
: > "$out"
for model in llama3-8b llama3-70b; do
  for mode in "--async --prefetch-depth 1" "--async --prefetch-depth 2" "--no-async --prefetch-depth 1"; do
    # shellcheck disable=SC2086
    run "$out" simulate --model "$model" --cluster dgx-h100 --gpus 256 --strategy hzp --seq-len 2048 \
      --global-batch-tokens 2M --recompute full $mode
  done
done

# 2. Group-size grid on mesh16-roce200 (two full-mesh islands of 8 per node,
# one 200 Gb/s port per device): a dense ~70B model and an MoE model.
out=examples/group_grid_mesh16.txt
: > "$out"
for shards in "8 8 1024" "8 16 1024" "16 16 1024" "8 16 256" "16 16 256" "8 128 1024"; do
  set -- $shards
  run "$out" simulate --model llama3-70b --cluster mesh16-roce200 --gpus 1024 --strategy hzp --recompute full \
    --global-batch-tokens 16M --param-shard "$1" --grad-shard "$2" --optim-shard "$3"
done
for shards in "8 8 1024" "8 16 1024" "16 16 1024" "8 16 256"; do
  set -- $shards
  run "$out" simulate --model qwen3-30b-a3b --cluster mesh16-roce200 --gpus 1024 --strategy hzp --recompute full \
    --global-batch-tokens 16M --seq-len 4096 --ep 8 --param-shard "$1" --grad-shard "$2" --optim-shard "$3"
done

# 3. Hierarchical ZeRO against a Megatron ND plan on the same cluster.
out=examples/hzp_vs_megatron.txt
: > "$out"
run "$out" simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy hzp --recompute full \
  --global-batch-tokens 16M --explain
run "$out" simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy zero1 --tp 8 --pp 4 --vpp 5 \
  --recompute selective --global-batch-tokens 16M --explain
run "$out" simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy hzp --tp 4 --recompute full \
  --global-batch-tokens 16M --explain
echo "wrote examples/async_vs_sync.txt examples/group_grid_mesh16.txt examples/hzp_vs_megatron.txt"
