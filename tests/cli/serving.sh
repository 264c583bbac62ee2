# The serving toggles (engine/serving.h; issue 44): prefill_chunk=N, prefix_cache=on and batch=N on
# every shipped model equal plain processing within the floors (compare's serving-state check passes
# for each mechanism, every verdict good), with MTP where the model has it; a mistake planted in each
# mechanism fails the check and names the mechanism and the layer; the toggles are sweep axes.
source "$(dirname "$0")/lib.bash"
check_serving() {  # JSON: every case has the three mechanisms' checks, each passing
  python3 - "$1" "$2" <<'PY' || fail "$1: a serving check is missing or failed"
import json, sys
d = json.load(open(sys.argv[1]))
want = set(sys.argv[2].split(","))
for c in d["cases"]:
    got = {s["mechanism"]: s for s in c["serving"]}
    assert set(got) == want, (c["id"], sorted(got))
    for s in got.values():
        assert s["pass"] and s["state_layer"] is None, (c["id"], s)
        assert s["state_rel_l2"] <= s["state_limit"], (c["id"], s)
        assert s["logits"] is not None and s["logits"]["pass"], (c["id"], s["mechanism"])
print(sys.argv[1], "serving checks pass:", ", ".join(sorted(want)))
PY
}
on=prefill_chunk=8,prefix_cache=on,batch=4
for m in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next; do
  expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
  expect_exit 0 "$BIN" -q compare --golden "$SRC/golden/$m/smoke" --model "$WORK/$m" --case two-plus-two \
    --case repeated-pattern --no-decode --config "$on,mtp=2" --json "$WORK/$m.json"
  check_serving "$WORK/$m.json" chunk,slot,snapshot
done
t="$SRC/models/tiny-trained"
tg="$SRC/golden/tiny-trained/smoke"
expect_exit 0 "$BIN" -q compare --golden "$tg" --model "$t" --case two-plus-two --no-decode --config "$on" --json "$WORK/trained.json"
check_serving "$WORK/trained.json" chunk,slot,snapshot
expect_exit 0 "$BIN" -q compare --golden "$tg" --model "$t" --case two-plus-two --no-decode --config prefix_cache=on,mtp=2 \
  --json "$WORK/trained-mtp.json"
check_serving "$WORK/trained-mtp.json" snapshot
# Each mechanism's fault, planted at one GDN layer: bad, and the check names the mechanism and that layer.
m="$WORK/tiny-qwen35"
g="$SRC/golden/tiny-qwen35/smoke"
for f in prefill_chunk=8,fault=chunk-state-twice@2:chunk prefill_chunk=8,fault=chunk-state-zero@2:chunk \
         prefill_chunk=8,fault=pad-updates-state@2:chunk batch=4,fault=pad-slot-alias@2:slot \
         prefix_cache=on,mtp=2,fault=prefix-snapshot-drafts@2:snapshot; do
  expect_exit 1 "$BIN" -q compare --golden "$g" --model "$m" --case two-plus-two --no-decode --config "${f%:*}"
  expect_out "serving (${f##*:}): "
  expect_out "the GDN state (S) of layer 2 at length"
done
# Without its mechanism a fault of the mechanism cannot act: untestable, saying what it needs.
expect_exit 125 "$BIN" -q compare --golden "$g" --model "$m" --case two-plus-two --config fault=chunk-state-zero
expect_out "it needs prefill_chunk"
# batch=all decodes every sequence in one group, with no padding rows: the padding-row fault cannot act
# there (it was judged good: a clean bill for a fault that never ran).
expect_exit 125 "$BIN" -q compare --golden "$g" --model "$m" --case two-plus-two --config batch=all,fault=pad-slot-alias
expect_out "it needs batch=N (for example batch=4)"
# A prefix-cache block larger than the case: its serving-state check covers the case's own tokens and
# says that the mechanism stored nothing (it decoded up to the first boundary, 4,096 steps one per call).
expect_exit 0 "$BIN" -q compare --golden "$g" --model "$m" --case two-plus-two --no-decode --config prefix_cache=4096 \
  --json "$WORK/block4096.json"
expect_out "serving (snapshot): no block boundary of 4096 tokens within the case's"
python3 - "$WORK/block4096.json" <<'PY' || fail "prefix_cache=4096: the snapshot check ran past the case"
import json, re, sys
c = json.load(open(sys.argv[1]))["cases"][0]
s = [x for x in c["serving"] if x["mechanism"] == "snapshot"][0]
assert s["note"] and "stores nothing" in s["note"], s
checked = int(re.search(r"within the case's (\d+) tokens", s["note"]).group(1))
assert checked <= c["positions"], (checked, c["positions"])
print("prefix_cache=4096: the snapshot check covered", checked, "tokens of a", c["positions"], "token case")
PY
# Bad values are input errors naming the key.
expect_exit 128 "$BIN" -q compare --golden "$g" --model "$m" --case two-plus-two --config batch=1000
expect_out "batch=1000: expected 1, all, or a row count in [2, 256]"
expect_exit 128 "$BIN" -q compare --golden "$g" --model "$m" --case two-plus-two --config prefix_cache=maybe
expect_out "prefix_cache=maybe"
# Sweep axes like any toggle; one cell with a chunk fault is the worst.
expect_exit 1 "$BIN" -q sweep --golden "$g" --model "$m" --case two-plus-two --no-decode --axis prefill_chunk=0,8 \
  --axis batch=1,4 --axis variant=temp=0,fault=chunk-state-zero@2 --out "$WORK/sweep"
python3 - "$WORK/sweep/results.jsonl" <<'PY' || fail "sweep over the serving toggles"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = {r["cell"]: r["verdict"] for r in rows}
assert len(v) == 8, v
for cell, verdict in v.items():
    if "chunk-state-zero" not in cell: assert verdict == "good", (cell, verdict)
    elif "prefill_chunk=8" in cell: assert verdict == "bad", (cell, verdict)
    else: assert verdict == "untestable", (cell, verdict)
print("sweep:", v)
PY
echo ok
