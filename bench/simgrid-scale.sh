#!/usr/bin/env bash
# Wall time and peak memory of `hzp simulate --engine simgrid` for Llama-3 70B
# under hierarchical ZeRO on dgx-h100, by GPU count, scale mode and gradient
# group: (8,8,N), g_g inside a node, and (8,16,N), g_g across two nodes (where
# --ranks classes has to model the other ranks' traffic, issue 20).
# Peak memory is GNU time's maximum resident set, which counts the forked
# simulation process. Usage: bench/simgrid-scale.sh [hzp binary] [gpu counts...]
# Targets (issue 4): 1,024 GPUs --ranks all < 10 s; 8,192 GPUs --ranks classes
# < 60 s; peak memory < 4 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
hzp=${1:-build/bin/hzp}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(256 1024 4096 8192)
if [ ! -x /usr/bin/time ]; then
  echo "bench/simgrid-scale.sh: needs GNU time (/usr/bin/time; scripts/install-deps installs it)" >&2
  exit 2
fi

printf '%-6s %-4s %-8s %10s %10s %10s %12s  %s\n' gpus g_g ranks wall_s peak_MB step_s flows engine
for n in "${sizes[@]}"; do
  for gg in 8 16; do
  for mode in classes all; do
    out=$(mktemp)
    # Two sequences of 8,192 tokens per GPU: the step of `make run` at 1,024 GPUs.
    /usr/bin/time -f '%e %M' -o "$out.time" "$hzp" simulate --model llama3-70b --cluster dgx-h100 --gpus "$n" \
      --strategy hzp --param-shard 8 --grad-shard "$gg" --global-batch-sequences $((2 * n)) --recompute full \
      --engine simgrid --ranks "$mode" --json > "$out"
    read -r wall kb < "$out.time"
    step=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["results"][0]["step_time_s"])' "$out")
    detail=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["engine_detail"])' "$out")
    flows=$(echo "$detail" | sed -n 's/.*channels, \([0-9]*\) flows.*/\1/p')
    printf '%-6s %-4s %-8s %10s %10d %10s %12s  %s\n' "$n" "$gg" "$mode" "$wall" $((kb / 1024)) "$step" "$flows" "$detail"
    rm -f "$out" "$out.time"
  done
  done
done
