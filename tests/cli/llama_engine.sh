# llama.cpp, a third-party engine, under the golden records through its dump (tools/llama_dump.cpp,
# `compare --dump`): the trained model converted by llama.cpp's own converter
# (models/tiny-trained-gguf, tools/convert_gguf.py) and quantised by its llama-quantize, scored
# per layer and per position against golden/tiny-trained/smoke:
#  - f32 GGUF, f32 caches, flash attention off: good against the fp32 class;
#  - f32 GGUF with llama.cpp's defaults (f16 KV cache, CPU flash attention on): the attention
#    layer's softmax(qk)v is named, the first step over the fp32 floor;
#  - bf16 GGUF: good against the bf16 class; q8_0: bad against the bf16 class, good against the
#    q8_0 class (measured with our engine at precision=q8_0);
#  - a llama.cpp built with a deliberate GDN bug (tests/llama/gdn-read-before-decay.patch): bad, the
#    first GDN layer and its gated-delta-rule step named;
#  - bad dumps: missing, another case, truncated, another vocabulary -> exit 128 with the reason;
#  - two normalisations (docs/metrics.md): tiny-qwen35 (1,000 ids, 1,024 LM-head rows) converted by
#    llama.cpp's converter (models/tiny-qwen35-gguf, rebuilt from the synthesised checkpoint). llama.cpp
#    normalises its log-probs over all 1,024 rows: against a record with lse_pad the mean log-prob
#    offset is ~0; against the committed record (made before lse_pad) it is -lse_pad, with a note.
# Needs scripts/build-llama-cpp.sh (and, for the bug, its --patch build); skips (77) without it.
source "$(dirname "$0")/lib.bash"

LLAMA="${DEGEN_LLAMA_CPP:-$SRC/build/llama.cpp}"
BUG="${DEGEN_LLAMA_CPP_BUG:-$SRC/build/llama.cpp-gdn-bug}"
bin="$LLAMA/build/bin"
if [ ! -x "$bin/llama-dump" ] || [ ! -x "$bin/llama-quantize" ]; then
  echo "SKIP: llama.cpp not built in $LLAMA: run scripts/build-llama-cpp.sh"
  exit 77
fi
G="$SRC/golden/tiny-trained/smoke"
M="$SRC/models/tiny-trained"
F32="$SRC/models/tiny-trained-gguf/tiny-trained-f32.gguf"
[ -f "$F32" ] || { echo "SKIP: no $F32: run make gguf (tools/gguf_rebuild.py)"; exit 77; }
cmp_dump() { "$BIN" -q compare --golden "$G" --model "$M" "$@"; }

# The quantised copies, from the converter's f32 with llama.cpp's own tool.
for t in bf16 q8_0; do
  "$bin/llama-quantize" "$F32" "$WORK/tiny-trained-$t.gguf" "$(echo $t | tr a-z A-Z)" >"$WORK/quantize-$t.log" 2>&1 ||
    { cat "$WORK/quantize-$t.log" >&2; fail "llama-quantize to $t"; }
done

# f32 weights, f32 caches, exact attention: an fp32 path, judged against the fp32 class.
expect_exit 0 "$bin/llama-dump" -m "$F32" --golden "$G" --out "$WORK/f32" --cache-type f32 --flash-attn off --threads 1
expect_out "two-plus-two: 52 tokens"
expect_exit 0 cmp_dump --dump "$WORK/f32" --engine-class fp32 --json "$WORK/f32.json"
expect_out "verdict: good (exit 0): 7 cases, 7 good"
expect_out "limits: layers: drift against the drift of a known-good fp32 run"
grep -q '"source": "dump"' "$WORK/f32.json" || fail "compare --dump JSON lacks source"

# llama.cpp's defaults round attention to f16: caught, and named, against the fp32 class.
expect_exit 0 "$bin/llama-dump" -m "$F32" --golden "$G" --out "$WORK/f32-default" --threads 1
expect_exit 1 cmp_dump --dump "$WORK/f32-default" --engine-class fp32
expect_out "first layer over its drift floor: 3 (attention)"
expect_out "first step over its floor in layer 3: attn_core (the engine's 'attn_pregate-3'"

