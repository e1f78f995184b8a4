#!/usr/bin/env bash
# Candidates per second of `hzp plan` (issue 5's reference: Calculon's
# exhaustive search evaluates 8,112 candidates in 28.7 s on a 2-core machine,
# 283 per second; the target is at least 10x that over a space at least as
# large). Usage: bench/plan-search.sh [hzp binary] [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
hzp=${1:-build/bin/hzp}
jobs=${2:-2}
# cpu_ms/plan: user + system CPU of the whole command (threads and forked
# children) per plan it evaluated, screened or simulated exactly; Calculon
# spends 9.5 ms (issue 20).
printf '%-38s %10s %8s %8s %8s %6s %9s %12s %12s\n' query candidates mem_prune cmp_prune screened exact seconds \
  candidates/s cpu_ms/plan
run() {
  local label=$1
  shift
  python3 - "$label" "$hzp" plan "$@" -j "$jobs" --json <<'PY'
import json, resource, subprocess, sys
j = json.loads(subprocess.run(sys.argv[2:], check=True, capture_output=True, text=True).stdout)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
plans = j["screened"] + j["simulated_exactly"]
print("%-38s %10d %8d %8d %8d %6d %9.2f %12.0f %12.2f" % (sys.argv[1], j["candidates"], j["pruned_by_memory_bound"],
      j["pruned_by_compute_bound"], j["screened"], j["simulated_exactly"], j["seconds"], j["candidates_per_second"],
      1000 * (r.ru_utime + r.ru_stime) / max(plans, 1)))
PY
}
run "llama3-70b dgx-h100 x1024, 16M tok" --model llama3-70b --cluster dgx-h100 --gpus 1024 --global-batch-tokens 16M
run "gpt3-175b dgx-a100 x1024, 1536 seq" --model gpt3-175b --cluster dgx-a100 --gpus 1024 --global-batch-sequences 1536
run "llama3-8b dgx-h100 x64,128,256" --model llama3-8b --cluster dgx-h100 --gpus 64,128,256 --global-batch-tokens 4M
# Every plan that passes the states bound screened (--exhaustive): MoE with folded experts.
run "qwen3-30b-a3b dgx-h100 x8, exhaustive" --model qwen3-30b-a3b --cluster dgx-h100 --gpus 8 \
  --global-batch-tokens 128K --exhaustive
# Calculon's reference model (Megatron-Turing NLG 530B on A100), at four sizes.
run "mt-nlg-530b dgx-a100 x2520..5040" --model bench/models/mt-nlg-530b.json --cluster dgx-a100 \
  --gpus 2520,3360,4200,5040 --global-batch-sequences 2520
# The 530B/2,056 question (issue 41): Calculon's llm-optimal-execution on 2,056
# GPUs with at most 2,056 sequences tries 15,216 executions in about 4 min here.
run "mt-nlg-530b dgx-a100 x2056" --model bench/models/mt-nlg-530b.json --cluster dgx-a100 --gpus 2056 \
  --global-batch-sequences 2056
