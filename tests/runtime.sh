#!/usr/bin/env bash
# hzp-run end to end on the host backend: a Schedule from hzp schedule runs,
# its trace carries the Schedule's hash and, on the virtual clock, equals the
# analytic prediction; a wall-clock run whose host falls behind is marked
# unreliable (exit 4) and validate compare refuses it; the watchdog's abort
# ends the run at once (exit 3); huge ops do not hang; bad input is one error
# line and exit 2. Nothing here depends on the machine's load.
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
# The host backend neither slows compute under collectives nor shares links
# between them: neither does the prediction here.
"$hzp" simulate "${args[@]}" --no-interference --no-link-sharing --trace predicted.json > /dev/null
"$run" s.json --clock virtual --steps 2 --trace measured.json --summary summary.json > /dev/null 2> run.err ||
  { echo "FAIL: hzp-run"; cat run.err; fail=1; }
check "summary: two timed steps and a median, virtual clock, reliable" "$py" -c "
import json; j = json.load(open('summary.json'))
assert len(j['steps_s']) == 2 and j['median_step_s'] > 0 and j['backend'] == 'host', j
assert j['clock'] == 'virtual' and j['reliable'] is True and j['late_ops'] == 0, j"
"$hzp" validate compare predicted.json measured.json --json > cmp.json || { echo "FAIL: compare"; fail=1; }
# The virtual clock does the analytic engine's integer-nanosecond arithmetic
# on the same costs: the step and every op kind's time agree to 1e-9.
check "the host run (virtual clock) takes the analytic step (within 1e-9)" "$py" -c "
import json; j = json.load(open('cmp.json')); e = j['step_s']['error']; assert abs(e) <= 1e-9, e
for k, v in j['by_kind'].items(): assert abs(v['error']) <= 1e-9, (k, v)"

# Wall clock, no tolerance for a late wake-up (--late-ms 0): every op is late,
# so the run is unreliable: a warning line, exit 4, outputs marked; validate
# compare refuses the trace (one line, exit 2) unless --accept-unreliable.
"$run" s.json --clock wall --late-ms 0 --step-seconds 0.2 --steps 1 --trace wall.json --summary wall-summary.json \
  > /dev/null 2> wall.err
rc=$?
[ "$rc" -eq 4 ] && grep -q "^hzp-run: warning: unreliable: [0-9]* of [0-9]* timed ops ended late" wall.err ||
  { echo "FAIL: a wall-clock run with every op late: rc=$rc"; cat wall.err; fail=1; }
check "the unreliable run's summary says so" "$py" -c "
import json; j = json.load(open('wall-summary.json'))
assert j['clock'] == 'wall' and j['reliable'] is False and j['late_ops'] > 0 and 'late' in j['unreliable'], j"
"$hzp" validate compare predicted.json wall.json > cmp.err 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l < cmp.err)" -eq 1 ] && grep -q "wall.json: otherData.unreliable: .*--accept-unreliable" cmp.err ||
  { echo "FAIL: compare of an unreliable trace: rc=$rc: $(cat cmp.err)"; fail=1; }
"$hzp" validate compare predicted.json wall.json --accept-unreliable --json > cmp-wall.json ||
  { echo "FAIL: compare --accept-unreliable"; fail=1; }
check "compare --accept-unreliable flags the trace" "$py" -c "
import json; j = json.load(open('cmp-wall.json')); assert 'late' in j['unreliable']['measured'], j"

# Issue 19, item 1: the watchdog's abort ends every wait at once (it used to
# report "aborting" and sleep on for days), exit 3.
SECONDS=0
timeout 60 "$run" s.json --steps 1 --warmup 1 --step-seconds 86400 --watchdog-s 0.2 > /dev/null 2> abort.err
rc=$?
[ "$rc" -eq 3 ] && grep -q "^hzp-run: aborted: watchdog: no op issued or finished for 200 ms" abort.err &&
  [ "$SECONDS" -lt 30 ] || { echo "FAIL: watchdog abort: rc=$rc after ${SECONDS}s: $(head -3 abort.err)"; fail=1; }

# A Schedule the checker accepts with a GEMM of 1e21 FLOPs and an all-gather
# of 2^50 bytes (days of modelled time) hangs neither clock.
"$py" - s.json huge.json <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
ops = [op for st in s["programs"][0]["streams"] for op in st["ops"]]
next(op for op in ops if op["kind"] == "compute" and "gemm" in op)["flops"] = 1e21
next(op for op in ops if op["kind"] == "collective" and op["op"] == "all_gather")["bytes"] = 2**50
json.dump(s, open(sys.argv[2], "w"))
EOF
fix_hash() {  # the Schedule's recorded hash replaced by the one its content has
  local want
  want=$("$run" "$1" --clock virtual 2>&1 | sed -n 's/.*content hash \([0-9a-f]*\) does not match.*/\1/p')
  "$py" -c "import json,sys; s=json.load(open(sys.argv[1])); s['sha256']=sys.argv[2]; json.dump(s, open(sys.argv[1],'w'))" "$1" "$want"
}
fix_hash huge.json
timeout 60 "$run" huge.json --clock virtual --steps 1 --summary huge-v.json > /dev/null 2> huge.err ||
  { echo "FAIL: a huge Schedule on the virtual clock: $(head -3 huge.err)"; fail=1; }