# bf16 weights against the bf16 class.
expect_exit 0 "$bin/llama-dump" -m "$WORK/tiny-trained-bf16.gguf" --golden "$G" --out "$WORK/bf16" --threads 1
expect_exit 0 cmp_dump --dump "$WORK/bf16" --engine-class bf16
expect_out "7 good"

# q8_0: too noisy for the bf16 class (the repeated-pattern case's KLD is ~2 x its limit); good
# against the q8_0 class, whose known-good run (our engine at precision=q8_0) drifts as llama.cpp's
# does layer by layer (floor_ratio 1.00 to 1.11).
expect_exit 0 "$bin/llama-dump" -m "$WORK/tiny-trained-q8_0.gguf" --golden "$G" --out "$WORK/q8_0" --threads 1
expect_exit 1 cmp_dump --dump "$WORK/q8_0" --engine-class bf16
expect_out "repeated-pattern"
expect_exit 0 cmp_dump --dump "$WORK/q8_0" --engine-class q8_0
expect_out "verdict: good (exit 0): 7 cases, 7 good"
expect_out "the q8_0 known-good run's KLD (our engine at precision=q8_0; k = 3)"
grep -E "^  [0-9] [GA] |^  (two-plus-two|repeated-pattern) " "$WORK/out"

# Bad dumps: exit 128, saying what was expected.
mkdir -p "$WORK/bad"
cp "$WORK/f32/two-plus-two.safetensors" "$WORK/bad/count.safetensors"
expect_exit 128 cmp_dump --dump "$WORK/bad" --case two-plus-two
expect_out "no dump for case 'two-plus-two'"
expect_exit 128 cmp_dump --dump "$WORK/bad" --case count
expect_out "a dump of case 'two-plus-two', expected 'count'"
head -c 3000 "$WORK/f32/two-plus-two.safetensors" >"$WORK/bad/two-plus-two.safetensors"
expect_exit 128 cmp_dump --dump "$WORK/bad" --case two-plus-two
expect_out "two-plus-two.safetensors"
python3 - "$WORK/bad/two-plus-two.safetensors" <<'PY'
# a well-formed dump whose logits cover another vocabulary (10 ids)
import json, struct, sys
T, V = 52, 10
h = {"__metadata__": {"format": "degenbisect-dump", "names": "llama.cpp", "case": "two-plus-two"},
     "logits": {"dtype": "F32", "shape": [T, V], "data_offsets": [0, T * V * 4]}}
hs = json.dumps(h).encode()
hs += b" " * (-len(hs) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hs)) + hs + b"\0" * (T * V * 4))
PY
expect_exit 128 cmp_dump --dump "$WORK/bad" --case two-plus-two
expect_out "logits over 10 ids; the model's vocabulary has 2048"
expect_exit 128 cmp_dump --dump "$WORK/nowhere"
expect_out "not a folder"
expect_exit 128 cmp_dump --dump "$WORK/f32" --engine-class fp16
expect_exit 2 "$bin/llama-dump" -m "$F32" --golden "$G"
expect_out "--out are required"
expect_exit 1 "$bin/llama-dump" -m "$F32" --golden "$WORK" --out "$WORK/x"
expect_out "no manifest.json"

# A llama.cpp with a deliberate Gated DeltaNet bug: bad, its layer and step named.
if [ -x "$BUG/build/bin/llama-dump" ]; then
  expect_exit 0 "$BUG/build/bin/llama-dump" -m "$F32" --golden "$G" --out "$WORK/bug" --cache-type f32 --flash-attn off \
    --threads 1
  expect_exit 1 cmp_dump --dump "$WORK/bug" --engine-class fp32
  expect_out "first layer over its drift floor: 0 (Gated DeltaNet)"
  expect_out "first step over its floor in layer 0: gdn_core (the engine's 'attn_output-0'"
else
  echo "note: no llama.cpp with the deliberate bug in $BUG (scripts/build-llama-cpp.sh --dir $BUG --patch" \
    "tests/llama/gdn-read-before-decay.patch); that part not run"
