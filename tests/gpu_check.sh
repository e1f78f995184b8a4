#!/usr/bin/env bash
# scripts/gpu-check.sh --dry-run on the build under test: every stage that
# needs no GPU passes, the results are at most six files under $OUT with the
# summary table last; a ctest pattern that matches no test fails its stage
# and the script; a deadline that passes skips the remaining stages, still
# writes the files and fails the check.
# Usage: tests/gpu_check.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/lib.sh
. "$here/lib.sh"
gpu_check() { BUILD_DIR="$build" "$here/../scripts/gpu-check.sh" --dry-run; }

OUT="$work/ok" gpu_check > "$work/ok.log" 2>&1
check "a dry run passes (exit 0)" test $? -eq 0
check "at most six files under \$OUT" test "$(find "$work/ok" -type f | wc -l)" -le 6
for f in summary.txt comparison.json machine.txt gpu-check.tar.gz; do
  check "\$OUT/$f written" test -s "$work/ok/$f"
done
check "the GPU backend's logic tests ran" grep -q '^  ok       ctest-device' "$work/ok/summary.txt"
check "the one-GPU Schedules were compared" grep -q 'hzp (2,8,8) async (host)' "$work/ok/summary.txt"
check "torch_ref's model is predicted and run" grep -q '^  step  .*[0-9]' "$work/ok/summary.txt"
check "the GPU stages say why they were skipped" grep -q '^  skipped  bench-gemm .*(no GPU)' "$work/ok/summary.txt"
check "the stages are printed last" sh -c "tail -1 '$work/ok.log' | grep -q 'summary'"
check "the tarball holds the logs" sh -c "tar -tzf '$work/ok/gpu-check.tar.gz' | grep -q ctest-device.log"

OUT="$work/none" GPU_CHECK_DEVICE_TESTS='^NoSuchSuite\.' gpu_check > "$work/none.log" 2>&1
check "a pattern that matches no test fails the check (exit 1)" test $? -eq 1
check "... and names the stage" grep -q '^  FAILED   ctest-device' "$work/none/summary.txt"

OUT="$work/late" GPU_CHECK_DEADLINE_S=1 gpu_check > "$work/late.log" 2>&1
check "a passed deadline fails the check (exit 1)" test $? -eq 1
check "... skips what is left with the reason" grep -q '^  skipped  hzp-async .*deadline passed' "$work/late/summary.txt"
check "... and still writes the summary" test -s "$work/late/summary.txt"
exit "$fail"
