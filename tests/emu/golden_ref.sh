# The reference on the GPU (golden --config backend=cuda,precision=ref) on the CUDA emulator (a CPU
# stand-in, not a GPU), and its CPU spot check:
#  1. on the four shipped models, the GPU reference passes compare against the committed (CPU-made)
#     records at the fp32 class (3 x the fp32 noise floors), with cuBLAS and with gemm=simple;
#  2. a record made by the GPU reference (spot check passed, recorded in the manifest) passes
#     compare of the CPU reference at the fp32 class and of the bf16 GPU path at the bf16 class, also
#     made with tp=2 over the emulated NCCL;
#  3. a faulty GPU reference is refused by the spot check (a layer fault by the layer check, a
#     decode-path fault by the generation check, an MTP fault that changes nothing the record holds
#     by the faults rule): exit 1 and no record;
#  4. bad --config / --verify-* values: exit 128 with the reason.
# Arguments: degenbisect-emu SOURCE_DIR WORK_DIR.
# The records here are made from two cases of the smoke suite (repeated-pattern: the longest
# prompt, across the GDN chunk; sampled-story: sampled generation), not all seven: the GPU
# reference's numerics are the same code on every case, and the CPU tests make and check records of
# the whole suite (what this subset still catches: README, "Test suite: what it costs").
source "$2/tests/cli/lib.bash"
CASES="$WORK/smoke2.json"
python3 - "$SRC/cases/smoke.json" "$CASES" <<'PY' || fail "could not write the two-case suite"
import json, sys
suite = json.load(open(sys.argv[1]))
suite["cases"] = [c for c in suite["cases"] if c["id"] in ("repeated-pattern", "sampled-story")]
assert len(suite["cases"]) == 2
json.dump(suite, open(sys.argv[2], "w"), indent=1)
PY

for m in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next; do
  expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
  expect_exit 0 "$BIN" compare --golden "$SRC/golden/$m/smoke" --model "$WORK/$m" --config backend=cuda,precision=ref \
    --case repeated-pattern --case sampled-story
  expect_out "limits: fp32 noise floors of the record"
  expect_out "verdict: good"
done
expect_exit 0 "$BIN" -q compare --golden "$SRC/golden/tiny-qwen35-r3/smoke" --model "$WORK/tiny-qwen35-r3" \
  --config backend=cuda,precision=ref,gemm=simple --case repeated-pattern

m="$WORK/tiny-qwen35"
# 2. a record made on the (emulated) GPU, checked by the CPU
expect_exit 0 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/gpu" --config backend=cuda,precision=ref
expect_out "CPU spot check passed: 2 cases, 8 layers at the first 4 positions"
grep -q '"status": "passed"' "$WORK/gpu/manifest.json" || fail "the manifest does not record the spot check"
grep -q '"reference_config": "backend=cuda,precision=ref"' "$WORK/gpu/manifest.json" || fail "the manifest does not name the GPU reference"
expect_exit 0 "$BIN" compare --golden "$WORK/gpu" --model "$m"
expect_out "limits: fp32 noise floors of the record"
expect_out "verdict: good"
expect_exit 0 "$BIN" -q compare --golden "$WORK/gpu" --model "$m" --config backend=cuda
expect_exit 0 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/gpu-tp2" --no-floors \
  --config backend=cuda,precision=ref,tp=2 --verify-layers 0,3,7 --verify-positions 8
expect_out "CPU spot check passed: 2 cases, 3 layers at the first 8 positions"
expect_exit 0 "$BIN" -q compare --golden "$WORK/gpu-tp2" --model "$m" --case sampled-story
# bf16 floors made on the GPU, spot-checked by the CPU's emulation; the fp32 class left out
expect_exit 0 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/gpu-floors" \
  --config backend=cuda,precision=ref --floors-config backend=cuda --floor-classes bf16
expect_out "bf16 noise floors measured"
expect_out "fp32 noise floors ABSENT: not measured (--floor-classes bf16)"
grep -q '"spot_check"' "$WORK/gpu-floors/manifest.json" || fail "the manifest does not record the floors' spot check"
expect_exit 0 "$BIN" -q compare --golden "$WORK/gpu-floors" --model "$m" --config backend=cuda
expect_exit 1 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/faulty" \
  --floors-config backend=cuda,fault=gdn-norm-plus-one --floor-classes bf16
expect_out "the CPU spot check refused the bf16 noise floors"
[ ! -e "$WORK/faulty" ] || fail "a record was written with faulty floors"
# not checked: said and recorded
expect_exit 0 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/unchecked" --no-floors \
  --config backend=cuda,precision=ref --verify-layers none
expect_out "NOT CHECKED by the CPU"
grep -q '"status": "not checked"' "$WORK/unchecked/manifest.json" || fail "the manifest does not say the record is unchecked"

# 3. faulty references are refused, and leave no record
refused() {  # FAULT TEXT
  expect_exit 1 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/faulty" --no-floors \
    --config "backend=cuda,precision=ref,fault=$1"
  expect_out "$2"
  expect_out "no record written"
  [ ! -e "$WORK/faulty" ] || fail "a record was written from the reference with fault $1"
}
refused gdn-norm-plus-one "the CPU spot check refused the reference"
refused rope-interleaved "from the record's own input differs from the CPU reference"
refused kv-off-by-one "the decode path disagrees with the prefill"
refused conv-window-stuck "the decode path disagrees with the prefill"
refused mtp-no-rollback "which has faults"

# 4. bad input
bad_input() {  # TEXT ARGS...
  local text=$1; shift
  expect_exit 128 "$BIN" golden --model "$m" --cases "$CASES" --out "$WORK/never" "$@"
  expect_out "$text"
}
bad_input "is the bf16 GPU path, not a reference" --config backend=cuda
bad_input "would change the reference's numerics" --config backend=cuda,precision=ref,kv_dtype=fp8
bad_input "faults are allowed only with" --config fault=gdn-norm-plus-one
bad_input "check what runs on the GPU" --verify-positions 8
bad_input "the bf16 floors run on" --floors-config backend=cuda,precision=ref
bad_input "the bf16 floors run on" --floors-config kv_dtype=fp8
bad_input "needs the CPU spot check" --floors-config backend=cuda --verify-layers none
bad_input "expected both, bf16 or fp32" --floor-classes fp16
bad_input "runs on the CPU only" --config backend=cuda,precision=ref --precision fp64
bad_input "would let it write a wrong record" --config backend=cuda,precision=ref,fault=rope-interleaved --verify-layers none
bad_input "--verify-positions must be in" --config backend=cuda,precision=ref --verify-positions -1
bad_input "--verify-layers 0,99: layer 99 is outside the model" --config backend=cuda,precision=ref --verify-layers 0,99
expect_exit 128 "$BIN" golden --plan --model "$m" --cases "$CASES" --config backend=cuda,precision=ref
expect_out "golden --plan estimates the CPU reference"
[ ! -e "$WORK/never" ] || fail "a refused run left a record"
echo "golden_ref: ok"
