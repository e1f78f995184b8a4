#!/usr/bin/env bash
# Sweeps, plans and plots end to end. Usage: tests/sweep.sh HZP
#  - a sweep killed (SIGKILL) mid-way resumes without losing or duplicating a
#    row, and ends equal, row for row, to an uninterrupted sweep;
#  - a point whose worker crashes is recorded as an error and the sweep goes on;
#  - under mpirun -np 2 each rank writes its shard; merged, they equal the
#    single-process sweep row for row;
#  - CSV and JSON export; a heatmap and a timeline picture;
#  - `hzp validate compare` of two engines' traces of one Schedule writes a
#    report and its picture, and refuses traces of different Schedules;
#  - `hzp calibrate` fits an overlay from measurements that `--calibration` loads;
#  - `hzp plan` reports only plans that fit, its pruned search finds the
#    plans an exhaustive screening finds, the best at least as good as
#    every preset at the same size.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hzp=$(realpath "$1")
py=/usr/bin/python3
[ -x "$py" ] || py=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# shellcheck source=tests/lib.sh
. "$here/lib.sh"

# 12 points (of 24, filtered) of ~0.1 s each (Llama-3 8B on 64 GPUs, SimGrid engine, every rank): long enough to kill mid-way.
sweep=(--set model=llama3-8b --set gpus=64 --set global_batch_tokens=1M --set engine=simgrid --set ranks=all
       --set strategy=hzp --set param_shard=8,16 --set grad_shard=8,16,64 --set optim_shard=8,16,32,64
       --where "param_shard <= grad_shard" --where "grad_shard <= optim_shard")
"$hzp" sweep "${sweep[@]}" --db full.db -j 2 > /dev/null 2>&1 || { echo "FAIL: full sweep"; fail=1; }

rows() {  # rows DB: normalised rows (no timings, no shard), sorted by key
  "$py" - "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
cols = [r[1] for r in c.execute("PRAGMA table_info(points)") if r[1] not in ("wall_s", "shard")]
for r in c.execute(f"SELECT {', '.join(cols)} FROM points ORDER BY key"):
    print(r)
PY
}
count() { "$py" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*), count(distinct key) from points').fetchone())" "$1" 2>/dev/null; }

check "the full sweep has 12 rows, one per point" test "$(count full.db)" = "(12, 12)"

