#!/usr/bin/env bash
# The CPU reference beside llama.cpp on the same checkpoint, interleaved, in one run (issue 45): a
# synthetic preset written once, converted by llama.cpp's own converter to an f32 and a bf16 GGUF,
# and then, for each repetition and each thread count in turn, our `bench --backend cpu` (once per
# forced ISA, and the --before binary) and llama.cpp's `llama-bench` built for this machine and as
# the tests build it. Prints each configuration's median tokens/s and the ratios within each
# repetition, then the 27B's `golden --plan` (ours, and --before's). A benchmark, not a test: it
# fails nothing; a part that cannot run (no torch, a failed build) is reported and left out.
#
#   scripts/bench-cpu-vs-llama.sh [--threads "1 2"] [--reps N] [--prefill N] [--decode N] [--preset NAME]
#                                 [--model DIR] [--bin BIN] [--before BIN] [--isa "auto baseline avx2 avx512"]
#                                 [--plan-model DIR|none] [--plan-args "ARGS"]
#
#   --threads LIST     thread counts, each measured for every engine (default: "1 NPROC")
#   --reps N           repetitions of the whole interleaved round; medians over them (default 3)
#   --prefill N        prompt tokens (ours --prefill, llama-bench -p; default 128)
#   --decode N         generated tokens (ours --decode, llama-bench -n; default 8)
#   --preset NAME      the synthetic checkpoint (default bench-1b, 2 GB bf16), written once to
#                      build/bench-cpu-vs-llama/NAME and reused; a folder there that this script
#                      did not write (no .degenbisect-made-by, scripts/lib/owned-dir.bash, nor
#                      NAME.done beside it) is refused (exit 2), untouched
#   --model DIR        measure this checkpoint instead of a preset (HF layout, llama.cpp must convert it)
#   --bin BIN          our degenbisect binary (default build/degenbisect)
#   --before BIN       another degenbisect binary (an older commit's build) in the same loop, at its
#                      own ISA choice: before/after ratios from one run
#   --isa LIST         our runs, one per word: auto (the binary's own choice) or a DEGEN_CPU_ISA value
#                      forced through the environment: baseline, avx2, avx512 (default: auto)
#   --plan-model DIR   the 27B for `golden --plan` (e.g. `synth --preset qwen36-27b --weights sharded`,
#                      which adds the storage probe); default: the config-only folder of qwen36-27b
#                      (plans need no weights: bf16 assumed); none: no plan
#   --plan-args ARGS   more options of golden --plan, e.g. "--memory-gb 128" (plan as if the weights
#                      fitted in the page cache) or "--storage-gbps 2"; without them a 27B that does
#                      not fit here is planned as computing time plus reads at an unmeasured rate
#
# Everything goes under build/bench-cpu-vs-llama/: the checkpoint, the GGUFs, the run's log
# (bench-STAMP.log, all that is printed) and each command's own output (runs-STAMP/). llama.cpp is
# built by scripts/build-llama-cpp.sh into build/llama.cpp-native (--native: GGML_NATIVE=ON, -O3,
# OpenMP) and build/llama.cpp-bench-portable (the tests' flags: GGML_NATIVE=OFF, i.e. AVX2+FMA,
# -O1, no OpenMP); the first run builds both (tens of minutes on 2 cores). The converter needs torch
# and numpy (scripts/install-deps.sh --hf). Exit 0 after a run, 1 when it cannot run at all (no
# degenbisect binary, no python3), 2 for a bad option. Paths given (--model, --bin, --before,
# --plan-model) are relative to the folder the script is run from.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/lib/owned-dir.bash"
NPROC="$(nproc 2>/dev/null || echo 1)"
THREADS="1 $NPROC"
[ "$NPROC" = 1 ] && THREADS="1"
REPS=3
PREFILL=128
DECODE=8
PRESET=bench-1b
MODEL=""
BEFORE=""
ISAS="auto"
PLAN_MODEL=""
PLAN_ARGS=""
BIN="$ROOT/build/degenbisect"
W="$ROOT/build/bench-cpu-vs-llama"

