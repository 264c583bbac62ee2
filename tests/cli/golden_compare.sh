# `golden` and `compare` through the real CLI: a record of a synthetic model, compare of the model
# with itself (0), with fp32-class variants (0), with a planted weight change (1, the layer named),
# with another model (128 unless --allow-model-mismatch), an untestable configuration (125), a damaged
# record or an edited manifest (128), NaN weights (128, named), an unwritable --json (128, no verdict
# printed), another tokenizer, a repeated toggle, bad flags and case files (128); JSON and JUnit
# outputs; the committed records under golden/ against freshly synthesized shipped models (0).
source "$(dirname "$0")/lib.bash"
m="$WORK/tiny"
g="$WORK/golden"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
cat >"$WORK/cases.json" <<'EOF'
{"suite": "cli", "defaults": {"max_new_tokens": 6},
 "cases": [{"id": "sum", "prompt": "What is 2+2?"}, {"id": "raw", "raw": "red green blue, red green blue,"}]}
EOF

# golden: writes the record, refuses to overwrite without --force.
expect_exit 0 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$g"
expect_out "suite 'cli', 2 cases"
expect_out "noise floors"
[ -f "$g/manifest.json" ] && [ -f "$g/sum.safetensors" ] || fail "record files missing"
expect_exit 128 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$g"
expect_out "already exists"
expect_exit 0 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$g" --force --positions all

# compare: the reference against its own record, JSON on stdout, JUnit file.
expect_exit 0 "$BIN" compare --golden "$g" --model "$m"
expect_out "verdict: good (exit 0)"
expect_out "iso:prefill"
set +e; "$BIN" -q compare --golden "$g" --model "$m" --json - --junit "$WORK/junit.xml" >"$WORK/j.json" 2>/dev/null; rc=$?; set -e
[ "$rc" = 0 ] || fail "compare --json - exited $rc"
grep -q '"verdict": "good"' "$WORK/j.json" || fail "JSON lacks the verdict"
grep -q '"fail_on_model_degeneration": false' "$WORK/j.json" || fail "JSON lacks fail_on_model_degeneration"
[ "$(grep -c '<testcase ' "$WORK/junit.xml")" = 2 ] || fail "JUnit should have one testcase per case"
expect_exit 0 "$BIN" compare --golden "$g" --model "$m" --config gdn=recurrent --case raw
expect_exit 0 "$BIN" compare --golden "$g" --model "$m" --config precision=fp64 --no-decode --per-case
expect_out "case raw:"
# Bugs of the decode path alone: caught by the decode-mode passes; --no-decode misses them, and says so
# (in its help and in the result).
for f in conv-window-stuck kv-off-by-one; do
  expect_exit 1 "$BIN" -q compare --golden "$g" --model "$m" --config "fault=$f"
  expect_exit 0 "$BIN" -q compare --golden "$g" --model "$m" --config "fault=$f" --no-decode --json "$WORK/nd.json"
  expect_out "note: decode mode skipped (--no-decode): bugs of the one-token-per-call path alone"
  grep -q '"decode_skipped": true' "$WORK/nd.json" || fail "JSON lacks decode_skipped"
done
expect_exit 0 "$BIN" compare --help
expect_out "then go unmeasured and the verdict can be good"

# Another seed of the same architecture: same fingerprint (config + tensor headers), other weight
# values: compared, with a warning naming the tensors that differ, and found bad from layer 0 on.
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$WORK/seed1" --seed 1
expect_exit 1 "$BIN" compare --golden "$g" --model "$WORK/seed1" --junit "$WORK/junit-bad.xml"
expect_out "of the model's tensors differ from the ones the record was made with"
expect_out "FIRST BREAK"
expect_out "verdict: bad (exit 1)"
grep -q '<failure' "$WORK/junit-bad.xml" || fail "JUnit lacks the failure"
# One element inside one tensor (element 500, away from the first and last 64 bytes the weight
# sample reads): the record's per-tensor digests name that tensor.
cp -r "$m" "$WORK/edited"
t=$(python3 - "$WORK/edited/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = sorted(k for k in h if "layers.1." in k and k.endswith("out_proj.weight"))[0]
o = 8 + n + h[name]["data_offsets"][0] + 500 * 2 + 1   # the high byte of bf16 element 500
b[o] ^= 0x01
open(p, "wb").write(b); print(name)
PY
)
[ -n "$t" ] || fail "no tensor edited"
expect_exit 1 "$BIN" compare --golden "$g" --model "$WORK/edited" --json "$WORK/edited.json"
expect_out "warning: 1 of the model's tensors differ from the ones the record was made with: $t"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["changed_tensors"] == [sys.argv[2]]' "$WORK/edited.json" "$t" ||
  fail "JSON lacks changed_tensors [$t]"