fi
# Two normalisations: llama.cpp's log-probs (over all rows) against the record's.
if [ -f "$SRC/models/tiny-qwen35-gguf/layout.json" ] && command -v python3 >/dev/null; then
  "$BIN" -q synth --preset tiny-qwen35 --out "$WORK/tq35" >/dev/null 2>&1
  python3 "$SRC/tools/gguf_rebuild.py" "$SRC/models/tiny-qwen35-gguf" "$WORK/tq35.gguf" "$WORK/tq35/model.safetensors" >/dev/null ||
    fail "could not rebuild llama.cpp's tiny-qwen35 GGUF"
  expect_exit 0 "$BIN" -q golden --model "$WORK/tq35" --cases "$SRC/cases/smoke.json" --out "$WORK/tq35-golden" --no-floors
  # offset CASE_JSON: the mean of the cases' logprob_offset and the normalisation they were taken in
  offset() {
    python3 - "$1" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
v = [c["logits_prefill"]["logprob_offset"] for c in cases]
print(sum(v) / len(v), cases[0]["logits_prefill"]["logprob_offset_normalisation"])
PY
  }
  # A record made before lse_pad: the committed one (regenerated with lse_pad by
  # scripts/regen-golden.sh) with its lse_pad tensors taken out, as such records were written (no
  # lse_pad, no tensor digests, no manifest checksum; the data files' sizes and SHA-256 in the manifest).
  cp -r "$SRC/golden/tiny-qwen35/smoke" "$WORK/no-lse-pad"
  python3 - "$WORK/no-lse-pad" <<'PY' || fail "could not make the record without lse_pad"
import hashlib, json, os, struct, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
for name, f in m["files"].items():
    p = os.path.join(d, name)
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
    out, blobs, off = {}, [], 0
    for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
        if k == "__metadata__": out[k] = v; continue
        if k.endswith("lse_pad"): continue
        raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
        out[k] = dict(v, data_offsets=[off, off + len(raw)]); blobs.append(raw); off += len(raw)
    hb = json.dumps(out, separators=(",", ":")).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
    nb = struct.pack("<Q", len(hb)) + hb + b"".join(blobs)
    open(p, "wb").write(nb)
    f["bytes"], f["sha256"] = len(nb), hashlib.sha256(nb).hexdigest()
m["model"].pop("tensor_digests", None); m.pop("manifest_sha256", None)
json.dump(m, open(os.path.join(d, "manifest.json"), "w"), indent=1)
PY
  n=0
  for rec in "$WORK/tq35-golden" "$WORK/no-lse-pad"; do
    n=$((n + 1))
    out="$WORK/tq35-dump-$n"
    expect_exit 0 "$bin/llama-dump" -m "$WORK/tq35.gguf" --golden "$rec" --out "$out" --cache-type f32 --flash-attn off --threads 1
    expect_exit 0 "$BIN" -q compare --golden "$rec" --model "$WORK/tq35" --dump "$out" --engine-class fp32 --json "$out.json"
    expect_out "verdict: good (exit 0): 7 cases, 7 good"
    grep -E "^log-probs:|^note: the record has no lse_pad" "$WORK/out" || true
    read -r off norm < <(offset "$out.json")
    echo "tiny-qwen35, llama.cpp's log-probs minus the record's ($rec): mean $off nats, normalisation $norm"
    if [ "$rec" = "$WORK/tq35-golden" ]; then
      expect_out "both over all 1024 rows of the LM head"
      # ~0: llama.cpp f32 and our reference agree to ~1e-6 on the logits (tol::kHfLogprob, 1e-4, bounds
      # our record against HF the same way: tests/tolerances.h)
      python3 -c "import sys; sys.exit(0 if abs($off) < 1e-4 else 1)" || fail "log-prob offset $off against a record with lse_pad"
      [ "$norm" = "vocab" ] || fail "normalisation $norm"
    else
      expect_out "note: the record has no lse_pad"
      # the padding rows' share: lse_pad is 0.004 to 0.067 nats on tiny-qwen35 (docs/metrics.md)
      python3 -c "import sys; sys.exit(0 if $off < -1e-3 else 1)" || fail "no offset ($off) against the record without lse_pad"
    fi
  done
else
  echo "note: no models/tiny-qwen35-gguf or no python3: the two-normalisations part not run"
fi
echo "llama_engine: ok"