# Kill the sweep once a few rows are committed, then resume.
"$hzp" sweep "${sweep[@]}" --db resumed.db -j 1 > /dev/null 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  n=$("$py" -c "import sqlite3,sys
try: print(sqlite3.connect(sys.argv[1]).execute('select count(*) from points').fetchone()[0])
except Exception: print(0)" resumed.db 2>/dev/null)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
killed_at=$(count resumed.db)
check "the sweep was killed mid-way (rows at kill: $killed_at)" "$py" -c "import sys; n=eval(sys.argv[1])[0]; sys.exit(0 if 0 < n < 12 else 1)" "$killed_at"
"$hzp" sweep "${sweep[@]}" --db resumed.db -j 2 > resume.out 2>&1
check "the resumed sweep skipped what was done" grep -q "already done" resume.out
check "resumed: 12 rows, no duplicates" test "$(count resumed.db)" = "(12, 12)"
check "resumed equals uninterrupted, row for row" diff <(rows full.db) <(rows resumed.db)

# A crashing point.
HZP_SWEEP_FAULT=abort@5 "$hzp" sweep "${sweep[@]}" --db crash.db -j 2 > /dev/null 2>&1
check "crash: every point recorded" test "$(count crash.db)" = "(12, 12)"
check "crash: the crashed point is an error naming the signal" "$py" -c "
import sqlite3, sys
r = sqlite3.connect('crash.db').execute('select status, error from points where point = 5').fetchone()
ok = sqlite3.connect('crash.db').execute(\"select count(*) from points where status = 'ok'\").fetchone()[0]
sys.exit(0 if r and r[0] == 'error' and 'worker crashed (signal 6' in r[1] and ok == 11 else 1)"

# Plan booleans are sweep keys too: the gradient all-reduce after the whole
# backward costs time that overlapping hides.
"$hzp" sweep --set model=llama3-8b --set gpus=16 --set global_batch_tokens=128K --set strategy=ddp \
  --set overlap_grad_reduce=true,false --db bools.db -j 1 > /dev/null 2>&1 || { echo "FAIL: boolean sweep"; fail=1; }
check "overlap_grad_reduce=false is slower than true" "$py" -c "
import json, sqlite3, sys
rows = sqlite3.connect('bools.db').execute('select inputs, step_time_s from points').fetchall()
t = {json.loads(i)['overlap_grad_reduce']: s for i, s in rows}
sys.exit(0 if len(t) == 2 and t[False] > t[True] else 1)"

# Partitioned over two MPI ranks, merged.
if command -v mpirun > /dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$hzp" sweep "${sweep[@]}" --db mpi.db -j 1 > mpi.out 2>&1 ||
    { echo "FAIL: mpirun sweep"; cat mpi.out; fail=1; }
  check "one shard per rank" test -f mpi.rank0of2.db -a -f mpi.rank1of2.db
  "$hzp" sweep merge merged.db mpi.rank0of2.db mpi.rank1of2.db > /dev/null || { echo "FAIL: merge"; fail=1; }
  check "merged shards equal the single-process sweep, row for row" diff <(rows full.db) <(rows merged.db)
else
  echo "FAIL: mpirun not found (scripts/install-deps installs openmpi-bin)"
  fail=1
fi

# Export and plots.
"$hzp" sweep export full.db --csv full.csv > /dev/null && "$hzp" sweep export full.db --json full.json > /dev/null ||
  { echo "FAIL: export"; fail=1; }
check "CSV: a header and 12 rows" test "$(wc -l < full.csv)" -eq 13
check "JSON: 12 rows" "$py" -c "import json; assert len(json.load(open('full.json'))['rows']) == 12"
# The database is never written through a planted link (issue 42, item 4):
# to a file, dangling, or as the destination of a merge; one line, exit 2,
# the target untouched and nothing created.
echo precious > target
ln -s target linked.db
ln -s created-by-sqlite dangling.db
for db in linked.db dangling.db; do
  "$hzp" sweep --set gpus=16 --set strategy=fsdp --set global_batch_tokens=1M --db "$db" > link.out 2>&1
  check "sweep --db $db (a link) is refused with exit 2" test $? -eq 2
  check "... in one line naming it" test "$(wc -l < link.out)" -eq 1 -a -n "$(grep "$db" link.out)"
done
"$hzp" sweep merge linked.db full.db > /dev/null 2>&1
check "sweep merge into a link is refused with exit 2" test $? -eq 2
check "the link's target is untouched" test "$(cat target)" = precious
check "a dangling link's target is not created" test ! -e created-by-sqlite

"$hzp" plot heatmap full.db --x grad_shard --y optim_shard --out heat.png > /dev/null || { echo "FAIL: heatmap"; fail=1; }
check "heatmap PNG" "$py" -c "assert open('heat.png','rb').read(8) == b'\x89PNG\r\n\x1a\n'"
"$hzp" simulate --model llama3-8b --gpus 16 --strategy hzp --global-batch-tokens 128K --trace t.json > /dev/null
"$hzp" plot timeline t.json --out tl.svg > /dev/null && "$hzp" plot memory t.json --out mem.png > /dev/null ||
  { echo "FAIL: timeline/memory plot"; fail=1; }
check "timeline SVG" grep -q "<svg" tl.svg
# validate compare: the same Schedule under both engines -> a report and its picture;
# another Schedule is refused (one line, exit 2, no report).
"$hzp" simulate --model llama3-8b --gpus 16 --strategy hzp --global-batch-tokens 128K --engine simgrid \
  --trace ts.json > /dev/null
"$hzp" validate compare t.json ts.json --report cmp.md > /dev/null 2>&1 || { echo "FAIL: validate compare"; fail=1; }
check "compare: report with step, exposure, kinds, critical path and picture" grep -q \
  -e "## Critical path" cmp.md
check "compare: picture" test -s cmp.png
"$hzp" validate compare t.json ts.json --json > cmp.json
check "compare: JSON step error" "$py" -c "
import json; j = json.load(open('cmp.json')); s = j['step_s']
assert abs(s['error'] - (s['predicted'] - s['measured']) / s['measured']) < 1e-9 and 0 <= j['overlap_fraction']['measured'] <= 1"
"$hzp" simulate --model llama3-8b --gpus 16 --strategy fsdp --global-batch-tokens 128K --trace other.json > /dev/null
"$hzp" validate compare t.json other.json --report refused.md > /dev/null 2> refused.err
check "compare: refuses another Schedule" test $? -eq 2 -a "$(wc -l < refused.err)" -eq 1 -a ! -e refused.md -a ! -e refused.png
grep -q "different Schedules" refused.err || { echo "FAIL: refusal message: $(cat refused.err)"; fail=1; }
# calibrate: GEMMs measured at 25 % of peak -> an overlay -> a slower step with --calibration.
cat > gemm.json <<'JSON'
{"schema_version": 1, "kind": "gemm", "device": "H100 SXM 80GB", "provenance": {"gpu": "synthetic"},
 "results": [{"m": 4096, "n": 4096, "k": 4096, "batch": 1, "dtype": "bf16", "seconds": 5.5578e-4}]}
JSON
"$hzp" calibrate --cluster dgx-h100 gemm.json --out cal.json > /dev/null || { echo "FAIL: calibrate"; fail=1; }
check "calibrate: GEMM efficiency 0.25 in the overlay" "$py" -c "
import json; assert json.load(open('cal.json'))['device_profile']['gemm_efficiency'] == [[4096.0, 0.25]]"
"$hzp" simulate --model llama3-8b --gpus 16 --strategy fsdp --global-batch-tokens 128K --json > base.json
"$hzp" simulate --model llama3-8b --gpus 16 --strategy fsdp --global-batch-tokens 128K --json --calibration cal.json \
  > calibrated.json
check "calibrate: the calibrated step is slower" "$py" -c "
import json; b, c = (json.load(open(f))['results'][0]['step_time_s'] for f in ('base.json', 'calibrated.json'))
assert c > 1.5 * b, (b, c)"
"$hzp" calibrate --cluster dgx-h100 gemm.json --out cal.json > /dev/null 2> again.err
check "calibrate: an existing --out is kept without --force" test $? -eq 2 -a "$(wc -l < again.err)" -eq 1
"$hzp" plot heatmap full.db --x nope --y optim_shard --out bad.png > /dev/null 2> bad.err
check "plot: a bad key is one error line, exit 2, no file" test $? -eq 2 -a "$(wc -l < bad.err)" -eq 1 -a ! -e bad.png
# Plot and compare outputs (issue 19, items 2, 7, 10): --force to replace, never a device or a folder, one
# error line with exit 2 for a missing folder or a bad key or argument, no temporary file left behind.
plot_fails() {  # plot_fails "<stderr substring>" args...
  local want=$1
  shift
  "$hzp" "$@" > /dev/null 2> plot.err
  local rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l < plot.err)" -ne 1 ] || ! grep -qF -- "$want" plot.err; then
    echo "FAIL: hzp $* -> rc=$rc, expected 2 and one line with: $want"; cat plot.err; fail=1
  fi
}
plot_fails "heat.png: already exists; pass --force" plot heatmap full.db --x grad_shard --y optim_shard --out heat.png
"$hzp" plot heatmap full.db --x grad_shard --y optim_shard --out heat.png --force > /dev/null ||
  { echo "FAIL: plot --force"; fail=1; }
mkdir -p adir.png
plot_fails "adir.png: expected a regular file" plot heatmap full.db --x grad_shard --y optim_shard --out adir.png
plot_fails "expected an existing folder" plot heatmap full.db --x grad_shard --y optim_shard --out nodir/h.png
plot_fails "nokey: expected one of" plot scaling full.db --x nokey --out s.png
plot_fails "command line: plot:" plot heatmap full.db --out h.png
# Collectives: hzp's prediction in nccl-tests columns, drawn; a file without rows is one line.
"$hzp" collectives --gpus 16 --op all_gather -b 1K -e 64M > coll.log && grep -q "ring/" coll.log &&
  "$hzp" plot collectives coll.log --mark 1048576 --out coll.png > /dev/null && test -s coll.png ||
  { echo "FAIL: hzp collectives | hzp plot collectives"; fail=1; }
echo "# nothing" > empty.log
plot_fails "empty.log: expected nccl-tests data rows" plot collectives empty.log --out e.png
plot_fails "--group: expected all, node, rail or 2 to 16 ranks" collectives --gpus 16 --group 17
plot_fails "cmp.md: already exists; pass --force" validate compare t.json ts.json --report cmp.md
check "no temporary picture left behind" test -z "$(find . -name '*.tmp*')"

# Plan: only feasible plans; the best at least as good as every preset.
"$hzp" plan --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch-tokens 256K --top 5 -j 2 --json > plan.json ||
  { echo "FAIL: plan"; fail=1; }
# Pruned against exhaustive on a MoE model, where the sharding matters; on 8
# GPUs the best plans sit at the memory limit (the reduced-layer models'
# peaks are not monotonic there, and the experts' states shard over their
# own groups), where a wrong memory bound prunes the best plan.
moe=(--model qwen3-30b-a3b --cluster dgx-h100 --gpus 8 --global-batch-tokens 128K --top 5 -j 2 --json)
"$hzp" plan "${moe[@]}" > plan_moe.json && "$hzp" plan "${moe[@]}" --exhaustive > plan_all.json ||
  { echo "FAIL: plan --exhaustive"; fail=1; }
for s in ddp zero1 zero2 fsdp hsdp hpz; do
  "$hzp" simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch-tokens 256K --strategy "$s" --json \
    > "preset_$s.json" 2> /dev/null
done
check "plan: feasible plans, best <= every feasible preset" "$py" - <<'PY'
import json, glob, sys
plan = json.load(open("plan.json"))
best = plan["plans"][0]["step_time_s"]
assert plan["candidates"] > 1000, plan["candidates"]
for p in plan["plans"]:
    assert p["peak_reserved_GiB"] <= 80.0 + 1e-9, p
for f in glob.glob("preset_*.json"):
    r = json.load(open(f))["results"][0]
    if r["fits_in_memory"]:
        assert best <= r["step_time_s"] * (1 + 1e-9), (f, best, r["step_time_s"])
PY
check "plan: branch and bound finds what screening every plan finds" "$py" - <<'PY'
import json
pruned, every = json.load(open("plan_moe.json")), json.load(open("plan_all.json"))
assert every["pruned_by_compute_bound"] == 0 and every["screened"] > 5 * pruned["screened"], (every, pruned)
a, b = [p["step_time_s"] for p in pruned["plans"]], [p["step_time_s"] for p in every["plans"]]
assert len(a) == len(b) == 5, (a, b)
assert abs(a[0] - b[0]) <= 1e-9 * b[0], (a, b)
for x, y in zip(a, b):
    assert x <= y * (1 + 1e-9), (a, b)
PY

# A sweep that answers nothing is not a success (issue 42, items 6 and 11):
# every point failing exits 5 with the reasons printed; filters that keep no
# point, or a model that is no file, are bad input before anything runs.
"$hzp" sweep --set gpus=16 --set global_batch_sequences=3,5 --db allfail.db > /dev/null 2> allfail.err
rc=$?
# The two reasons differ only in their numbers: one group of 2 points.
[ "$rc" -eq 5 ] && grep -Eq "^sweep: 2 point\(s\) failed, the first: point [01]: global_batch_sequences: [35] sequences \
do not split" allfail.err && [ "$(grep -c "failed" allfail.err)" -eq 1 ] ||
  { echo "FAIL: a sweep whose every point failed -> rc=$rc: $(cat allfail.err)"; fail=1; }
"$hzp" sweep --set gpus=8,16 --where "tp >= 2" --db none.db > /dev/null 2> none.err
rc=$?
[ "$rc" -eq 2 ] && grep -q "where: the filters keep none of the 2 point(s)" none.err && [ ! -e none.db ] ||
  { echo "FAIL: filters keeping no point -> rc=$rc: $(cat none.err)"; fail=1; }
"$hzp" sweep --set gpus=8,16 --set model=/dev/zero --db zero.db > /dev/null 2> zero.err
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l < zero.err)" -eq 1 ] && grep -q "unknown model '/dev/zero'" zero.err && [ ! -e zero.db ] ||
  { echo "FAIL: --set model=/dev/zero -> rc=$rc: $(cat zero.err)"; fail=1; }

