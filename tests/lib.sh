# Shared by the end-to-end test scripts (sourced): `check "what" command...`
# runs the command and records a failure in $fail.
fail=0
check() {
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what"
    fail=1
  fi
}
