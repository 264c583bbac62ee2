#!/usr/bin/env bash
# The GPU check of the CUDA backend, in one run on a machine with the CUDA toolkit and a GPU:
#   1. configure and build degenbisect and the GPU tests for the local GPU (compute capability read
#      with nvidia-smi, else "native");
#   2. run the GPU tests (tests/cuda: every op against the CPU — the GDN core (conv1d, chunked and
#      recurrent delta rule) included —, the device sampler, MTP on backend=cuda, end to end compare
#      of the tiny models); then the tensor-parallel tests (tp=2 over NCCL), which need two GPUs and
#      are reported as skipped with fewer;
#   3. `compare` of the four shipped tiny models on backend=cuda against golden/<model>/smoke (a
#      committed record without noise floors is first regenerated with floors into the work folder),
#      plus attn=flash, attn=splitkv, gemm=simple, gdn=recurrent and gdn=fla on one model, and two planted faults
#      (an attention one and a GDN one) that must be caught; the GPU reference (precision=ref) of each
#      model at the fp32 class, and a golden record made by it, checked by the CPU spot check;
#   4. `bench --backend cuda --synthetic qwen36-27b` (random weights made on the device, all 64
#      layers unless $BENCH_LAYERS): issue 10's figures first — batch-1 decode (no MTP) as a fraction
#      of the memory-bandwidth floor, with plain launches and as CUDA graphs, prefill tokens/s of a
#      2048-token prompt and the GDN core's share of it, mtp=3 — then batch-16 throughput with
#      128-token prompts; then decode attention under each algorithm (naive, flash, splitkv,
#      grouped) at BENCH_ATTN_CTX keys (default 8192 on a GPU, 300 on the emulator), the timing
#      that decides whether attn=grouped becomes the GPU decode default;
#   5. a short summary table, printed LAST.
# Usage: scripts/gpu-check.sh [LOGDIR]   full logs (build.log, cuda-tests.log, compare.log, bench.log,
#        bench-b16.log, bench-attn.log, bench-gdn.log, summary.txt) go to LOGDIR when given, else to a temporary folder.
# Needs nothing beyond a CUDA toolkit, CMake and a C++ compiler: when the system lacks Eigen, CLI11,
# nlohmann-json, doctest or utf8proc, stage them first on a machine that has them
# (scripts/stage-device-deps.sh writes .devdeps/, which this script uses when present).
# Environment: CUDA_ARCH (e.g. 90; default: the GPU's compute capability), BUILD_DIR (default
# build-gpu), BENCH_LAYERS (default 0: the whole 27B; N > 0 keeps its first N layers), JOBS, DEADLINE
# (seconds, default 450: a step that would start after it is skipped and each step's timeout is cut
# so that the summary is printed in time).
# GPU_CHECK_EMU=1: a dry run of this script on the CPU emulator of the CUDA runtime (tests/emu), on a
# machine without a GPU: the same steps with degenbisect-emu and degen_cuda_emu_tests, the bench on
# BENCH_PRESET (default tiny-qwen35 there, qwen36-27b on a GPU) with BENCH_PREFILL prompt tokens
# (default 128 there, 2048 on a GPU). It checks the script, not a GPU:
# its timings are CPU timings and its rows say EMULATOR.
# Designed to finish in under 8 minutes on one H200.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
logdir="${1:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
work="$(mktemp -d /tmp/gpu-check-work.XXXXXX)"
trap 'rm -rf "$work"' EXIT
t_start=$(date +%s)
jobs="${JOBS:-$(nproc)}"
bench_layers="${BENCH_LAYERS:-0}"
emu="${GPU_CHECK_EMU:-0}"
if [ "$emu" = 1 ]; then
  bench_preset="${BENCH_PRESET:-tiny-qwen35}"
  bench_prefill="${BENCH_PREFILL:-128}"  # the emulator is slow at long prefills
  attn_ctx="${BENCH_ATTN_CTX:-300}"
  tag=" [EMULATOR]"
else
  bench_preset="${BENCH_PRESET:-qwen36-27b}"
  bench_prefill="${BENCH_PREFILL:-2048}"
  attn_ctx="${BENCH_ATTN_CTX:-8192}"
  tag=""
