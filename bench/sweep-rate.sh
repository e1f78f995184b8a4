#!/usr/bin/env bash
# Sweep points per second for each engine: the same 24-point grid (Llama-3 8B
# on 64 H100, hzp group sizes) with the analytic engine and with SimGrid in
# both rank modes, on `jobs` workers. Usage: bench/sweep-rate.sh [hzp binary] [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
hzp=${1:-build/bin/hzp}
jobs=${2:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grid=(--set model=llama3-8b --set gpus=64 --set global_batch_tokens=1M --set strategy=hzp
      --set param_shard=1,2,4,8 --set grad_shard=8,16,32 --set optim_shard=32,64)
printf '%-18s %7s %9s %10s\n' engine points seconds points/s
for engine in analytic "simgrid classes" "simgrid all"; do
  set -- $engine
  extra=(--set engine="$1")
  [ $# -gt 1 ] && extra+=(--set ranks="$2")
  out=$("$hzp" sweep "${grid[@]}" "${extra[@]}" --db "$work/$1${2:-}.db" -j "$jobs" 2> /dev/null)
  # "<db>: N points, 0 already done, N run (...) in S s (R points/s)"
  points=$(echo "$out" | sed -n 's/.*: \([0-9]*\) points,.*/\1/p')
  seconds=$(echo "$out" | sed -n 's/.* in \([0-9.]*\) s.*/\1/p')
  rate=$(echo "$out" | sed -n 's/.*(\([0-9.]*\) points\/s).*/\1/p')
  printf '%-18s %7s %9s %10s\n' "$engine" "$points" "$seconds" "$rate"
done