# bisect of that checkpoint: no toggle to bisect, so the record is the good side: the layer (1), confirmed
# by patching its output, "the model" (the record's reference breaks there too, the digests name the
# tensor) and the first operation reading it (out_proj -> mixer_out-1).
expect_exit 1 "$BIN" bisect --golden "$g" --model "$WORK/edited" --bad backend=cpu --json "$WORK/bisect-edited.json"
expect_out "no toggle or fault to bisect"
expect_out "layer 1 is the first whose output breaks its floor"
expect_out "confirmed by patching"
expect_out "Cause: the model:"
expect_out 'The first operation that reads a changed tensor is `mixer_out-1`'
python3 - "$WORK/bisect-edited.json" "$t" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["localisation"]
assert l["layer"] == 1 and l["broken_layers"] == [1], l["broken_layers"]
assert l["cause"] == "model" and l["op"] == "mixer_out" and l["op_tensor"] == sys.argv[2], (l["cause"], l["op"])
p = l["patch"]
assert p["confirmed"] and p["kld_patched"] <= p["kld_limit"] < p["kld_unpatched"], p
assert p["drift_patched"] < p["drift_unpatched"], p
PY
# A record made before per-tensor digests (the committed one of this model as it was before
# scripts/regen-golden.sh: without tensor_digests and manifest_sha256): the layer, confirmed, but the
# cause stays "the model or the engine build".
cp -r "$SRC/golden/tiny-qwen35/smoke" "$WORK/old-record"
python3 - "$WORK/old-record/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["model"]["tensor_digests"], m["manifest_sha256"]
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
expect_exit 1 "$BIN" bisect --golden "$WORK/old-record" --model "$WORK/edited" --bad backend=cpu --no-decode --case two-plus-two
expect_out "layer 1 is the first whose output breaks its floor"
expect_out "confirmed by patching"
expect_out "the record has no per-tensor digests to tell which"
# The same with a fault on top: the implicit good (no fault) is bad too, and the shared fault is localised.
expect_exit 1 "$BIN" bisect --golden "$g" --model "$WORK/edited" --bad fault=gdn-head-mod@5
expect_out "is itself bad against this golden record, so the fault lies in what both share"
expect_out "Cause: the model:"
# A norm shifted by one (the mlx-lm +1 convention applied twice, on one layer's input norm): attn_norm-3.
cp -r "$m" "$WORK/shifted"
python3 - "$WORK/shifted/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = [k for k in h if k.endswith("layers.3.input_layernorm.weight")][0]
assert h[name]["dtype"] == "BF16", h[name]["dtype"]
s, e = h[name]["data_offsets"]
for o in range(8 + n + s, 8 + n + e, 2):   # w + 1 in bf16, through float32's upper half
    f = struct.unpack("<f", b"\0\0" + bytes(b[o:o + 2]))[0] + 1.0
    b[o:o + 2] = struct.pack("<f", f)[2:]