fi
deadline=$(( t_start + ${DEADLINE:-450} ))
# seconds a step may take: its own limit, cut to what is left before the deadline (minus a reserve)
budget() { local left=$(( deadline - $(date +%s) - 15 )); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
summary="$logdir/summary.txt"
: > "$summary"
row() { printf '%-50s %s\n' "$1" "$2" >> "$summary"; }
elapsed() { echo $(( $(date +%s) - $1 )); }
finish() {
  row "total" "$(elapsed "$t_start") s"
  echo
  if [ "$emu" = 1 ]; then
    echo "== gpu-check DRY RUN on the CUDA emulator (not a GPU; timings are CPU timings) — logs in $logdir =="
  else
    echo "== gpu-check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)) — logs in $logdir =="
  fi
  cat "$summary"
  exit "${1:-0}"
}

# ---- dependencies staged for a bare machine ----
cmake_extra=()
if [ -d .devdeps/usr ]; then
  arch_dir="$(ls -d .devdeps/usr/lib/*-linux-gnu 2>/dev/null | head -1)"
  cmake_extra+=("-DCMAKE_PREFIX_PATH=$root/.devdeps/usr")
  export PKG_CONFIG_PATH="$root/$arch_dir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$root/$arch_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
command -v ninja >/dev/null && cmake_extra+=(-G Ninja)
cc="${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')}"
[ -n "$cc" ] || cc=native
[ "$emu" = 1 ] && [ "$cc" = native ] && cc=90  # no GPU for "native" to probe
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"

# ---- 1. build ----
t0=$(date +%s)
if [ "$emu" = 1 ]; then
  build="${BUILD_DIR:-build-emu-check}"; exe=degenbisect-emu; tests_exe=degen_cuda_emu_tests
else
  build="${BUILD_DIR:-build-gpu}"; exe=degenbisect; tests_exe=degen_cuda_tests
fi
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDEGEN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
     "${cmake_extra[@]}" > "$logdir/build.log" 2>&1 &&
   cmake --build "$build" -j"$jobs" --target "$exe" "$tests_exe" >> "$logdir/build.log" 2>&1; then
  row "build (sm_$cc, $jobs jobs)$tag" "ok ($(elapsed "$t0") s)"
else
  row "build (sm_$cc)" "FAILED ($(elapsed "$t0") s): see build.log"
  tail -30 "$logdir/build.log"
  finish 1
fi
bin="$root/$build/$exe"
"$bin" devices > "$logdir/devices.txt" 2>&1
dev_rc=$?
row "device$tag" "$(head -1 "$logdir/devices.txt")"
rm -f "$logdir/devices.txt"
if [ "$dev_rc" != 0 ]; then
  row "GPU steps" "skipped: no usable CUDA device (the CUDA code is built, not run)"
  finish 125
fi

# ---- 2. GPU tests ----
t0=$(date +%s)
# the op tests first, then the end-to-end ones (slower), each under its own time limit
(cd "$build/tests" && timeout "$(budget 150)" ./$tests_exe -tce='cuda e2e*,tp cuda*') > "$logdir/cuda-tests.log" 2>&1
rc=$?
cases="$(grep -E '^\[doctest\] test cases:' "$logdir/cuda-tests.log" | tail -1 | sed 's/\[doctest\] //')"
row "GPU op tests ($tests_exe)" "exit $rc; ${cases:-no summary}; $(elapsed "$t0") s"
t0=$(date +%s)
(cd "$build/tests" && timeout "$(budget 150)" ./$tests_exe -tc='cuda e2e*') >> "$logdir/cuda-tests.log" 2>&1
rc=$?
cases="$(grep -E '^\[doctest\] test cases:' "$logdir/cuda-tests.log" | tail -1 | sed 's/\[doctest\] //')"
row "GPU e2e tests ($tests_exe)" "exit $rc; ${cases:-no summary}; $(elapsed "$t0") s"
# tensor parallelism over NCCL: needs two GPUs; the test binary exits 77 (skipped) with fewer
t0=$(date +%s)
(cd "$build/tests" && timeout "$(budget 120)" ./$tests_exe -tc='tp cuda*') > "$logdir/cuda-tp-tests.log" 2>&1
rc=$?
if [ "$rc" = 77 ]; then
  row "GPU tensor-parallel tests (tp=2, NCCL)" "skipped: $(grep -m1 '^skipped:' "$logdir/cuda-tp-tests.log" | cut -c10-90)"
else
  cases="$(grep -E '^\[doctest\] test cases:' "$logdir/cuda-tp-tests.log" | tail -1 | sed 's/\[doctest\] //')"
  row "GPU tensor-parallel tests (tp=2, NCCL)" "exit $rc; ${cases:-no summary}; $(elapsed "$t0") s"
fi
ops_ok=$(grep -c '^op-check .* ok$' "$logdir/cuda-tests.log")
ops_bad=$(grep -c '^op-check .* FAIL$' "$logdir/cuda-tests.log")
row "  op checks vs cpu:bf16 (NMSE within limit)" "$ops_ok ok, $ops_bad FAIL"
worst="$(grep '^op-check' "$logdir/cuda-tests.log" | awk '{for(i=1;i<=NF;i++) if($i=="nmse(vs") {v=$(i+2); print v, $0; break}}' \
  | sort -g -r | head -1 | cut -d' ' -f1)"
row "  largest op NMSE vs cpu:bf16" "${worst:-n/a}"
grep '^e2e-check' "$logdir/cuda-tests.log" | while read -r _ m rest; do row "  e2e $m" "$(echo "$rest" | cut -c1-90)"; done
grep '^graph-check' "$logdir/cuda-tests.log" | while read -r _ m cfg rest; do row "  graphs $m $cfg" "$(echo "$rest" | cut -c1-100)"; done

# ---- 3. compare of the shipped models on backend=cuda ----
# Whether a record holds the bf16-class noise floors a GPU path is judged with (manifest of either
# format: noise_floors.classes.bf16.measured, or the older noise_floors.status).
has_bf16_floors() {
  if command -v python3 >/dev/null; then
    python3 - "$1/manifest.json" <<'PY'
import json, sys
try:
    nf = json.load(open(sys.argv[1])).get("noise_floors", {})
except Exception:
    sys.exit(1)
c = nf.get("classes", {}).get("bf16")
sys.exit(0 if (c.get("measured") if isinstance(c, dict) else nf.get("status") == "measured") else 1)
PY
  else
    ! grep -q '"absent"' "$1/manifest.json"
  fi
}
t0=$(date +%s)
: > "$logdir/compare.log"
for m in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next; do
  "$bin" -q synth --preset "$m" --out "$work/$m" >> "$logdir/compare.log" 2>&1
  rec="golden/$m/smoke"
  if ! has_bf16_floors "$rec"; then
    echo "== $m: the committed record has no noise floors; regenerating it with floors" >> "$logdir/compare.log"
    timeout "$(budget 60)" "$bin" -q golden --model "$work/$m" --cases cases/smoke.json --out "$work/golden-$m" --positions 32 \
      >> "$logdir/compare.log" 2>&1
    rec="$work/golden-$m"
    note=" (record regenerated with floors)"
  else
    note=""
  fi
  run_compare() {  # CONFIG LABEL EXPECT [compare options]
    local lim; lim=$(budget 60)
    if [ "$lim" -le 5 ]; then row "compare $m $2" "skipped: DEADLINE reached"; return; fi
    echo "== compare $m --config $1 ${*:4}" >> "$logdir/compare.log"
    timeout "$lim" "$bin" -q compare --golden "$rec" --model "$work/$m" --config "$1" "${@:4}" >> "$logdir/compare.log" 2>&1
    local rc=$?
    local v; v="$(grep -E '^verdict' "$logdir/compare.log" | tail -1 | cut -c10-70)"
    local mark=""; [ "$rc" = "$3" ] || mark="  <-- expected exit $3"
    row "compare $m $2" "exit $rc: ${v:-?}$note$mark"
  }
  run_compare backend=cuda "backend=cuda" 0
  run_compare backend=cuda,precision=ref "precision=ref (the GPU reference, fp32 class)" 0
  if [ "$m" = tiny-qwen35 ] || [ "$m" = tiny-qwen35-moe ]; then
    run_compare backend=cuda,graphs=on "graphs=on" 0
  fi
  if [ "$m" = tiny-qwen35 ]; then
    run_compare backend=cuda,attn=flash "attn=flash (prefill passes)" 0 --no-decode
    run_compare backend=cuda,attn=splitkv "attn=splitkv" 0
    run_compare backend=cuda,gemm=simple "gemm=simple (prefill passes)" 0 --no-decode
    run_compare backend=cuda,gdn=recurrent "gdn=recurrent" 0
    run_compare backend=cuda,gdn=fla "gdn=fla (tensor cores)" 0
    run_compare backend=cuda,fault=rope-interleaved@3 "fault=rope-interleaved@3" 1 --no-decode
    run_compare backend=cuda,fault=gdn-read-before-decay@0 "fault=gdn-read-before-decay@0" 1 --no-decode
    # a golden record made by the GPU reference, checked by the CPU spot check before it is written
    lim=$(budget 90)
    if [ "$lim" -gt 5 ]; then
      echo "== golden --config backend=cuda,precision=ref --floors-config backend=cuda" >> "$logdir/compare.log"
      timeout "$lim" "$bin" golden --model "$work/$m" --cases cases/smoke.json --out "$work/gpu-ref" \
        --config backend=cuda,precision=ref --floors-config backend=cuda --floor-classes bf16 >> "$logdir/compare.log" 2>&1
      rc=$?
      v="$(grep -E 'CPU spot check' "$logdir/compare.log" | tail -1 | cut -c9-120)"
      mark=""; [ "$rc" = 0 ] || mark="  <-- expected exit 0"
      row "golden $m on the GPU reference" "exit $rc: ${v:-?}$mark"
    else
      row "golden $m on the GPU reference" "skipped: DEADLINE reached"
    fi
  fi
done
row "  compare time" "$(elapsed "$t0") s"

# ---- 4. benchmark ----
layers_opt=()
layers_label="all layers"
if [ "$bench_layers" -gt 0 ]; then layers_opt=(--layers "$bench_layers"); layers_label="first $bench_layers layers"; fi
bench_rows() {  # LOG: summary rows of the prefill / decode lines
  grep -E '^(prefill|decode|decode-g) ' "$1" | while read -r ph b tok s tps step gms gpc gb floor; do
    if [ "$ph" = prefill ]; then
      row "  prefill batch $b ($tok tok)" "$tps tok/s, GDN core $gms ms = $gpc of a timed prefill"
    elif [ "$ph" = decode ]; then
      row "  decode batch $b (no MTP)" "$tps tok/s, step $step ms, $gb GB/step, $floor of the bandwidth floor"
    else
      row "  decode batch $b, graphs=on" "$tps tok/s, step $step ms, $gb GB/step, $floor of the bandwidth floor"
    fi
  done
  grep -E '^graphs ' "$1" | cut -c10-200 | while read -r l; do row "  graphs" "$l"; done
  # the decode fraction of the nominal bandwidth floor (4.8 TB/s on an H200) and the prefill MFU
  grep -E '^(peak|mfu) ' "$1" | cut -c10-240 | while read -r l; do row "  nominal" "$l"; done
}
t0=$(date +%s)
lim=$(budget 150)
if [ "$lim" -gt 10 ]; then
  timeout "$lim" "$bin" bench --backend cuda --synthetic "$bench_preset" "${layers_opt[@]}" --prefill "$bench_prefill" --decode 16 \
    --batch 1 --mtp 3 --graphs > "$logdir/bench.log" 2>&1
  rc=$?
  row "bench $bench_preset ($layers_label), $bench_prefill-token prompt$tag" "exit $rc ($(elapsed "$t0") s)"
  grep -E '^probe' "$logdir/bench.log" | cut -c10-150 | while read -r l; do row "  probe" "$l"; done
  bench_rows "$logdir/bench.log"
  grep -E '^mtp ' "$logdir/bench.log" | cut -c10-200 | while read -r l; do row "  mtp=3 (random MTP head)" "$l"; done
else
  row "bench $bench_preset, $bench_prefill-token prompt" "skipped: DEADLINE reached"
fi
t0=$(date +%s)
lim=$(budget 120)
if [ "$lim" -gt 10 ]; then
  timeout "$lim" "$bin" bench --backend cuda --synthetic "$bench_preset" "${layers_opt[@]}" --prefill 128 --decode 8 \
    --batch 16 > "$logdir/bench-b16.log" 2>&1
  rc=$?
  row "bench $bench_preset ($layers_label), batch 16$tag" "exit $rc ($(elapsed "$t0") s)"
  bench_rows "$logdir/bench-b16.log"
else
  row "bench qwen36-27b, batch 16" "skipped: DEADLINE reached"
fi
# decode attention under each algorithm at a long context (the figure that decides whether
# attn=grouped, FlashInfer-style, becomes the GPU's decode default)
t0=$(date +%s)
lim=$(budget 60)
if [ "$lim" -gt 10 ]; then
  timeout "$lim" "$bin" bench --backend cuda --synthetic "$bench_preset" --layers 4 --ops --prefill "$attn_ctx" \
    --filter "attention decode" > "$logdir/bench-attn.log" 2>&1
  rc=$?
  row "bench $bench_preset decode attention, context $attn_ctx$tag" "exit $rc ($(elapsed "$t0") s)"
  grep -E '^attention decode' "$logdir/bench-attn.log" | cut -c1-200 | while read -r l; do row "  op" "$l"; done
else
  row "bench decode attention" "skipped: DEADLINE reached"
fi
# the GDN core of a prefill: chunked (fp32 intermediates, scalar) against fla (tensor cores), the
# figure that decides whether gdn=fla becomes the GPU's prefill default
t0=$(date +%s)
lim=$(budget 45)
if [ "$lim" -gt 10 ]; then
  timeout "$lim" "$bin" bench --backend cuda --synthetic "$bench_preset" --layers 4 --ops --prefill "$bench_prefill" \
    --filter "gdn prefill" > "$logdir/bench-gdn.log" 2>&1
  rc=$?
  row "bench $bench_preset GDN prefill, $bench_prefill rows$tag" "exit $rc ($(elapsed "$t0") s)"
  grep -E '^gdn prefill' "$logdir/bench-gdn.log" | cut -c1-200 | while read -r l; do row "  op" "$l"; done
else
  row "bench GDN prefill" "skipped: DEADLINE reached"
fi
finish 0