usage() { sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; }
bad() { echo "bench-cpu-vs-llama.sh: $*" >&2; exit 2; }
positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || bad "$1 '$2': expected a positive integer"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --threads|--reps|--prefill|--decode|--preset|--model|--bin|--before|--isa|--plan-model|--plan-args)
      [ $# -ge 2 ] || bad "$1 needs a value" ;;&
    --threads)
      for t in $2; do positive --threads "$t"; done
      [ -n "${2// /}" ] || bad "--threads '': expected thread counts such as \"1 2\""
      THREADS="$2"; shift 2 ;;
    --reps) positive --reps "$2"; REPS="$2"; shift 2 ;;
    --prefill) positive --prefill "$2"; PREFILL="$2"; shift 2 ;;
    --decode) positive --decode "$2"; DECODE="$2"; shift 2 ;;
    --preset) [[ "$2" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || bad "--preset '$2': expected a preset name (degenbisect synth --list)"
      PRESET="$2"; shift 2 ;;
    --model) [ -f "$2/config.json" ] || bad "--model '$2': no config.json there"
      MODEL="$(cd "$2" && pwd)"; shift 2 ;;
    --bin|--before) { [ -x "$2" ] && [ -f "$2" ]; } || bad "$1 '$2': not an executable file"
      b="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
      if [ "$1" = --bin ]; then BIN="$b"; else BEFORE="$b"; fi
      shift 2 ;;
    --isa)
      for i in $2; do
        case "$i" in auto|baseline|avx2|avx512) ;; *) bad "--isa '$i': expected auto, baseline, avx2 or avx512" ;; esac
      done
      [ -n "${2// /}" ] || bad "--isa '': expected auto, baseline, avx2 or avx512"
      ISAS="$2"; shift 2 ;;
    --plan-model)
      [ "$2" = none ] || [ -f "$2/config.json" ] || bad "--plan-model '$2': no config.json there (or none)"
      PLAN_MODEL="$2"; [ "$2" = none ] || PLAN_MODEL="$(cd "$2" && pwd)"; shift 2 ;;
    --plan-args) [[ "$2" =~ ^-- ]] || bad "--plan-args '$2': expected options of golden --plan such as \"--memory-gb 128\""
      PLAN_ARGS="$2"; shift 2 ;;
    *) bad "unknown argument '$1' (expected --threads, --reps, --prefill, --decode, --preset, --model, --bin, --before, --isa, --plan-model, --plan-args or --help)" ;;
  esac
done
cd "$ROOT" || exit 1
# The preset's folder is rewritten when unfinished: only when this script wrote it (its marker, or the
# NAME.done of an earlier version of the script beside it).
preset_done_before_marker() { [ -f "$1.done" ]; }
[ -n "$MODEL" ] || owned_check "$W/$PRESET" scripts/bench-cpu-vs-llama.sh preset_done_before_marker || exit 2

[ -x "$BIN" ] || { echo "bench-cpu-vs-llama.sh: no $BIN (make build, or give --bin)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench-cpu-vs-llama.sh: python3 is needed" >&2; exit 1; }
mkdir -p "$W"
STAMP="$(date +%Y%m%d-%H%M%S)"
LOG="$W/bench-$STAMP.log"
RAW="$W/runs-$STAMP"
mkdir -p "$RAW"
: >"$LOG"
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
progress() { printf 'bench-cpu-vs-llama: %s\n' "$*" | tee -a "$LOG" >&2; }
RESULTS="$RAW/results.tsv"  # rep, threads, config key, label, prefill tok/s, decode tok/s, read %, isa line

# 1. The run's circumstances: figures on a shared machine mean little without them.
describe_machine() {
  say "# bench-cpu-vs-llama $STAMP: prefill $PREFILL, decode $DECODE, threads {$THREADS}, $REPS reps, isa {$ISAS}"
  say "# machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'), $NPROC cores," \
    "$(awk '/MemTotal/ {printf "%.0f GB", $2 / 1e6}' /proc/meminfo); ISA flags:" \
    "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_bf16|amx_tile' | paste -sd' ')"
  say "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  say "# degenbisect: $BIN ($("$BIN" --version 2>/dev/null | paste -sd";" - | sed "s/;/; /g")), tree $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' + uncommitted src changes')"
  [ -z "$BEFORE" ] || say "# before: $BEFORE ($("$BEFORE" --version 2>/dev/null | paste -sd";" - | sed "s/;/; /g"))"
}

# 2. The checkpoint: the preset written once (a marker beside it says it was finished).
prepare_model() {
  if [ -n "$MODEL" ]; then NAME="model-$(basename "$MODEL")"; return 0; fi
  NAME="$PRESET"
  MODEL="$W/$PRESET"
  [ -f "$W/$PRESET.done" ] && [ -f "$MODEL/config.json" ] && return 0
  progress "writing preset $PRESET to $MODEL (once; reused by later runs)"
  owned_fresh "$MODEL" scripts/bench-cpu-vs-llama.sh preset_done_before_marker || exit 2
  rm -f "$W/$PRESET.done"
  "$BIN" synth --preset "$PRESET" --out "$MODEL" >"$RAW/synth.log" 2>&1 || {
    progress "synth --preset $PRESET failed: $(tail -1 "$RAW/synth.log") (all in $RAW/synth.log): nothing to measure"
    exit 1
  }
  touch "$W/$PRESET.done"
}