# Nothing vanishes (issue 43, item 3). A plan over two GPU counts answers for
# each, though the larger one's plans fill the top, and says where each
# one's candidates went.
"$hzp" plan --model llama3-8b --gpus 8,64 --global-batch-tokens 512K --top 2 -j 2 > plan2.txt 2>&1 ||
  { echo "FAIL: plan over two GPU counts"; fail=1; }
check "plan --gpus 8,64: a best plan for each count" sh -c "grep -Eq '^ +[0-9]+=? +dgx-h100 +8 ' plan2.txt \
  && grep -Eq '^ +1=? +dgx-h100 +64 ' plan2.txt \
  && grep -Eq '^  dgx-h100 x 8: best #[0-9]+=?; [0-9]+ candidates: [0-9]+ over the memory budget' plan2.txt \
  && grep -Eq '^  dgx-h100 x 64: best #1=?; ' plan2.txt"
# The comparison people bring (issue 43, item 2): the best of each family
# side by side with what decides between them, PyTorch's names accepted;
# under a stack only what it runs, and a family it does not run refused.
"$hzp" plan --model llama3-8b --cluster dgx-h100 --gpus 64 --global-batch-tokens 1M -j 2 \
  --compare FULL_SHARD,HYBRID_SHARD,hzp > compare.txt 2>&1 || { echo "FAIL: plan --compare"; fail=1; }
