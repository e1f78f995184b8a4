#!/usr/bin/env bash
# Bad input to `hzp plot`: one line on stderr naming the file (or the command
# line) and the key, exit code 2, no picture written: never a traceback nor
# the "internal error" line. Valid traces still plot, and reading a sweep
# database leaves its folder as it was (no DB-shm, no DB-wal).
# Usage: tests/plot_errors.sh HZP
# With HZP_PLOT_SCRIPT=FILE the pictures come from `python3 FILE` instead of
# the copy built into HZP (HZP still simulates the traces).
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 HZP" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
hzp=$(realpath "$1")
py=/usr/bin/python3  # as `hzp plot` runs the script
[ -x "$py" ] || py=python3
if ! "$py" -c 'import matplotlib' 2> /dev/null; then
  echo "SKIP: plot_errors: $py has no matplotlib (python3-matplotlib)"
  exit 0
fi
if [ -n "${HZP_PLOT_SCRIPT:-}" ]; then
  plot=("$py" "$(realpath "$HZP_PLOT_SCRIPT")")
else
  plot=("$hzp" plot)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# shellcheck source=tests/lib.sh
. "$here/lib.sh"

# expect_fail "<stderr substring>" plot-args...: exit 2, one line on stderr containing it, no out.png.
expect_fail() {
  local want=$1
  shift
  rm -f out.png
  timeout 20 "${plot[@]}" "$@" --out out.png > stdout 2> stderr
  local rc=$? lines
  lines=$(wc -l < stderr)
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" stderr || [ -e out.png ]; then
    echo "FAIL: hzp plot $* -> rc=$rc, $lines stderr line(s)$([ -e out.png ] && echo ', out.png written');" \
      "expected rc=2 and one line containing: $want"
    head -c 1000 stderr
    fail=1
  fi
}

# expect_ok OUT plot-args...: exit 0 and the picture OUT written.
expect_ok() {
  local out=$1
  shift
  rm -f "$out"
  timeout 60 "${plot[@]}" "$@" --out "$out" > stdout 2> stderr
  local rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$out" ]; then
    echo "FAIL: hzp plot $* --out $out -> rc=$rc, expected the picture"
    head -c 1000 stderr
    fail=1
  fi
}

# Valid traces: two runs of one Schedule (two engines) and one of another Schedule.
run=(simulate --model llama3-8b --gpus 16 --global-batch-tokens 128K)
if ! { "$hzp" "${run[@]}" --strategy hzp --trace t.json && "$hzp" "${run[@]}" --strategy fsdp --trace f.json &&
  "$hzp" "${run[@]}" --strategy hzp --engine simgrid --trace ts.json; } > /dev/null; then
  echo "FAIL: hzp simulate --trace"
  exit 1
fi
sha() { "$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['otherData']['schedule_sha256'])" "$1"; }
sha_t=$(sha t.json) sha_f=$(sha f.json)
check "the hzp and fsdp traces are of different Schedules" test "$sha_t" != "$sha_f"
check "the analytic and SimGrid traces are of one Schedule" test "$sha_t" = "$(sha ts.json)"

expect_ok timeline.png timeline t.json
expect_ok memory.png memory t.json --hbm-GiB 80
expect_ok same.png compare t.json t.json
expect_ok engines.svg compare t.json ts.json

# Bad traces, each the valid one with one thing wrong; "1e999" (a string) is
# written as that number, which JSON readers take as infinity.
"$py" - <<'PY'
import json

text = open("t.json").read()
events = json.loads(text)["traceEvents"]
x, c = (next(e for e in events if e["ph"] == ph) for ph in "XC")  # an op, a memory counter
m = next(e for e in events if e["ph"] == "M" and e["name"] == "thread_name")


def bad(name, change):
    """name.json: the valid trace changed in place by change(t)."""
    t = json.loads(text)
    change(t)
    with open(f"{name}.json", "w") as f:
        f.write(json.dumps(t).replace('"1e999"', "1e999"))


def first(name, event):
    """name.json: the valid trace with event as its first, traceEvents[0]."""
    bad(name, lambda t: t["traceEvents"].insert(0, event))


def without(event, key):
    return {k: v for k, v in event.items() if k != key}


for kind, value in (("object", {}), ("null", None), ("number", 3), ("string", "X")):
    bad(f"events-{kind}", lambda t, value=value: t.update(traceEvents=value))
