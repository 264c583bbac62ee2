#!/usr/bin/env bash
# The CPU reference beside llama.cpp on the same checkpoint, interleaved, in one run: ours (once per
# forced ISA, and a --before binary) and llama-bench built for this machine and as the tests build it,
# medians and ratios per thread count, then the 27B's golden --plan. A benchmark, not a test. The
# program is tools/bench_cpu_vs_llama.py; this script runs it with the same options.
#
#   scripts/bench-cpu-vs-llama.sh [--threads "1 2"] [--reps N] [--prefill N] [--decode N] [--preset NAME]
#                                 [--model DIR] [--bin BIN] [--before BIN] [--isa "auto baseline avx2 avx512"]
#                                 [--plan-model DIR|none] [--plan-args "ARGS"]
#
# (--help for what each option does). Exit 0 after a run, 1 when it cannot run at all (no degenbisect
# binary, no python3), 2 for a bad option or a preset folder it did not write (scripts/lib/owned-dir.bash).
command -v python3 >/dev/null || { echo "bench-cpu-vs-llama.sh: python3 is needed" >&2; exit 1; }
DEGEN_SCRIPT_NAME=bench-cpu-vs-llama.sh exec python3 "$(dirname "$0")/../tools/bench_cpu_vs_llama.py" "$@"