check "plan --compare prints the three families and why" sh -c "grep -Eq '^fsdp +fsdp \(' compare.txt \
  && grep -Eq '^hsdp +hsdp \(' compare.txt && grep -Eq '^hzp +hzp \(' compare.txt \
  && grep -q '^why: each plan against ' compare.txt && grep -q '^expected error of step time' compare.txt"
"$hzp" plan --model llama3-8b --cluster dgx-h100 --gpus 64 --global-batch-tokens 1M -j 2 --stack torch-fsdp2 \
  --top 20 --json > fsdp2.json || { echo "FAIL: plan under torch-fsdp2"; fail=1; }
check "plan under torch-fsdp2 proposes only ddp, fsdp and hsdp" "$py" -c "
import json; s = {p['strategy'] for p in json.load(open('fsdp2.json'))['plans']}
assert s and s <= {'ddp', 'fsdp', 'hsdp'}, s"
"$hzp" plan --model llama3-8b --gpus 64 --stack torch-fsdp2 --compare fsdp,hzp > /dev/null 2> refused.err
rc=$?
[ "$rc" -eq 2 ] && grep -q "command line: --compare: torch-fsdp2 runs ddp, fsdp and hsdp, not hzp" refused.err ||
  { echo "FAIL: --compare with a family the stack does not run -> rc=$rc: $(cat refused.err)"; fail=1; }

# A sweep's failed points are reported by kind, and plots mark the points
# without a number (out of memory, failed) instead of dropping them.
"$hzp" sweep --set model=llama3-8b --set gpus=8,16,24 --set strategy=ddp,fsdp --set global_batch_sequences=16 \
  --db marks.db > /dev/null 2> marks.err
check "sweep: one line per kind of error, with its count" sh -c "[ \"\$(grep -c 'point(s) failed' marks.err)\" -eq 1 ] \
  && grep -q '^sweep: 2 point(s) failed, the first: point [45]: global_batch_sequences: 16 sequences do not split' \
  marks.err"
for kind in scaling heatmap; do
  extra=()
  [ "$kind" = heatmap ] && extra=(--x gpus --y strategy --metric tokens_per_s)
  "$hzp" plot "$kind" marks.db "${extra[@]}" --out "marks_$kind.png" > /dev/null 2> "marks_$kind.err"
  check "plot $kind marks the points it cannot draw" grep -q \
    "^hzp plot: 2 point(s) out of memory and 2 failed have no number to draw; marked on the figure" "marks_$kind.err"
done

exit $fail