first("event-list", [x])
first("ph-number", dict(x, ph=1))
first("pid-string", dict(x, pid="0"))
first("tid-list", dict(x, tid=[0]))
first("dur-string", dict(x, dur="61.989"))
first("no-ts", without(x, "ts"))
first("no-dur", without(x, "dur"))
first("ts-inf", dict(x, ts="1e999"))
first("dur-inf", dict(x, dur="1e999"))
first("dur-negative", dict(x, dur=-1))
first("counter-args-list", dict(c, args=[1.5]))
first("counter-GiB-string", dict(c, args={"GiB": "1.5", "reserved_GiB": 2}))
first("counter-reserved-inf", dict(c, args={"GiB": 1.5, "reserved_GiB": "1e999"}))
first("stream-name-missing", dict(m, args={}))
first("stream-name-number", dict(m, args={"name": 7}))
bad("header-list", lambda t: t.update(otherData=[]))
bad("header-number", lambda t: t.update(otherData=1))
bad("schedule-name-number", lambda t: t["otherData"].update(schedule_name=5))
bad("engine-null", lambda t: t["otherData"].update(engine=None))
bad("version-number", lambda t: t["otherData"].update(hzp_version=1))
bad("no-sha", lambda t: t["otherData"].pop("schedule_sha256"))


def dollar_names(t):
    for e in t["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            e["args"]["name"] = "x$^$y"


bad("dollar-names", dollar_names)
bad("many-streams", lambda t: t["traceEvents"].extend(dict(x, tid=1000 + i) for i in range(1500)))
PY
if [ ! -s events-object.json ] || [ ! -s many-streams.json ]; then
  echo "FAIL: writing the bad traces"
  exit 1
fi

# trace_fails "<stderr substring>" FILE: refused by the pictures of a trace, taken in turn (one check
# of all traces reads them): timeline, memory, compare (FILE as the measured trace).
turn=0
trace_fails() {
  case $((turn++ % 3)) in
    0) expect_fail "$1" timeline "$2" ;;
    1) expect_fail "$1" memory "$2" ;;
    *) expect_fail "$1" compare t.json "$2" ;;
  esac
}

# 1. Chrome traces: the shape of every event the pictures read, the first wrong value named by its key.
for kind in object null number string; do
  trace_fails "events-$kind.json: traceEvents: expected a list of trace events" "events-$kind.json"
done
trace_fails "event-list.json: traceEvents[0]: expected a trace event (an object), got a list" event-list.json
trace_fails "ph-number.json: traceEvents[0].ph: expected a string" ph-number.json
trace_fails "pid-string.json: traceEvents[0].pid: expected an integer" pid-string.json
trace_fails "tid-list.json: traceEvents[0].tid: expected an integer" tid-list.json
trace_fails "dur-string.json: traceEvents[0].dur: expected a number of microseconds, got a string" dur-string.json
trace_fails "no-ts.json: traceEvents[0].ts: missing" no-ts.json
trace_fails "no-dur.json: traceEvents[0].dur: missing" no-dur.json
trace_fails "ts-inf.json: traceEvents[0].ts: expected microseconds in [-1e+12, 1e+12], got inf" ts-inf.json
trace_fails "dur-inf.json: traceEvents[0].dur: expected microseconds in [0, 1e+12], got inf" dur-inf.json
trace_fails "dur-negative.json: traceEvents[0].dur: expected microseconds in [0, 1e+12], got -1" dur-negative.json
trace_fails "counter-args-list.json: traceEvents[0].args: expected an object" counter-args-list.json
trace_fails "counter-GiB-string.json: traceEvents[0].args.GiB: expected a number of GiB" counter-GiB-string.json
trace_fails "counter-reserved-inf.json: traceEvents[0].args.reserved_GiB: expected GiB in [0, 1e+09], got inf" \
  counter-reserved-inf.json
trace_fails "stream-name-missing.json: traceEvents[0].args.name: missing: expected a string" stream-name-missing.json
trace_fails "stream-name-number.json: traceEvents[0].args.name: expected a string" stream-name-number.json
trace_fails "header-list.json: otherData: expected an object (the hzp trace header)" header-list.json
trace_fails "header-number.json: otherData: expected an object" header-number.json
trace_fails "schedule-name-number.json: otherData.schedule_name: expected a string" schedule-name-number.json
trace_fails "engine-null.json: otherData.engine: expected a string" engine-null.json
trace_fails "version-number.json: otherData.hzp_version: expected a string" version-number.json
printf '[{"traceEvents": []}]' > top-list.json
printf '"traceEvents"' > top-string.json
trace_fails "top-list.json: expected an hzp Chrome trace (a JSON object), got a list" top-list.json
trace_fails "top-string.json: expected an hzp Chrome trace (a JSON object), got a string" top-string.json
expect_fail "event-list.json: traceEvents[0]: expected a trace event" compare event-list.json t.json

# 2. JSON: no NaN or Infinity literal, no key twice in an object; each named by its key.
printf '{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": NaN, "dur": 1}]}' > nan.json
printf '{"otherData": {"gpus": [16, Infinity]}, "traceEvents": []}' > inf.json
printf '{"traceEvents": [], "otherData": {"bytes": -Infinity}}' > ninf.json
printf '{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": 1, "ts": 2, "dur": 1}]}' > dup.json
printf '{"traceEvents": [], "traceEvents": []}' > dup-top.json
trace_fails "nan.json: ts: expected a finite number, got NaN" nan.json
trace_fails "inf.json: gpus: expected a finite number, got Infinity" inf.json
trace_fails "ninf.json: bytes: expected a finite number, got -Infinity" ninf.json
trace_fails "dup.json: ts: duplicate key (each key once per object)" dup.json
trace_fails "dup-top.json: traceEvents: duplicate key (each key once per object)" dup-top.json