check "the huge ops take their modelled days" "$py" -c "
import json; j = json.load(open('huge-v.json')); assert j['median_step_s'] > 86400, j"
timeout 60 "$run" huge.json --clock wall --steps 1 --step-seconds 1 > /dev/null 2> huge.err
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] || { echo "FAIL: a huge Schedule on the wall clock: rc=$rc: $(head -3 huge.err)"; fail=1; }

expect_error() {  # expect_error "<stderr substring>" args...
  local want=$1
  shift
  timeout 120 "$run" "$@" > /dev/null 2> err
  local rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l < err)" -ne 1 ] || ! grep -qF -- "$want" err; then
    echo "FAIL: hzp-run $* -> rc=$rc: $(cat err)"
    fail=1
  fi
}
expect_error "nope.json: cannot open file" nope.json
# A Schedule is read as every input is: a regular file within HZP_MAX_INPUT_BYTES
# (/dev/zero used to grow until the process aborted, exit 134; a FIFO blocked).
ln -s /dev/zero zero.json && mkfifo fifo.json && mkdir dir.json
expect_error "zero.json: expected a regular file (it is a character device)" zero.json
expect_error "fifo.json: expected a regular file (it is a FIFO)" fifo.json
expect_error "dir.json: expected a regular file (it is a folder)" dir.json
HZP_MAX_INPUT_BYTES=1K expect_error "s.json: expected at most 1024 bytes (HZP_MAX_INPUT_BYTES), got" s.json
expect_error "--backend: expected host or cuda, got 'tpu'" s.json --backend tpu
expect_error "--backend: expected" s.json --backend cuda  # no GPU here (or no CUDA in the build)
expect_error "--clock: " s.json --clock lamport
expect_error "--clock: expected wall with --backend cuda" s.json --backend cuda --clock virtual
expect_error "expected --warmup and --steps >= 1" s.json --steps 0
# Bounded steps, and memory flat over them (issue 42, item 2: a run kept every
# step's Timeline, about 215 KB a step here, whether or not it wrote a trace).
expect_error "--steps: expected at most 100000 steps" s.json --clock virtual --steps 1000000
expect_error "--warmup: expected at most 100000 steps" s.json --clock virtual --warmup 1000000
expect_error "--steps: expected at most 1000 timed steps with --trace" s.json --clock virtual --steps 1001 --trace t.json
check "... and nothing written" test ! -e t.json
# Peak resident memory of 5 and of 105 timed steps: flat (the old growth was
# about 21 MB). Not under AddressSanitizer, whose quarantine holds freed memory.
# (ldd's output read whole: under pipefail, `ldd | grep -q` fails at random
# when grep exits at its first match and ldd dies writing the rest.)
if [[ "$(ldd "$run")" != *libasan* ]]; then
  rss() { /usr/bin/time -f %M "$run" s.json --clock virtual --steps "$1" 2>&1 > /dev/null | tail -1; }
  small=$(rss 5)
  large=$(rss 105)
  check "100 more timed steps add under 8 MB of resident memory ($small -> $large KB)" \
    test "$((large - small))" -lt 8192
fi
# (This run initialises MPI: under AddressSanitizer its leak check is off, as
# in tests/mpi_host.sh — OpenMPI leaves MPI_Init's allocations to the exit.)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 \
  expect_error "expected one process" s.json
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
# Counts are whole numbers in range, and standard output takes one document (issue 42, item 13).
expect_error "--rank: expected an integer in [0, 1048576], got '-1'" s.json --rank -1
expect_error "--local-gpus: expected an integer in [1, 4096], got '-1'" s.json --local-gpus -1
expect_error "--nccl-channels: expected an integer in [1, 1024], got '-1'" s.json --nccl-channels -1
expect_error "--summary: expected at most one of --trace and --summary on standard output" s.json --trace - --summary -
# ...and so is its folder: before, 100,000 steps ran and then the write failed (issue 42, item 7).
expect_error "/proc/no-such-hzp/y.json: expected a file in an existing folder (/proc/no-such-hzp is not one)" \
  s.json --clock virtual --steps 100000 --summary /proc/no-such-hzp/y.json
exit $fail
