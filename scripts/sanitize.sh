#!/usr/bin/env bash
# make sanitize: the CPU build under AddressSanitizer and UndefinedBehaviorSanitizer (gcc), then the
# unit tests and the bad-input CLI tests on it. Any sanitizer report fails the run (UBSan does not
# recover, ASan aborts). Not run by CI (a second full build, and the tests run 2-3x slower).
#   scripts/sanitize.sh [BUILD_DIR] [DOCTEST_FILTER]
#   BUILD_DIR       default build-sanitize
#   DOCTEST_FILTER  a doctest -tc pattern (default: every test case)
set -euo pipefail
cd "$(dirname "$0")/.."
B="${1:-build-sanitize}"
FILTER="${2:-*}"
JOBS="$(nproc 2>/dev/null || echo 2)"
FLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
t0=$(date +%s)
cmake -S . -B "$B" -DDEGEN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$B" -j"$JOBS" --target degen_tests degenbisect
t1=$(date +%s)
echo "sanitize: built in $((t1 - t0)) s"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
"$B/tests/degen_tests" -tc="$FILTER"
for t in bad_input bad_numbers outputs inspect tokenize golden_resume; do
  bash "tests/cli/$t.sh" "$PWD/$B/degenbisect" "$PWD" "$PWD/$B/sanitize-work-$t"
done
echo "sanitize: no sanitizer report; tests passed in $(($(date +%s) - t1)) s"
