#!/usr/bin/env bash
# Regenerates the Schedule seeds of the fuzz corpus: lowered plans from the
# current build (schedule-lowered/, replayed by ctest; too large to fuzz
# quickly) and the small hand-made Schedules the fuzzer starts from
# (schedule/, mini-schedules.py). Usage: tests/fuzz/make-seeds.sh [hzp]
set -euo pipefail
cd "$(dirname "$0")/../.."
hzp=${1:-build/bin/hzp}
out=tests/fuzz/seeds/schedule-lowered
model=tests/fuzz/seeds/model_spec/tiny-moe.json
common=(--model "$model" --cluster dgx-h100 --seq-len 128 --force)
"$hzp" schedule "${common[@]}" --gpus 8 --strategy fsdp --global-batch-seqs 16 --out "$out/tiny-fsdp-sync.json"
"$hzp" schedule "${common[@]}" --gpus 16 --strategy hzp --tp 2 --pp 2 --vpp 2 --global-batch-seqs 16 --out "$out/tiny-hzp-tp2-pp2x2.json"
"$hzp" schedule "${common[@]}" --gpus 16 --strategy zero1 --ep 4 --global-batch-seqs 16 --out "$out/tiny-zero1-ep4.json"
tests/fuzz/mini-schedules.py tests/fuzz/seeds/schedule
