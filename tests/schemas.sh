#!/usr/bin/env bash
# The JSON Schemas and the field reference in docs/ are what the option tables
# generate (scripts/update-schemas). Usage: tests/schemas.sh HZP
set -uo pipefail
hzp=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for name in plan sweep model cluster stack schedule; do
  "$hzp" schema "$name" > "$work/$name.schema.json"
  if ! diff -u "$root/docs/schemas/$name.schema.json" "$work/$name.schema.json"; then
    echo "FAIL: docs/schemas/$name.schema.json is not what the option table generates (run scripts/update-schemas)"
    fail=1
  fi
done
"$root/scripts/gen-reference" "$hzp" > "$work/REFERENCE.md"
if ! diff -u "$root/docs/REFERENCE.md" "$work/REFERENCE.md"; then
  echo "FAIL: docs/REFERENCE.md is not what the option tables generate (run scripts/update-schemas)"
  fail=1
fi
exit $fail