# 3. Numbers on the command line: finite and meaningful.
for v in nan inf -1 0 2e6; do
  expect_fail "command line: --hbm-GiB: expected a number of GiB in (0, 1e6]" memory t.json --hbm-GiB "$v"
done
expect_ok hbm.png memory t.json --hbm-GiB 1e6
"$hzp" collectives --gpus 16 > coll.log || { echo "FAIL: hzp collectives"; fail=1; }
for v in nan inf -1 0; do
  expect_fail "command line: --mark: expected a finite number of bytes > 0" collectives coll.log --mark "$v"
done
expect_fail "command line: --program: expected a rank class >= 0, got -1" timeline t.json --program -1
expect_fail "command line: --program: expected a rank class >= 0, got -2" compare t.json t.json --program -2

# 4. nccl-tests logs are read as hzp reads any input: bounded, never a device or a FIFO.
expect_ok coll.png collectives coll.log --mark 1048576
truncate -s 2G sparse.log
start=$SECONDS
HZP_MAX_INPUT_BYTES=1M expect_fail "sparse.log: expected at most 1048576 bytes (HZP_MAX_INPUT_BYTES), got 2147483648" \
  collectives coll.log sparse.log
check "a 2 GB log is refused at once ($((SECONDS - start)) s)" test $((SECONDS - start)) -le 10
expect_fail "nope.log: cannot open file" collectives nope.log
expect_fail "/dev/zero: expected a regular file (it is a character device)" collectives /dev/zero
mkfifo fifo.log
expect_fail "fifo.log: expected a regular file (it is a FIFO)" collectives fifo.log

# 5. compare: two runs of one Schedule, as `hzp validate compare` takes them.
different="expected the predicted trace's Schedule $sha_t, got $sha_f: these are runs of different Schedules"
expect_fail "f.json: otherData.schedule_sha256: $different" compare t.json f.json
expect_fail "no-sha.json: otherData.schedule_sha256: missing" compare t.json no-sha.json
expect_fail "no-sha.json: otherData.schedule_sha256: missing" compare no-sha.json t.json

# 6. Sweep databases: read leaving the folder as it was, NULL and text values skipped.
"$py" - <<'PY'
import sqlite3

columns = "point, status, model, cluster, strategy, gpus, tokens_per_s, mfu, tp, pp, step_time_s"
insert = f"INSERT INTO points ({columns}) VALUES (?, 'ok', ?, 'dgx-h100', 'fsdp', ?, ?, 0.4, ?, 1, 1)"
for name, speeds in (("wal", [1e5, 2e5, 4e5]), ("mixed", [None, "fast", 4e5]), ("null", [None, None, None]),
                     ("text", ["fast", b"\x00", None]), ("dollar", [1e5, 2e5, 4e5])):
    con = sqlite3.connect(f"{name}.db")
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.execute(f"CREATE TABLE points ({columns})")
    model = "$\\frac{$" if name == "dollar" else "llama3-8b"
    for i, (gpus, speed) in enumerate(zip((8, 16, 32), speeds)):
        con.execute(insert, (i, model, gpus, speed, 1 << i))
    con.commit()
    con.close()
PY
for db in wal mixed; do
  check "$db.db: WAL mode, nothing beside it before plotting" test ! -e "$db.db-wal" -a ! -e "$db.db-shm"
  expect_ok "$db-scaling.png" scaling "$db.db"
  expect_ok "$db-heatmap.png" heatmap "$db.db" --x tp --y gpus
  check "plot scaling and heatmap leave no $db.db-shm or $db.db-wal" test ! -e "$db.db-wal" -a ! -e "$db.db-shm"
done
for db in null text; do
  expect_fail "$db.db: points: expected points to plot: a number > 0 in gpus, numbers in tokens_per_s and mfu" \
    scaling "$db.db"
  expect_fail "$db.db: tokens_per_s: expected numbers to plot" heatmap "$db.db" --x tp --y gpus
done

# Also: names are drawn as written (a '$' is no TeX); a picture too tall to draw is one line.
expect_ok dollar.png timeline dollar-names.json
expect_ok dollar-heatmap.png heatmap dollar.db --x tp --y gpus
expect_fail "many-streams.json: tid: expected at most 500 streams" timeline many-streams.json
printf '{"traceEvents": [], "a\\nb": 1, "a\\nb": 2}' > dup-newline.json
expect_fail 'dup-newline.json: a\nb: duplicate key' memory dup-newline.json

exit $fail
