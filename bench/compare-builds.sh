#!/usr/bin/env bash
# Two hzp builds against each other: wall seconds of two analytic simulations
# and a plan search, interleaved runs, medians of 5 (the ratio is what to
# read; a loaded machine moves both). Usage: bench/compare-builds.sh OLD_HZP NEW_HZP
set -euo pipefail
old=${1:?usage: bench/compare-builds.sh OLD_HZP NEW_HZP}
new=${2:?usage: bench/compare-builds.sh OLD_HZP NEW_HZP}
med() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
t() {
  local s e
  s=$(date +%s.%N)
  "$@" > /dev/null 2>&1 || true
  e=$(date +%s.%N)
  python3 -c "print($e - $s)"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for q in sim70 sim8 plan8; do
  for b in old new; do : > "$tmp/b_${q}_$b"; done
  for i in 1 2 3 4 5; do
    for b in old new; do
      bin=${!b}
      case $q in
        sim70) t $bin simulate --model llama3-70b --cluster dgx-h100 --gpus 1024 --strategy hzp --global-batch-tokens 16M --recompute full >> "$tmp"/b_${q}_$b ;;
        sim8) t $bin simulate --model llama3-8b --cluster dgx-h100 --gpus 64 --strategy fsdp --global-batch-tokens 4M >> "$tmp"/b_${q}_$b ;;
        plan8) $bin plan --model llama3-8b --cluster dgx-h100 --gpus 64,128,256 --global-batch-tokens 4M -j 2 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['seconds'])" >> "$tmp"/b_${q}_$b ;;
      esac
    done
  done
  o=$(med < "$tmp"/b_${q}_old); n=$(med < "$tmp"/b_${q}_new)
  echo "$q old $o new $n ratio $(python3 -c "print(round($n / $o, 3))")"
done
