# selftest on backend=cuda, on the CUDA emulator (tests/emu; not a GPU): every catalogue fault the
# model can host is injected into the CUDA kernels and must be named (layer and op) by bisect,
# against the committed golden records: every fault on tiny-qwen35 at one layer of each kind it
# can act on; the GDN faults whose head mapping r = 3 changes on tiny-qwen35-r3 and the MoE fault on
# tiny-qwen35-moe at two. One layer on tiny-qwen35 (issue 43): which layers a fault acts on and how
# bisect narrows them is the engine's and the bisector's, the same code on every backend, checked
# at two layers of each kind on every shipped model by cli:selftest; what only this test shows is
# that each fault's CUDA implementation is caught and named, which one layer shows. (The observed
# passes now run the fused decode kernels, which the emulator runs about 1.3x slower than the split
# ops an observer used to switch to.)
# note: on the MoE models a bf16 base (backend=cuda, or the CPU's precision=bf16, which gives the
# same rows) flips near-tied routing decisions: tp=2 alone is then "bad" against the tp=1 noise
# floors, and small faults drown in that noise. That is the tool's limit on these random models,
# not the CUDA path's (the CPU emulation fails the same 8 rows); see the closing note of stop 14.
# Likewise mtp-prenorm-hidden at a bf16 base needs more cases than two-plus-two on tiny-qwen35-r3.
# Arguments: degenbisect-emu SOURCE_DIR WORK_DIR.
source "$2/tests/cli/lib.bash"
run_selftest() {  # MODEL [selftest options]
  local m=$1; shift
  expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
  expect_exit 0 "$BIN" -q selftest --base backend=cuda --model "$WORK/$m" --golden "$SRC/golden/$m/smoke" \
    --case two-plus-two --json "$WORK/$m.json" "$@"
  cat "$WORK/out"
  expect_out "0 fail"
}
# Here: every fault of the forward pass (an op flag the CUDA kernels or the layer code read: what only
# this test can show). The engine-step faults (the MTP steps, the last tensor-parallel all-reduce, the
# serving mechanisms of engine/serving.h) are engine code, the same on every backend, found on every
# shipped model by cli:selftest; on backend=cuda, cuda-emu:compare-toggles runs MTP and tp=2, and
# tests/emu/serving.sh the serving mechanisms with one of their faults caught.
"$BIN" faults --json > "$WORK/faults.json"
mapfile -t forward < <(python3 -c 'import json, sys
for f in json.load(open(sys.argv[1])):
    if f["forward_pass"]: print("--fault"); print(f["name"])' "$WORK/faults.json")
[ "${#forward[@]}" -gt 30 ] || fail "faults --json listed too few forward-pass faults: ${#forward[@]}"
run_selftest tiny-qwen35 --layers-per-kind 1 "${forward[@]}"
run_selftest tiny-qwen35-r3 --fault gdn-head-mod --fault gdn-read-before-decay --fault conv-window-stuck
run_selftest tiny-qwen35-moe --fault moe-no-renorm
echo ok