# 3. llama.cpp twice, each with llama-bench: for this machine, and with the tests' flags.
LLAMA_NATIVE=""
LLAMA_PORTABLE=""
build_llama() {
  progress "llama.cpp --native in build/llama.cpp-native (the first build takes tens of minutes on 2 cores)"
  if scripts/build-llama-cpp.sh --native >"$W/build-native.log" 2>&1; then
    LLAMA_NATIVE="$ROOT/build/llama.cpp-native/build/bin/llama-bench"
    progress "$(grep -E 'already built|built llama' "$W/build-native.log" | tail -1)"
  else
    progress "llama.cpp --native build failed (see $W/build-native.log): its rows are left out"
  fi
  progress "llama.cpp as the tests build it in build/llama.cpp-bench-portable"
  if scripts/build-llama-cpp.sh --dir build/llama.cpp-bench-portable --targets llama-bench \
    >"$W/build-portable.log" 2>&1; then
    LLAMA_PORTABLE="$ROOT/build/llama.cpp-bench-portable/build/bin/llama-bench"
    progress "$(grep -E 'already built|built llama' "$W/build-portable.log" | tail -1)"
  else
    progress "llama.cpp portable build failed (see $W/build-portable.log): its rows are left out"
  fi
  [ -z "$LLAMA_NATIVE" ] || say "# llama.cpp native: $(cat build/llama.cpp-native/ENGINE)"
  [ -z "$LLAMA_PORTABLE" ] || say "# llama.cpp portable: $(cat build/llama.cpp-bench-portable/ENGINE)"
}

# 4. The GGUFs, by llama.cpp's own converter (tools/convert_gguf.py), redone when the checkpoint is
# newer; written under a temporary name so that an interrupted conversion is never reused.
GGUF_F32=""
GGUF_BF16=""
convert() {  # outtype -> path on stdout, or nothing
  local type="$1" out="$W/$NAME.$1.gguf" src
  if [ -f "$out" ] && [ -z "$(find "$MODEL" -type f -newer "$out" | head -1)" ]; then echo "$out"; return 0; fi
  src="$ROOT/build/llama.cpp-native/src"
  [ -f "$src/convert_hf_to_gguf.py" ] || src="$ROOT/build/llama.cpp/src"
  progress "converting $MODEL to $out ($type, llama.cpp's converter from $src)"
  rm -f "$out" "$out.tmp"
  if python3 tools/convert_gguf.py "$MODEL" "$out.tmp" --outtype "$type" --llama "$src" >"$W/convert-$type.log" 2>&1 &&
    mv "$out.tmp" "$out"; then
    echo "$out"
  else
    rm -f "$out.tmp"
    progress "conversion to $type failed (see $W/convert-$type.log; it needs torch and numpy: scripts/install-deps.sh --hf)"
  fi
}
convert_ggufs() {
  if [ -z "$LLAMA_NATIVE$LLAMA_PORTABLE" ]; then return 0; fi
  if ! python3 -c 'import torch, numpy' 2>/dev/null; then
    progress "no torch/numpy for llama.cpp's converter (scripts/install-deps.sh --hf): the llama.cpp rows are left out"
    return 0
  fi
  GGUF_F32="$(convert f32)"
  [ -z "$LLAMA_NATIVE" ] || GGUF_BF16="$(convert bf16)"
}

