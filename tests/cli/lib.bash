# Helpers for CLI tests (sourced). Each test script gets BINARY SOURCE_DIR WORK_DIR; exit 0 pass, 77 skip.
set -euo pipefail
BIN=$1
SRC=$2
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, captures stdout+stderr in $WORK/out, checks the exit code.
# With DEGEN_TEST_TIMES set, each command's seconds go to stderr (where a test's time goes).
expect_exit() {
  local want=$1; shift
  local t0=${EPOCHREALTIME:-0}
  set +e
  "$@" >"$WORK/out" 2>&1
  local got=$?
  set -e
  [ -z "${DEGEN_TEST_TIMES:-}" ] || awk -v a="$t0" -v b="${EPOCHREALTIME:-0}" -v c="$*" 'BEGIN {printf "[time] %6.1f s  %s\n", b - a, substr(c, 1, 160)}' >&2
  [ "$got" = "$want" ] || { cat "$WORK/out" >&2; fail "'$*' exited $got, expected $want"; }
}
# expect_out TEXT: the last command's output contains TEXT.
expect_out() { grep -qF -- "$1" "$WORK/out" || { cat "$WORK/out" >&2; fail "output lacks '$1'"; }; }
