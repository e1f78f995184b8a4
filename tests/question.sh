#!/usr/bin/env bash
# The README's "A question, end to end" (issue 43): every command of its
# first sh block run as written (build/bin/ is the binaries under test), each
# exiting 0 with the answer its step promises: three families side by side
# with why and the expected error (1, 2), the what-if echoed (2), a best plan
# for each GPU count with the days and dollars of 1T tokens (3), and the plan
# in full ending with its expected error (4). Usage: tests/question.sh BIN_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
bin=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
mkdir -p build && ln -s "$bin" build/bin
# shellcheck source=tests/lib.sh
. "$here/lib.sh"

commands=$(awk '/^### A question, end to end/ {on = 1} on && /^```sh/ {block = 1; next} block && /^```/ {exit}
  block { line = line $0; if (line ~ /\\$/) { sub(/\\$/, "", line); next } print line; line = "" }' "$repo/README.md" |
  grep -v '^#' | sed -E 's/ +/ /g; s/ +$//')
[ "$(printf '%s\n' "$commands" | grep -c .)" -eq 4 ] || { echo "FAIL: expected 4 commands, got: $commands"; exit 1; }
n=0
while IFS= read -r cmd; do
  n=$((n + 1))
  sh -c "$cmd" > "out$n.txt" 2>&1 || { echo "FAIL: step $n exited $?: $cmd"; head -c 2000 "out$n.txt"; fail=1; }
done <<< "$commands"

families() {  # families STEP: the three families' rows, why, and the expected error
  grep -Eq '^fsdp@torch-fsdp2 +fsdp \(' "$1" && grep -Eq '^hsdp@torch-fsdp2 +hsdp \(' "$1" &&
    grep -Eq '^hzp@hzp-async +hzp \(' "$1" && grep -q '^why: each plan against ' "$1" &&
    grep -Eq '^(fsdp@torch-fsdp2: )?expected error of step time, tokens/s and cost: \+-[0-9.]+ %' "$1"
}
check "step 1: three families, why, and the expected error" families out1.txt
check "step 2: the same under the what-if" families out2.txt
check "step 2: the what-if is echoed" grep -q '^what-if: NIC 200 Gb/s, leaf oversubscription 2:1$' out2.txt
check "step 3: a best plan for each GPU count" sh -c "grep -Eq '^  dgx-h100 x 1024: best #[0-9]+' out3.txt \
  && grep -Eq '^  dgx-h100 x 4096: best #[0-9]+' out3.txt"
check "step 3: days and dollars of 1T tokens" grep -q '^training 1e+12 tokens:' out3.txt
check "step 4: the plan fits, and its expected error" sh -c "grep -Eq '^hsdp +\(8,8,8\) sync tp4 pp2x2 .* yes$' out4.txt \
  && grep -q '^expected error of step time, tokens/s and cost' out4.txt \
  && grep -q '^warning: only 2 public runs of torch-fsdp2 on Hopper devices were checked' out4.txt"
exit $fail
