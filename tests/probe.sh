#!/usr/bin/env bash
# The adversarial probe of issue 19, rerun: hostile paths (a planted link
# where a temporary file goes, a link at the destination, ../ in names from
# inputs), huge and odd numbers, /dev/zero, FIFOs and folders as inputs,
# duplicate keys, bad SimGrid settings, the runtime's watchdog abort, and work
# too large to start. Every case runs under a timeout in a fresh folder and
# must not hang, must not write anywhere but where it was asked to, and, when
# it is bad input, must say so in one line with exit 2.
# Usage: tests/probe.sh HZP HZP_RUN   (about a minute; prints a tally)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hzp=$(realpath "$1")
run=$(realpath "$2")
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
in="$root/in"  # inputs, written once before the probe
mkdir -p "$in"
limit=${HZP_PROBE_TIMEOUT:-60}  # seconds: anything longer is a hang
cases=0 hangs=0 strays=0 multiline=0 wrong=0

# probe EXPECT [ALLOWED] -- COMMAND...: EXPECT is an exit status (2: bad input,
# one line) or "ok" (0, or 3/4 where a run may legitimately end so); ALLOWED
# names the files the command may write, relative to its folder.
probe() {
  local expect=$1 allowed=$2
  shift 3
  cases=$((cases + 1))
  local dir="$root/case$cases"
  mkdir -p "$dir"
  touch "$root/marker"
  sleep 0.01
  (cd "$dir" && timeout "$limit" "$@" > "$root/stdout" 2> "$root/stderr")
  local rc=$?
  local what="$*"
  what=${what//$root/.}
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "HANG ($limit s): $what"
    hangs=$((hangs + 1))
  elif [ "$expect" = ok ]; then
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$rc" -ne 4 ]; then
      echo "WRONG: $what -> rc=$rc: $(head -c 300 "$root/stderr")"
      wrong=$((wrong + 1))
    fi
  else
    if [ "$rc" -ne "$expect" ]; then
      echo "WRONG: $what -> rc=$rc, expected $expect: $(head -c 300 "$root/stderr")"
      wrong=$((wrong + 1))
    elif [ "$(wc -l < "$root/stderr")" -ne 1 ]; then
      echo "MULTI-LINE ($(wc -l < "$root/stderr") lines): $what: $(head -c 300 "$root/stderr")"
      multiline=$((multiline + 1))
    fi
  fi
  # Nothing new anywhere under the probe's root but the allowed files.
  local f rel
  while IFS= read -r f; do
    rel=${f#"$dir"/}
    case " $allowed " in *" $rel "*) continue ;; esac
    [ "$f" = "$root/stdout" ] || [ "$f" = "$root/stderr" ] || [ "$f" = "$root/marker" ] && continue
    [ -L "$f" ] && [ "$(readlink "$f")" = "$victim" ] && continue  # a link the case planted itself
    echo "STRAY WRITE: $what wrote ${f#"$root"/}"
    strays=$((strays + 1))
  done < <(find "$root" -newer "$root/marker" \( -type f -o -type l \) ! -path "$in/*" 2> /dev/null)
}

# --- inputs
small=(--model llama3-8b --gpus 16 --strategy fsdp --global-batch-tokens 128K)
"$hzp" schedule "${small[@]}" --out "$in/s.json" > /dev/null
"$hzp" simulate "${small[@]}" --trace "$in/t.json" > /dev/null
"$hzp" models --template llama3-8b > "$in/model.json"
"$hzp" clusters --template dgx-h100 > "$in/cluster.json"
ln -s /dev/zero "$in/zero.json"
mkfifo "$in/fifo.json"
mkdir "$in/dir.json"
printf '{"schema_version": 1, "schema_version": 1}' > "$in/dup.json"
python3 - "$in" <<'EOF'
import json, os, sys
d = sys.argv[1]
m = json.load(open(f"{d}/model.json"))
m["name"] = "../../esc_model"
json.dump(m, open(f"{d}/esc.json", "w"))
for key, value in (("hidden", 10**30), ("layers", -1), ("vocab", 1e300), ("heads", 0)):
    n = dict(m, name="odd")
    n[key] = value
    json.dump(n, open(f"{d}/odd-{key}.json", "w"))
EOF

# --- hostile paths
victim="$root/victim.txt"
echo keep > "$victim"
# A link planted where the temporary file of --summary goes (its name carries
# the pid: the shell's, which exec keeps); and a link at the destination itself.
probe ok "s.json" -- bash -c "ln -s '$victim' .s.json.tmp.\$\$; exec '$hzp' simulate ${small[*]} --summary s.json"
probe 2 "" -- bash -c "ln -s '$victim' s.json; exec '$hzp' simulate ${small[*]} --summary s.json --force"
[ "$(cat "$victim")" = keep ] || { echo "STRAY WRITE: the planted link's target was written"; strays=$((strays + 1)); }
probe ok "out/_.._.._esc_model_dgx-h100x8_fsdp.trace.json out/summary.json" -- \
  "$hzp" simulate --model "$in/esc.json" --gpus 8 --strategy fsdp --global-batch-seqs 8 --seq-len 1024 --out-dir out
probe 2 "" -- "$hzp" simulate "${small[@]}" --trace ""
probe 2 "" -- "$hzp" simulate "${small[@]}" --trace x.json --summary ./x.json
probe 2 "" -- "$hzp" simulate "${small[@]}" --summary /proc/nonexistent/s.json
probe 2 "" -- "$run" "$in/s.json" --clock virtual --trace /dev/null
probe 2 "" -- "$hzp" plot timeline "$in/t.json" --out /dev/null

# --- huge and odd numbers
for flag in "--gpus 2000000" "--gpus 0" "--seq-len 1e300" "--seq-len -1" "--micro-batch 99999999999999999999" \
  "--param-shard nan" "--memory-limit-GiB 9e9 --adaptive" "--nic-gbps inf" "--oversubscription -1" \
  "--global-batch-tokens 1" "--doc-mean-tokens inf" "--seed -1" "--max-ops 0" "--max-flows -5"; do
  # shellcheck disable=SC2086
  probe 2 "" -- "$hzp" simulate "${small[@]}" $flag
done
for key in hidden layers vocab heads; do probe 2 "" -- "$hzp" simulate --model "$in/odd-$key.json" --gpus 8; done
for v in inf 1e308 0 -1 nan; do probe 2 "" -- "$run" "$in/s.json" --watchdog-s "$v"; done
for v in inf nan 1e-9 -3; do probe 2 "" -- "$run" "$in/s.json" --step-seconds "$v"; done
probe 2 "" -- "$hzp" sweep --set gpus=16 --db d.db -j 100000
probe 2 "" -- "$hzp" sweep --set gpus=16 --db d.db --where "gpus > 1e400"
probe 2 "" -- "$hzp" simulate --gpus 16 --global-batch-seqs 65536
probe 2 "" -- "$hzp" simulate --model llama3.1-405b --cp 16
probe 2 "" -- "$hzp" simulate --gpus 65536 --global-batch-seqs 131072 --engine simgrid --ranks classes
# A Schedule with a GEMM of 1e21 FLOPs and an all-gather of 2^50 bytes.
python3 - "$in/s.json" "$in/huge.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
ops = [op for st in s["programs"][0]["streams"] for op in st["ops"]]
next(op for op in ops if op["kind"] == "compute" and "gemm" in op)["flops"] = 1e21
next(op for op in ops if op["kind"] == "collective" and op["op"] == "all_gather")["bytes"] = 2**50
json.dump(s, open(sys.argv[2], "w"))
EOF
# And one whose every kernel has 1e300 FLOPs (each saturates at 146 years:
# their sums overflowed int64 before durations saturated).
python3 - "$in/s.json" "$in/saturated.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
for st in s["programs"][0]["streams"]:
    for op in st["ops"]:
        if op["kind"] == "compute":
            op["flops"] = 1e300
json.dump(s, open(sys.argv[2], "w"))
EOF
for f in huge saturated; do
  want=$("$run" "$in/$f.json" --clock virtual 2>&1 | sed -n 's/.*content hash \([0-9a-f]*\) does not match.*/\1/p')
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['sha256']=sys.argv[2]; json.dump(s, open(sys.argv[1],'w'))" \
    "$in/$f.json" "$want"
  probe ok "" -- "$run" "$in/$f.json" --clock virtual --steps 1
  probe ok "" -- "$run" "$in/$f.json" --steps 1 --step-seconds 1
done

# --- /dev/zero, FIFOs and folders as inputs
for f in zero fifo dir; do
  probe 2 "" -- "$hzp" simulate --model "$in/$f.json" --gpus 8
  probe 2 "" -- "$hzp" simulate --cluster "$in/$f.json"
  probe 2 "" -- "$hzp" simulate "${small[@]}" --plan "$in/$f.json"
  probe 2 "" -- "$hzp" simulate "${small[@]}" --calibration "$in/$f.json"
  probe 2 "" -- "$hzp" sweep --spec "$in/$f.json" --db d.db
  probe 2 "" -- "$hzp" sweep export "$in/$f.json" --csv o.csv
  probe 2 "" -- "$hzp" validate compare "$in/$f.json" "$in/t.json"
  probe 2 "" -- "$hzp" calibrate "$in/$f.json" --out cal.json
  probe 2 "" -- "$hzp" plot memory "$in/$f.json" --out m.png
  probe 2 "" -- "$run" "$in/$f.json"
done
probe 2 "" -- env HZP_MAX_INPUT_BYTES=1K "$run" "$in/s.json"

# --- duplicate keys, in every input kind
probe 2 "" -- "$hzp" simulate --model "$in/dup.json"
probe 2 "" -- "$hzp" simulate --cluster "$in/dup.json"
probe 2 "" -- "$hzp" simulate "${small[@]}" --plan "$in/dup.json"
probe 2 "" -- "$hzp" simulate "${small[@]}" --calibration "$in/dup.json"
probe 2 "" -- "$hzp" sweep --spec "$in/dup.json" --db d.db
probe 2 "" -- "$hzp" validate compare "$in/dup.json" "$in/t.json"
probe 2 "" -- "$hzp" calibrate "$in/dup.json" --out cal.json
probe 2 "" -- "$run" "$in/dup.json"

# --- bad SimGrid settings
sg=(simulate "${small[@]}" --engine simgrid)
for c in nokey contexts/stack-size:1 surf/precision:1e300 maxmin/precision:1 network/model:Constant \
  network/bandwidth-factor:1e-6 no/such:1 contexts/factory:thread; do
  probe 2 "" -- "$hzp" "${sg[@]}" --simgrid-cfg "$c"
done

# --- the runtime's watchdog: the abort ends the run (exit 3), no hang
probe ok "" -- "$run" "$in/s.json" --steps 1 --warmup 1 --step-seconds 86400 --watchdog-s 0.2

echo "probe: $cases cases, $hangs hangs, $strays stray writes, $multiline multi-line errors, $wrong wrong exit codes"
[ $((hangs + strays + multiline + wrong)) -eq 0 ]