open(p, "wb").write(b)
PY
expect_exit 1 "$BIN" bisect --golden "$g" --model "$WORK/shifted" --bad backend=cpu
expect_out "layer 3 is the first whose output breaks its floor"
expect_out '`attn_norm-3`'
# A new engine build, simulated by a fault in both --good and --bad: the reference reproduces the record,
# the tested path does not: "the engine build" and the first operation over its floor (gdn_core-5).
expect_exit 1 "$BIN" bisect --golden "$g" --model "$m" --bad fault=gdn-head-mod@5 --good fault=gdn-head-mod@5
expect_out "layer 5 is the first whose output breaks its floor"
expect_out "Cause: the engine build: the record's own reference"
expect_out 'the first operation over its noise floor is `gdn_core-5`'
# Another model (other config): refused, 128, unless --allow-model-mismatch.
expect_exit 0 "$BIN" synth --preset tiny-qwen35-r3 --out "$WORK/r3"
expect_exit 128 "$BIN" compare --golden "$g" --model "$WORK/r3"
expect_out "made for another model"
expect_exit 1 "$BIN" compare --golden "$g" --model "$WORK/r3" --allow-model-mismatch
expect_out "--allow-model-mismatch"

# Untestable configuration (precision is a CPU toggle, on every machine): 125, with JSON and JUnit saying so.
expect_exit 125 "$BIN" compare --golden "$g" --model "$m" --config backend=cuda,precision=bf16 --json "$WORK/u.json" --junit "$WORK/u.xml"
expect_out "untestable"
grep -q '"verdict": "untestable"' "$WORK/u.json" || fail "untestable JSON"
grep -q '<skipped' "$WORK/u.xml" || fail "untestable JUnit"

# Bad input: 128.
expect_exit 128 "$BIN" compare --golden "$g" --model "$m" --config colour=blue
expect_exit 128 "$BIN" compare --golden "$WORK/nothing" --model "$m"
expect_exit 128 "$BIN" compare --golden "$g" --model "$m" --case nope
expect_out "case 'nope'"
expect_exit 128 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$WORK/g2" --layers 9
expect_exit 128 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$WORK/g2" --precision bf16
printf '{"suite": "x", "cases": [{"id": "a", "raw": "y", "max_new_tokens": "many"}]}' >"$WORK/bad.json"
expect_exit 128 "$BIN" golden --model "$m" --cases "$WORK/bad.json" --out "$WORK/g2"
expect_out "case 'a': field 'max_new_tokens'"
[ ! -e "$WORK/g2" ] || fail "a failed golden left $WORK/g2 behind"

# A damaged record: truncated data file, edited byte.
cp -r "$g" "$WORK/trunc"
truncate -s -64 "$WORK/trunc/sum.safetensors"
expect_exit 128 "$BIN" compare --golden "$WORK/trunc" --model "$m"
expect_out "truncated"
cp -r "$g" "$WORK/edit"
printf 'X' | dd of="$WORK/edit/raw.safetensors" bs=1 seek=200 conv=notrunc status=none
expect_exit 128 "$BIN" compare --golden "$WORK/edit" --model "$m"
expect_out "does not match its checksum"

# The manifest covers itself (issue 21.8): noise floors raised to 1e30 would turn a planted fault good;
# the edited manifest is refused (128) naming it. A record made before the checksum is read, with a note.
python3 - "$g/manifest.json" "$WORK/floors" "$WORK/nosum" <<'PY'
import json, os, shutil, sys
src, floors, nosum = sys.argv[1:4]
m = json.load(open(src))
assert len(m["manifest_sha256"]) == 64, m.get("manifest_sha256")
for d in (floors, nosum):
    shutil.copytree(os.path.dirname(src), d)
old = dict(m); del old["manifest_sha256"]
json.dump(old, open(os.path.join(nosum, "manifest.json"), "w"), indent=1)
for c in m["cases"]:
    for fl in c["floors"].values():
        if fl is None: continue
        for k in ("iso_prefill", "iso_decode"): fl[k] = [None if v is None else 1e30 for v in fl[k]]
        for k in ("kld_prefill", "kld_decode"): fl[k] = None if fl[k] is None else 1e30
json.dump(m, open(os.path.join(floors, "manifest.json"), "w"), indent=1)
PY
expect_exit 128 "$BIN" compare --golden "$WORK/floors" --model "$m" --config fault=gdn-head-mod@5
expect_out "manifest.json does not match its own checksum"
expect_exit 0 "$BIN" compare --golden "$WORK/nosum" --model "$m" --case raw --no-decode
expect_out "note: the record's manifest.json has no checksum of its own"

