#!/usr/bin/env bash
# hzp-run under mpirun on the host backend, end to end (issue 21, item 7):
# MPI is found and initialised, each of 2 processes runs the Schedule, process
# 0 alone writes the trace and summary, MPI_Finalize lets mpirun exit 0.
# Usage: tests/mpi_host.sh MPIEXEC HZP HZP_RUN
set -uo pipefail
mpiexec=$1
hzp=$(realpath "$2")
run=$(realpath "$3")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$hzp" schedule --model llama3-8b --gpus 8 --strategy fsdp --global-batch-tokens 64K --out s.json > /dev/null || exit 1
# CI runs as root (OpenMPI refuses without --allow-run-as-root) on 2 cores.
# Under AddressSanitizer, leak checking is off for these processes alone:
# OpenMPI's MPI_Init leaves its plugins' and hwloc's allocations to the
# process exit, which LeakSanitizer reports as leaks in frames it cannot name.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$run" s.json --clock virtual --warmup 1 --steps 1 \
  --trace t.json --summary sum.json > out.txt 2> err.txt
rc=$?
fail=0
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun exit $rc"; fail=1; }
for p in 0 1; do
  grep -q "hzp-run: process $p of 2 (mpirun, MPI rank $p of 2)" err.txt || { echo "FAIL: process $p did not run under MPI"; fail=1; }
done
[ -s t.json ] && [ -s sum.json ] || { echo "FAIL: no trace or summary"; fail=1; }
[ "$fail" -eq 0 ] || { cat out.txt err.txt; exit 1; }
echo "ok: mpirun -np 2 hzp-run --backend host"
