#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-fuzz/) and
# runs each for a while from seed corpora made from the committed fixtures. Any crash, sanitizer
# report, hang (-timeout) or exception that is not a degen::Error stops that target; its input is
# kept as BUILD/crashes/<target>-crash-... and the run exits 1.
#
#   scripts/fuzz.sh [--seconds N] [--jobs N] [--build DIR] [--runs N] [TARGET ...]
#
#   --seconds N  time per target (default 60)
#   --runs N     at most N executions per target (default: no limit; the time limit still applies)
#   --jobs N     targets run at once (default: nproc)
#   --build DIR  the fuzz build folder (default build-fuzz in the repository; a DIR given is relative
#                to the folder the script is run from). DIR/seeds is deleted and made again every run,
#                so DIR must be a folder this script made (its .degenbisect-made-by,
#                scripts/lib/owned-dir.bash, or a fuzz build configured by an earlier version of the
#                script), an empty one or none: another is refused (exit 2), untouched
#   --build-only build the targets and stop (.ci/run builds them beside ctest, niced, and runs them after)
#   TARGET       some of the targets of tests/fuzz/targets.cmake (tests/fuzz/README.md), such as
#                golden_manifest, manifest_numbers, http_sglang, http_body (default: all)
#
# Corpora: BUILD/corpus/<target> grows across runs (new coverage found is kept); the seeds are
# rebuilt into BUILD/seeds/<target> every run. Per-target logs: BUILD/logs/<target>.log.
# Reproduce a finding: BUILD/tests/fuzz/fuzz_<target> BUILD/crashes/<file>
# Needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev; scripts/install-deps.sh --fuzz).
# Exit 0 when no target found anything, 1 for a finding or a failed build, 2 for a bad argument.
set -euo pipefail
source "$(dirname "$0")/lib/owned-dir.bash"
CALLER="$PWD"
cd "$(dirname "$0")/.."
SECONDS_PER=60
RUNS=-1
JOBS="$(nproc 2>/dev/null || echo 2)"
BUILD_ONLY=0
B=build-fuzz
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --build) B="$(cd "$CALLER" && owned_abs "$2")"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (expected --seconds, --runs, --jobs, --build, --build-only or a target name)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
for v in "$SECONDS_PER" "$JOBS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: expected a positive whole number, found '$v'" >&2; exit 2; }
done
[[ "$RUNS" =~ ^(-1|[1-9][0-9]*)$ ]] || { echo "fuzz.sh: --runs expects a positive whole number, found '$RUNS'" >&2; exit 2; }
# The build folder: DIR/seeds is deleted every run. A fuzz build of an earlier version of this
# script, from before the marker, is its own: only this script configures with DEGEN_FUZZ=ON.
made_before_marker() { grep -qx 'DEGEN_FUZZ:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null; }
owned_check "$B" scripts/fuzz.sh made_before_marker || exit 2

CXX="${FUZZ_CXX:-clang++}"
CC="${FUZZ_CC:-clang}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz.sh: $CXX not found: the fuzz targets need clang with libFuzzer (scripts/install-deps.sh --fuzz)" >&2
  exit 1
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     "$CXX" -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then
  echo "fuzz.sh: $CXX cannot link -fsanitize=fuzzer: install libFuzzer (Debian 12: libclang-rt-14-dev; scripts/install-deps.sh --fuzz)" >&2
  exit 1
fi

owned_mark "$B" scripts/fuzz.sh

t0=$(date +%s)
if [ ! -f "$B/CMakeCache.txt" ]; then
  CC="$CC" CXX="$CXX" cmake -S . -B "$B" -DDEGEN_FUZZ=ON -DDEGEN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 >/dev/null
fi
all=$(cat "$B/fuzz-targets.txt" 2>/dev/null || true)
[ -n "$all" ] || { cmake -S . -B "$B" >/dev/null; all=$(cat "$B/fuzz-targets.txt"); }
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets <<<"$all"
else
  for t in "${targets[@]}"; do
    grep -qxF -- "$t" <<<"$all" || { echo "fuzz.sh: unknown target '$t' (expected one of: $(echo $all))" >&2; exit 2; }
  done
fi
if ! cmake --build "$B" -j"$JOBS" --target $(printf 'fuzz_%s ' "${targets[@]}") >"$B/build.log" 2>&1; then
  tail -n 30 "$B/build.log" >&2
  echo "fuzz.sh: the fuzz build failed (whole log: $B/build.log)" >&2
  exit 1
fi
echo "fuzz: built ${#targets[@]} targets in $(($(date +%s) - t0)) s"
[ "$BUILD_ONLY" = 1 ] && exit 0

rm -rf "$B/seeds"
python3 tests/fuzz/make_seeds.py "$B/seeds"
mkdir -p "$B/corpus" "$B/crashes" "$B/logs"

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run_one() {
  local t="$1"
  mkdir -p "$B/corpus/$t"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: an input that makes the parser hold
  # 2 GiB is a finding (the documents are kilobytes to megabytes).
  "$B/tests/fuzz/fuzz_$t" "$B/corpus/$t" "$B/seeds/$t" -dict=tests/fuzz/json.dict -max_total_time="$SECONDS_PER" \
    -runs="$RUNS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$B/crashes/$t-" >"$B/logs/$t.log" 2>&1
  local rc=$?
  local execs cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$B/logs/$t.log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' "$B/logs/$t.log" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    printf 'fuzz: %-16s ok     %10s execs  %s\n' "$t" "${execs:-?}" "$cov"
  else
    printf 'fuzz: %-16s FAILED %10s execs  (exit %d; see %s)\n' "$t" "${execs:-?}" "$rc" "$B/logs/$t.log"
    grep -E '^fuzz: |ERROR: |runtime error|SUMMARY' "$B/logs/$t.log" | head -n 5 | sed 's/^/      /'
  fi
  return "$rc"
}
export -f run_one
export B SECONDS_PER RUNS
t1=$(date +%s)
# Each name is run_one's argument, never part of the command text.
if printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one "$1"' run_one {}; then
  echo "fuzz: ${#targets[@]} targets, ${SECONDS_PER} s each, no finding ($(($(date +%s) - t1)) s)"
else
  echo "fuzz: FAILED: a target found a crash, a sanitizer report, a hang or an exception that is not a degen::Error" \
       "(inputs in $B/crashes, logs in $B/logs)" >&2
  exit 1
fi
