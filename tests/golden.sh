#!/usr/bin/env bash
# Golden end-to-end cases: run hzp, normalise what legitimately changes between
# builds (git revision, the binary's path), and diff against tests/golden/.
# Usage: tests/golden.sh HZP [--update]   (scripts/update-goldens passes --update)
set -euo pipefail
hzp=$1
update=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
golden=$here/golden
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

normalise() {
  sed -E -e 's/"git_revision": ?"[^"]*"/"git_revision":"<rev>"/g' \
         -e 's/"command_line": ?"[^"]*"/"command_line":"<cmd>"/g' "$1"
}

# name | outputs | arguments
cases=(
  "llama3-8b_dgx-h100x16_fsdp|summary.json timeline.csv|--model llama3-8b --cluster dgx-h100 --gpus 16 --strategy fsdp --global-batch-tokens 128K"
  "llama3-8b_dgx-h100x16_hzp_tp2_pp2x2|summary.json|--model llama3-8b --cluster dgx-h100 --gpus 16 --strategy hzp --tp 2 --pp 2 --vpp 2 --global-batch-tokens 64K"
  "llama3-8b_dgx-h100x16_hzp_tp2_pp4_uneven|summary.json|--model llama3-8b --cluster dgx-h100 --gpus 16 --strategy hzp --tp 2 --pp 4 --first-stage-layers 6 --last-stage-layers 6 --global-batch-tokens 64K"
  "llama3-8b_dgx-h100x16_hzp_tp2_pp2x2_simgrid|summary.json|--model llama3-8b --cluster dgx-h100 --gpus 16 --strategy hzp --tp 2 --pp 2 --vpp 2 --global-batch-tokens 64K --engine simgrid --ranks all"
)

status=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  rest=${c#*|}
  outputs=${rest%%|*}
  args=${rest#*|}
  # shellcheck disable=SC2086
  "$hzp" simulate $args --summary "$work/$name.summary.json" --csv "$work/$name.timeline.csv" > "$work/$name.stdout"
  for kind in $outputs; do
    normalise "$work/$name.$kind" > "$work/$name.$kind.norm"
    if [ "$update" = "--update" ]; then
      cp "$work/$name.$kind.norm" "$golden/$name.$kind"
      echo "updated tests/golden/$name.$kind"
    elif ! diff -u "$golden/$name.$kind" "$work/$name.$kind.norm" > "$work/diff" ; then
      echo "golden mismatch: tests/golden/$name.$kind (regenerate with scripts/update-goldens and review the diff)"
      head -40 "$work/diff"
      status=1
    fi
  done
done
exit $status
