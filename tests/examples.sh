#!/usr/bin/env bash
# Every example runs as written (examples/run.sh, the commands behind
# examples/*.txt) and prints what is committed: outputs regenerated into a
# scratch folder must equal examples/*.txt byte for byte, the revision line
# aside (run.sh replaces it). A changed answer fails here until the examples
# are regenerated (examples/run.sh) and the diff reviewed.
# Usage: tests/examples.sh HZP
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
hzp=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
EXAMPLES_OUT=$work "$repo/examples/run.sh" "$hzp" > "$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
fail=0
for f in "$repo"/examples/*.txt; do
  name=$(basename "$f")
  if ! diff -u "$f" "$work/$name" > "$work/diff.txt"; then
    echo "FAIL: examples/$name differs from what its commands print now (examples/run.sh regenerates it):"
    head -40 "$work/diff.txt"
    fail=1
  fi
done
[ -s "$work/collectives_vs_group.png" ] || { echo "FAIL: no collectives_vs_group.png"; fail=1; }
[ "$fail" -eq 0 ] && echo "ok: $(ls "$repo"/examples/*.txt | wc -l) example outputs as committed"
exit "$fail"
