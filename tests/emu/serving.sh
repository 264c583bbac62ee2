# The serving toggles on backend=cuda, on the CUDA emulator (tests/emu; not a GPU): prefill_chunk=8,
# prefix_cache=on and batch=4 on every shipped model pass compare (the serving-state check's three
# mechanisms against plain processing on the CUDA path, judged by the bf16 floors), and a mistake
# planted in one mechanism (chunk-state-zero at one GDN layer) fails it, naming the mechanism and that
# layer. One short case each: the mechanisms are engine code over the CUDA kernels (cli:serving covers
# them on the CPU with more cases and every fault).
# Arguments: degenbisect-emu SOURCE_DIR WORK_DIR.
source "$2/tests/cli/lib.bash"
on=backend=cuda,prefill_chunk=8,prefix_cache=on,batch=4
check() {  # JSON: the three checks present and passing
  python3 - "$1" <<'PY' || fail "$1: a serving check is missing or failed"
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    got = {s["mechanism"]: s for s in c["serving"]}
    assert set(got) == {"chunk", "slot", "snapshot"}, (c["id"], sorted(got))
    for s in got.values():
        assert s["pass"] and s["logits"]["pass"], (c["id"], s)
    print(c["id"], {m: (s["state_rel_l2"], s["logits"]["mean_kld"]) for m, s in got.items()})
PY
}
for m in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next; do
  expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
  expect_exit 0 "$BIN" -q compare --golden "$SRC/golden/$m/smoke" --model "$WORK/$m" --case two-plus-two --no-decode \
    --config "$on" --json "$WORK/$m.json"
  check "$WORK/$m.json"
done
expect_exit 0 "$BIN" -q compare --golden "$SRC/golden/tiny-trained/smoke" --model "$SRC/models/tiny-trained" \
  --case two-plus-two --no-decode --config "$on" --json "$WORK/trained.json"
check "$WORK/trained.json"
expect_exit 1 "$BIN" -q compare --golden "$SRC/golden/tiny-qwen35/smoke" --model "$WORK/tiny-qwen35" --case two-plus-two \
  --no-decode --config backend=cuda,prefill_chunk=8,fault=chunk-state-zero@2
expect_out "serving (chunk): "
expect_out "the GDN state (S) of layer 2 at length"
echo ok