# 5. One measurement: a configuration's command, its output kept, its figures appended to RESULTS.
# Ours: the first "N tok/s" on the lines led by prefill and decode, and decode's streaming-read
# fraction; llama-bench: avg_ts of its prompt and generation tests (-o jsonl).
first_rate() {  # word file: the first "N tok/s" on the first line led by word
  awk -v w="$1" '$1 == w && match($0, /[0-9.]+ tok\/s/) {print substr($0, RSTART, RLENGTH - 6); exit}' "$2"
}
measure_ours() {  # rep threads key label bin isa
  local out="$RAW/$1-t$2-$3.txt" pre dec rd isa threads
  local env=(OMP_NUM_THREADS="$2")
  [ "$6" = auto ] || env+=(DEGEN_CPU_ISA="$6")
  env "${env[@]}" "$5" bench --backend cpu --model "$MODEL" --prefill "$PREFILL" --decode "$DECODE" >"$out" 2>&1 ||
    progress "$4 at $2 threads exited $? (see $out)"
  pre="$(first_rate prefill "$out")"
  dec="$(first_rate decode "$out")"
  rd="$(awk '$1 == "decode" && match($0, /[0-9.]+% of the streaming-read rate/) {print substr($0, RSTART, index(substr($0, RSTART), "%") - 1); exit}' "$out")"
  isa="$(awk '$1 == "isa" {$1 = ""; sub(/^ +/, ""); print; exit}' "$out")"
  threads="$(awk '$1 == "backend" {for (i = 2; i <= NF; i++) if ($i ~ /^threads/) print $(i - 1)}' "$out")"
  [ -z "$threads" ] || [ "$threads" = "$2" ] || progress "$4: asked for $2 threads, its bench says $threads"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${pre:-NA}" "${dec:-NA}" "${rd:-NA}" "$isa" >>"$RESULTS"
}
measure_llama() {  # rep threads key label llama-bench gguf
  local out="$RAW/$1-t$2-$3.jsonl" figures
  "$5" -m "$6" -p "$PREFILL" -n "$DECODE" -t "$2" -r 1 -o jsonl >"$out" 2>"$out.stderr" ||
    progress "$4 at $2 threads exited $? (see $out.stderr)"
  figures="$(python3 - "$out" <<'PY'
import json, sys
pre = dec = "NA"
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
        pre = "%.3f" % r["avg_ts"]
    elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
        dec = "%.3f" % r["avg_ts"]
print(pre + "\t" + dec)
PY
)"
  printf '%s\t%s\t%s\t%s\t%s\tNA\t\n' "$1" "$2" "$3" "$4" "${figures:-NA	NA}" >>"$RESULTS"
}

# The configurations of one round, as "key|label|kind|binary|isa-or-gguf".
CONFIGS=()
list_configs() {
  local i
  for i in $ISAS; do
    if [ "$i" = auto ]; then CONFIGS+=("ours|degenbisect|ours|$BIN|auto")
    else CONFIGS+=("ours-$i|degenbisect DEGEN_CPU_ISA=$i|ours|$BIN|$i"); fi
  done
  [ -z "$BEFORE" ] || CONFIGS+=("before|degenbisect --before|ours|$BEFORE|auto")
  if [ -n "$GGUF_F32" ]; then
    [ -z "$LLAMA_NATIVE" ] || CONFIGS+=("llama-native-f32|llama.cpp native, f32 GGUF|llama|$LLAMA_NATIVE|$GGUF_F32")
    [ -z "$LLAMA_PORTABLE" ] ||
      CONFIGS+=("llama-portable-f32|llama.cpp as the tests build it, f32 GGUF|llama|$LLAMA_PORTABLE|$GGUF_F32")
  fi
  [ -z "$GGUF_BF16" ] || [ -z "$LLAMA_NATIVE" ] ||
    CONFIGS+=("llama-native-bf16|llama.cpp native, bf16 GGUF|llama|$LLAMA_NATIVE|$GGUF_BF16")
}

