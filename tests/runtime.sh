#!/usr/bin/env bash
# hzp-run end to end on the host backend: a Schedule from hzp schedule runs,
# its trace carries the Schedule's hash and compares with the analytic
# prediction; bad input is one error line and exit 2.
# Usage: tests/runtime.sh HZP HZP_RUN
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hzp=$(realpath "$1")
run=$(realpath "$2")
py=/usr/bin/python3
[ -x "$py" ] || py=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# shellcheck source=tests/lib.sh
. "$here/lib.sh"

args=(--model llama3-8b --gpus 16 --strategy hzp --param-shard 2 --grad-shard 8 --optim-shard 16
  --global-batch-tokens 128K)
"$hzp" schedule "${args[@]}" --out s.json > /dev/null
"$hzp" simulate "${args[@]}" --trace predicted.json > /dev/null
"$run" s.json --steps 2 --step-seconds 3 --late-ms 5 --trace measured.json --summary summary.json > /dev/null 2> run.err ||
  { echo "FAIL: hzp-run"; cat run.err; fail=1; }
check "summary: two timed steps and a median" "$py" -c "
import json; j = json.load(open('summary.json')); assert len(j['steps_s']) == 2 and j['median_step_s'] > 0 and j['backend'] == 'host', j"
"$hzp" validate compare predicted.json measured.json --json > cmp.json || { echo "FAIL: compare"; fail=1; }
check "the host run takes the analytic step (within 3 %)" "$py" -c "
import json; e = json.load(open('cmp.json'))['step_s']['error']; assert abs(e) < 0.03, e"

expect_error() {  # expect_error "<stderr substring>" args...
  local want=$1
  shift
  "$run" "$@" > /dev/null 2> err
  local rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l < err)" -ne 1 ] || ! grep -qF -- "$want" err; then
    echo "FAIL: hzp-run $* -> rc=$rc: $(cat err)"
    fail=1
  fi
}
expect_error "nope.json: cannot open file" nope.json
expect_error "--backend: expected host or cuda, got 'tpu'" s.json --backend tpu
expect_error "--backend: expected" s.json --backend cuda  # no GPU here (or no CUDA in the build)
expect_error "expected --warmup and --steps >= 1" s.json --steps 0
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 expect_error "expected one process" s.json
# Numbers through the shared parser: no NaN, inf, sign or absurd range taken as a duration.
for v in inf 1e308 0 -1 nan; do
  expect_error "--watchdog-s: expected a finite number in [0.1, 604800], got '$v'" s.json --watchdog-s "$v"
done
expect_error "--step-seconds: expected a finite number in [0.001, 86400], got 'inf'" s.json --step-seconds inf
expect_error "--step-seconds: expected a finite number in [0.001, 86400], got '1e-9'" s.json --step-seconds 1e-9
expect_error "--trace: expected a non-empty string, got nothing" s.json --trace ""
# An existing output is replaced only with --force, checked before the run (issue 19, item 7).
expect_error "measured.json: already exists; pass --force to overwrite it" s.json --trace measured.json
expect_error "summary.json: already exists; pass --force to overwrite it" s.json --summary summary.json
exit $fail
