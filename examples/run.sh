#!/usr/bin/env bash
# Regenerates every example's output in examples/*.txt from the current build;
# review the diff before committing. Usage: examples/run.sh [path/to/hzp]
# EXAMPLES_OUT=DIR writes them under DIR instead (tests/examples.sh compares
# those with the committed ones).
set -euo pipefail
cd "$(dirname "$0")/.."
hzp=${1:-build/bin/hzp}
[ -x "$hzp" ] || make build >/dev/null
dest=${EXAMPLES_OUT:-examples}
tmp_dir=$(mktemp -d)
trap 'rm -rf "$tmp_dir"' EXIT

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
out="$dest"/async_vs_sync.txt
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
out="$dest"/group_grid_mesh16.txt
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
out="$dest"/hzp_vs_megatron.txt
: > "$out"
run "$out" simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy hzp --recompute full \
  --global-batch-tokens 16M --explain
run "$out" simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy zero1 --tp 8 --pp 4 --vpp 5 \
  --recompute selective --global-batch-tokens 16M --explain
run "$out" simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy hzp --tp 4 --recompute full \
  --global-batch-tokens 16M --explain
echo "wrote $dest/async_vs_sync.txt $dest/group_grid_mesh16.txt $dest/hzp_vs_megatron.txt"

# 4. What one layer's collectives cost as the group grows, and what that does
# to the step. Llama-3 70B's layer is 855,654,400 parameters (attention
# 4 x 8192^2 with 8 KV heads of 128: 151.0 M; SwiGLU 3 x 8192 x 28672:
# 704.6 M; two norms), 1,711,308,800 bytes in bf16: the size of its parameter
# all-gather and of its gradient reduce-scatter (nccl-tests' convention: the
# whole gathered buffer). Over the first 8, 16, ..., 1,024 ranks of each cluster.
out="$dest"/collectives_vs_group.txt
: > "$out"
for cluster in dgx-h100 mesh16-roce200; do
  for group in 8 16 32 64 128 256 512 1024; do
    run "$out" collectives --cluster "$cluster" --gpus 1024 --group "$group" --op all_gather -b 1711308800 -e 1711308800
  done
done
# The curves behind the table (every size from 64 KiB to 4 GiB), drawn.
logs=()
for group in 8 64 1024; do
  "$hzp" collectives --cluster dgx-h100 --gpus 1024 --group "$group" --op all_gather -b 64K -e 4G > "$tmp_dir/h100-$group.log"
  logs+=("$tmp_dir/h100-$group.log")
done
"$hzp" plot collectives "${logs[@]}" --mark 1711308800 --out "$dest"/collectives_vs_group.png --force > /dev/null
# The same group sizes as sharding plans: hzp's parameter and gradient groups
# of g ranks (optimizer states over all 1,024) against FSDP's full group.
out="$dest"/step_vs_group.txt
: > "$out"
for cluster in dgx-h100 mesh16-roce200; do
  run "$out" simulate --model llama3-70b --cluster "$cluster" --gpus 1024 --strategy fsdp --recompute full \
    --global-batch-tokens 16M
  for g in 8 64 1024; do
    run "$out" simulate --model llama3-70b --cluster "$cluster" --gpus 1024 --strategy hzp --recompute full \
      --global-batch-tokens 16M --param-shard "$g" --grad-shard "$g" --optim-shard 1024
  done
done

# 5. The same plans under the software stacks that run them (hzp's runtime,
# PyTorch FSDP2, DeepSpeed ZeRO, Megatron-Core): Llama-3 70B and Qwen3-30B-A3B
# on mesh16-roce200 and dgx-h100 at 256 and 1,024 GPUs, with the term that
# decides each row.
examples/stacks_and_plans.py "$hzp" | sed -E 's/^hzp ([0-9.]+) \([0-9a-f]+(-dirty)?\)/hzp \1 (<rev>)/' \
  > "$dest"/stacks_and_plans.txt
echo "wrote $dest/stacks_and_plans.txt"