# Interleaved: every configuration once per round and thread count, the starting configuration
# rotated each round, so that a slow spell of the shared machine falls on all of them alike.
measure_all() {
  local rep t j n=${#CONFIGS[@]} key label kind bin arg
  for ((rep = 1; rep <= REPS; rep++)); do
    for t in $THREADS; do
      for ((j = 0; j < n; j++)); do
        IFS='|' read -r key label kind bin arg <<<"${CONFIGS[$(((j + rep - 1) % n))]}"
        progress "round $rep/$REPS, threads $t: $label"
        if [ "$kind" = ours ]; then measure_ours "$rep" "$t" "$key" "$label" "$bin" "$arg"
        else measure_llama "$rep" "$t" "$key" "$label" "$bin" "$arg"; fi
      done
    done
  done
}

# 6. Per thread count: each configuration's medians, then ours against each other engine as the
# median over the rounds of the ratio within the round (the two ran minutes apart, not hours).
summarise() {
  python3 - "$RESULTS" <<'PY' | tee -a "$LOG"
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
num = lambda s: float(s) if s not in ("", "NA") else None
by = {}  # (threads, key) -> {rep: (prefill, decode, read%)}
labels, isa, order = {}, {}, []
for rep, t, key, label, pre, dec, rd, isa_line in (r + [""] * (8 - len(r)) for r in rows):
    by.setdefault((int(t), key), {})[rep] = (num(pre), num(dec), num(rd))
    labels[key] = label
    if isa_line and key not in isa:
        isa[key] = isa_line
    if key not in order:
        order.append(key)
first = list(order)
order.sort(key=lambda k: (not k.startswith("ours"), k != "before", first.index(k)))
fmt = lambda v, f: ("%" + f) % v if v is not None else "-"

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None

def ratio(t, a, b, i):
    """median and range over the rounds of a's figure i / b's in the same round"""
    ra, rb = by.get((t, a), {}), by.get((t, b), {})
    rs = [ra[r][i] / rb[r][i] for r in ra if r in rb and ra[r][i] and rb[r][i]]
    if not rs:
        return "-"
    return "%.2fx [%.2f-%.2f]" % (statistics.median(rs), min(rs), max(rs)) if len(rs) > 1 else "%.2fx" % rs[0]

ours = [k for k in order if k.startswith("ours") or k == "before"]
others = [k for k in order if k not in ours] + (["before"] if "before" in ours else [])
short = {"ours": "ours", "before": "before", "llama-native-f32": "llama native f32",
         "llama-portable-f32": "llama tests' f32", "llama-native-bf16": "llama native bf16"}
name = lambda k: short.get(k, k.replace("ours-", "ours "))
for t in sorted({t for t, _ in by}):
    print()
    n = max(len(v) for (tt, _), v in by.items() if tt == t)
    print("threads %d: median tok/s over %d round%s" % (t, n, "" if n == 1 else "s"))
    print("  %-44s %10s %10s %12s" % ("", "prefill", "decode", "decode/read"))
    for k in order:
        if (t, k) not in by:
            continue
        v = by[(t, k)].values()
        rd = med([x[2] for x in v])
        print("  %-44s %10s %10s %12s" % (labels[k], fmt(med([x[0] for x in v]), ".1f"), fmt(med([x[1] for x in v]), ".2f"),
                                        fmt(rd, ".0f") + "%" if rd is not None else "-"))
    cols = [b for b in others if (t, b) in by]
    for i, what in ((0, "prefill"), (1, "decode")):
        print("  %s ratio, ours / the column: the median over the rounds of the ratio within a round [range]" % what)
        print("  %-15s" % "" + "".join("%19s" % name(b) for b in cols))
        for a in ours:
            if (t, a) in by:
                print("  %-15s" % name(a) + "".join("%19s" % ("" if a == b else ratio(t, a, b, i)) for b in cols))
if isa:
    print()
    for k in ours:
        if k in isa:
            print("isa line of %s: %s" % (labels[k], isa[k]))
print()
print("decode/read: our best decode step's weight bytes per second as a fraction of the streaming-read probe (our bench)")
print("llama-bench: prefill = its pp test, decode = its tg test at context 0; ours decodes after the prefill")
PY
}

# 7. The 27B's golden plan: a config-only folder is enough (the plan assumes bf16 weights and probes
# the reference's own matmul on the model's shapes); a real checkpoint adds the storage probe.
plan_27b() {
  [ "$PLAN_MODEL" = none ] && return 0
  local dir="$PLAN_MODEL" b tag extra
  if [ -z "$dir" ]; then
    dir="$W/qwen36-27b-config"
    if [ ! -f "$dir/config.json" ]; then
      rm -rf "$dir"
      "$BIN" synth --preset qwen36-27b --out "$dir" >"$RAW/synth-27b.log" 2>&1 ||
        { progress "synth --preset qwen36-27b (config only) failed (see $RAW/synth-27b.log): no plan"; return 0; }
    fi
  fi
  read -r -a extra <<<"$PLAN_ARGS"
  say ""
  say "27B golden --plan --model $dir --cases cases/smoke.json${extra[*]:+ ${extra[*]}} (${OMP_NUM_THREADS:-$NPROC} threads)"
  for tag in ours ${BEFORE:+before}; do
    b="$BIN"; [ "$tag" = ours ] || b="$BEFORE"
    progress "golden --plan ($tag)"
    "$b" golden --plan --model "$dir" --cases cases/smoke.json "${extra[@]}" >"$RAW/plan-$tag.txt" 2>&1 ||
      progress "golden --plan ($tag) exited $? (see $RAW/plan-$tag.txt)"
    say "  $tag ($b):"
    grep -E '^ *(golden plan|model|storage read|decode matmul|prefill matmul|page cache|estimate|REFUSED):' "$RAW/plan-$tag.txt" |
      sed 's/^ */    /' | tee -a "$LOG"
  done
}

describe_machine
prepare_model
build_llama
convert_ggufs
list_configs
measure_all
summarise
plan_27b
say "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); log $LOG, each command's output in $RAW"
exit 0