# NaN/Inf in the weights (issue 21.9): the model, with the tensor and the count; no engine blamed, no verdict.
cp -r "$m" "$WORK/nan"
t=$(python3 - "$WORK/nan/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = sorted(k for k in h if "layers.1." in k and k.endswith("out_proj.weight"))[0]
assert h[name]["dtype"] == "BF16"
o = 8 + n + h[name]["data_offsets"][0] + 500 * 2
b[o:o + 2] = b"\xc0\x7f"   # bf16 NaN at element 500
open(p, "wb").write(b); print(name)
PY
)
expect_exit 128 "$BIN" compare --golden "$g" --model "$WORK/nan"
expect_out "the model: tensor $t has 1 non-finite values"
expect_out "element 500 is nan"
if grep -qE "engine-induced|verdict:|floor_ratio" "$WORK/out"; then fail "NaN weights were judged as an engine fault"; fi

# Every printed verdict equals the exit code (issue 21.10): --json into a folder nothing can be written to
# is refused before the run (128), no verdict printed.
ro="$WORK/ro"
mkdir -p "$ro" && chmod 555 "$ro"
if touch "$ro/probe" 2>/dev/null; then rm -f "$ro/probe"; ro=/proc; fi   # root writes anywhere: /proc takes no new files
expect_exit 128 "$BIN" compare --golden "$g" --model "$m" --case raw --json "$ro/out.json"
expect_out "cannot write into folder $ro"
if grep -q "verdict:" "$WORK/out"; then fail "a verdict was printed although the JSON could not be written"; fi
expect_exit 128 "$BIN" compare --golden "$g" --model "$m" --case raw --junit "$WORK/no/such/folder/j.xml"
expect_out "does not exist"
chmod 755 "$WORK/ro"
# A tokenizer other than the record's: refused unless --allow-model-mismatch, then a warning.
cp -r "$m" "$WORK/tok2"
echo >>"$WORK/tok2/tokenizer.json"
expect_exit 128 "$BIN" compare --golden "$g" --model "$WORK/tok2" --case raw
expect_out "was made with tokenizer"
expect_exit 0 "$BIN" compare --golden "$g" --model "$WORK/tok2" --case raw --allow-model-mismatch --no-decode
expect_out "warning: the record was made with tokenizer"
# A toggle given twice: refused, naming the key, instead of keeping the last.
expect_exit 128 "$BIN" compare --golden "$g" --model "$m" --config attn=flash,attn=naive
expect_out "key 'attn' is given twice"

# The committed records against the shipped models, synthesized here.
for name in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next; do
  expect_exit 0 "$BIN" synth --preset "$name" --out "$WORK/shipped/$name"
  expect_exit 0 "$BIN" compare --golden "$SRC/golden/$name/smoke" --model "$WORK/shipped/$name" --no-decode
  expect_out "verdict: "
done
# A record made by an earlier writer (tests/fixtures/records: golden/tiny-qwen35/smoke as committed
# before scripts/regen-golden.sh, without manifest_sha256, tensor_digests and lse_pad) still opens
# and compares as it did: good, with the note that its manifest has no checksum of its own.
old="$SRC/tests/fixtures/records/tiny-qwen35-smoke-pre-checksum"
expect_exit 0 "$BIN" compare --golden "$old" --model "$WORK/shipped/tiny-qwen35" --no-decode --case two-plus-two \
  --case repeated-pattern
expect_out "verdict: good (exit 0)"
expect_out "note: the record's manifest.json has no checksum of its own"
# A bf16 configuration with two harmless toggles (make demo's bisect patch confirmation): generation
# is checked against teacher forcing taken in its own order, so bf16 rounding of another order does
# not make it bad (it did: 'free-running logits differ ... 4.65e-03 > 3.86e-03' on repeated-pattern).
expect_exit 0 "$BIN" compare --golden "$SRC/golden/tiny-qwen35/smoke" --model "$WORK/shipped/tiny-qwen35" \
  --config precision=bf16,attn=flash@3+7,ssm_dtype=bf16@0-2+5-6 --case two-plus-two --case repeated-pattern
expect_out "verdict: good (exit 0)"
echo "golden_compare: ok"
