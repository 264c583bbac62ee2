# Impossible numbers in the files the tool reads (issue 40), through the binary:
#  1. compare --dump: a dump rebuilt from the record itself (its top-K logits, its l_out rows) is
#     good; the same with every logit plus 1e20, or all 3e38, is bad, naming the logits beyond
#     ±32768 (it was a KLD of -5.53 nats and the verdict good); integer-typed tensors are exit 128
#     naming the tensor, its dtype and the dtypes accepted (they were "internal error").
#  2. config.json: rope_theta, rms_norm_eps, eos/bos ids out of range -> 128 naming the field.
#  3. prompt suites: absurd numbers -> 128 naming the case and the field; a 64-bit seed is a seed.
#  4. golden record manifests resealed with numbers out of range -> 128 naming the file and the field.
#  5. golden --plan refuses what golden refuses, with the same message; absurd rates are refused.
# No llama.cpp and no torch: the dumps are written here from the committed golden record.
source "$(dirname "$0")/lib.bash"
M=$(cd "$SRC/models/tiny-trained" && pwd)
G=$SRC/golden/tiny-trained/smoke
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (writes the dumps)"; exit 77; }

# 1. Dumps of case two-plus-two, one folder per MODE: good, plus-1e20, 3e38, int-logits, int-l_out.
python3 - "$G/two-plus-two.safetensors" "$WORK" <<'PY'
import json, math, os, struct, sys
src, work = sys.argv[1:3]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def arr(name, fmt):
    t = head[name]; b, e = t["data_offsets"]
    return t["shape"], list(struct.unpack("<%d%s" % ((e - b) // 4, fmt), data[b:e]))
(T, K), ids = arr("topk_ids", "i")
_, lq = arr("topk_logprobs", "f")
_, lse = arr("lse", "f")
V, H = 2048, 192
logits = []
for t in range(T):  # the record's logits at its top-K ids; the tail's mass spread over the other ids
    q = sum(math.exp(x) for x in lq[t * K:(t + 1) * K])
    row = [lse[t] + (math.log((1 - q) / (V - K)) if q < 1 else -30.0)] * V
    for k in range(K):
        row[ids[t * K + k]] = lq[t * K + k] + lse[t]
    logits += row
l_out = []
for L in range(8):  # the record's stored rows, zeros after them
    (P, _), v = arr("l_out-%d" % L, "f")
    l_out.append(struct.pack("<%df" % (T * H), *(v + [0.0] * ((T - P) * H))))
f32 = lambda xs: struct.pack("<%df" % len(xs), *xs)
for mode in ("good", "plus-1e20", "3e38", "int-logits", "int-l_out"):
    lg = {"plus-1e20": lambda: f32([x + 1e20 for x in logits]), "3e38": lambda: f32([3e38] * len(logits)),
          "int-logits": lambda: b"\0" * (4 * T * V)}.get(mode, lambda: f32(logits))()
    tensors = [("logits", "I32" if mode == "int-logits" else "F32", [T, V], lg)]
    for L in range(8):
        tensors.append(("l_out-3", "I64", [T, H], b"\0" * (8 * T * H)) if mode == "int-l_out" and L == 3
                       else ("l_out-%d" % L, "F32", [T, H], l_out[L]))
    h, blobs, off = {"__metadata__": {"format": "degenbisect-dump", "names": "llama.cpp", "case": "two-plus-two",
                                      "tokens": str(T)}}, [], 0
    for name, dt, shape, b in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    hs = json.dumps(h).encode(); hs += b" " * (-len(hs) % 8)
    os.makedirs(os.path.join(work, mode))
    open(os.path.join(work, mode, "two-plus-two.safetensors"), "wb").write(struct.pack("<Q", len(hs)) + hs + b"".join(blobs))
PY
cmp_dump() { "$BIN" compare --golden "$G" --model "$M" --case two-plus-two --engine-class bf16 --dump "$WORK/$1"; }
expect_exit 0 cmp_dump good
expect_out "verdict: good (exit 0)"
for mode in plus-1e20 3e38; do
  expect_exit 1 cmp_dump $mode
  expect_out "52 positions whose largest logit lies beyond ±32768"
  expect_out "verdict: bad (exit 1)"
done
expect_exit 128 cmp_dump int-logits
expect_out "tensor 'logits' has dtype I32; expected F32, F16 or BF16"
expect_exit 128 cmp_dump int-l_out
expect_out "tensor 'l_out-3' has dtype I64; expected F32, F16 or BF16"

# 2. config.json numbers: the trained model's config with one field changed (weights linked).
mkdir -p "$WORK/model"
for f in model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do ln -sf "$M/$f" "$WORK/model/$f"; done
config() {
  python3 - "$M/config.json" "$WORK/model/config.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c["text_config"]
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
}
run1() { "$BIN" run --model "$WORK/model" --prompt hi --max-new-tokens 1; }
config "t['rope_parameters']['rope_theta'] = 1e300"
expect_exit 128 run1
expect_out "field 'text_config.rope_parameters.rope_theta': expected a number in (1, 1e+12]"
config "t['rope_parameters']['rope_theta'] = 1e-300"
expect_exit 128 run1
expect_out "found 1e-300"
config "t['rms_norm_eps'] = 1e-300"
expect_exit 128 run1
expect_out "field 'text_config.rms_norm_eps': expected a number in [1.17549e-38"
config "t['eos_token_id'] = [2000, 2**40]"
expect_exit 128 run1
expect_out "field 'text_config.eos_token_id': expected token ids in [0, vocab_size = 2048), found 1099511627776"
config "t['hidden_size'] = 2**40"
expect_exit 128 run1
expect_out "field 'text_config.hidden_size': expected at most 2^31-1"
config "pass"
expect_exit 0 run1

# 3. Prompt suites.
suite() { printf '{"suite": "s", "cases": [{"id": "a", "raw": "hi", %s}]}' "$1" >"$WORK/suite.json"; }
golden1() { "$BIN" golden --model "$M" --cases "$WORK/suite.json" --out "$WORK/golden" --force; }
suite '"max_new_tokens": 1e300'
expect_exit 128 golden1
expect_out "case 'a': field 'max_new_tokens': expected an integer in [0, 1048576], found 1e+300"
suite '"sampling": {"temp": 1e300}'
expect_exit 128 golden1
expect_out "config: temp=1e+300: expected a number in [0, 100]"
suite '"sampling": {"top_k": 4096, "temp": 1}'
expect_exit 128 golden1
expect_out "case 'a': sampling top_k=4096 exceeds the vocabulary (2048)"
suite '"max_new_tokens": 1, "sampling": {"seed": 18446744073709551615, "temp": 1}'
expect_exit 0 golden1
grep -q '18446744073709551615' "$WORK/golden/manifest.json" || fail "the 64-bit seed is not in the record"

# 4. A golden record's manifest with numbers out of range and its checksum recomputed (as anyone
# editing a record can): compare refuses the record (128) naming the file, the field, what was
# expected and what was found. Negative noise floors made compare judge the reference itself bad
# (exit 1); 2^32 + 1 was read as format_version 1; an unknown ISA, a budget of 2^40 and a duplicate
# case id were accepted.
reseal() {  # reseal NAME PYTHON: a copy of $G at $WORK/NAME, its manifest edited by PYTHON (on m), resealed
  rm -rf "${WORK:?}/$1" && cp -r "$G" "$WORK/$1"
  python3 - "$WORK/$1/manifest.json" "$2" <<'PY'
import hashlib, json, sys
path, edit = sys.argv[1:3]
m = json.load(open(path))
def checksum(m):  # the tool's: SHA-256 of the compact, key-sorted JSON without the checksum itself
    body = {k: v for k, v in m.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
assert checksum(m) == m["manifest_sha256"], "this script does not compute the checksum as the tool does"
exec(edit)
m["manifest_sha256"] = checksum(m)
json.dump(m, open(path, "w"), indent=1)
PY
}
cmp_rec() { "$BIN" compare --golden "$WORK/$1" --model "$M" --case two-plus-two --no-decode; }
reseal rec-negative-floors "
for c in m['cases']:
    for fl in c['floors'].values():
        for k in ('iso_prefill', 'iso_decode'): fl[k] = [None if v is None else -v for v in fl[k]]
        for k in ('kld_prefill', 'kld_decode', 'mtp_kld'): fl[k] = None if fl[k] is None else -fl[k]"
expect_exit 128 cmp_rec rec-negative-floors
expect_out "$WORK/rec-negative-floors/manifest.json: field 'cases[0].floors.bf16.iso_prefill[0]': expected a rel_l2 noise floor >= 0"
reseal rec-version "m['format_version'] = 2**32 + 1"
expect_exit 128 cmp_rec rec-version
expect_out "manifest.json: field 'format_version': expected 1 (the version this tool reads), found 4294967297"
reseal rec-isa "m['settings']['cpu_isa'] = 'sse9'"
expect_exit 128 cmp_rec rec-isa
expect_out "field 'settings.cpu_isa': expected one of \"baseline\", \"avx2\" or \"avx512\", found \"sse9\""
reseal rec-budget-negative "m['cases'][1]['max_new_tokens'] = -1"
expect_exit 128 cmp_rec rec-budget-negative
expect_out "field 'cases[1].max_new_tokens': expected an integer in [0, 1048576]"
expect_out "found -1"
reseal rec-budget-huge "m['cases'][1]['max_new_tokens'] = 2**40"
expect_exit 128 cmp_rec rec-budget-huge
expect_out "found 1099511627776"
reseal rec-dup-id "m['cases'][2]['id'] = m['cases'][0]['id']"
expect_exit 128 cmp_rec rec-dup-id
expect_out "field 'cases[2].id': expected an id of its own"
reseal rec-in-range "m['settings']['cpu_isa'] = 'baseline'"  # the same edit within range: the record is judged
expect_exit 0 cmp_rec rec-in-range
expect_out "verdict: good (exit 0)"

# 5. golden --plan validates its options as golden does (one function, check_golden_options): the
# plan took --positions -1, --topk 0 and --floor-classes zzz; each is now refused by both with the
# same message. A rate of 1e-320 printed "-2147483648 h" (an int overflow): refused.
echo '{"suite": "s", "cases": [{"id": "a", "raw": "hi", "max_new_tokens": 2}]}' >"$WORK/plan-suite.json"
rates=(--storage-gbps 1 --memory-gbps 1 --gflops 1)
for opt in "--positions -1" "--topk 0" "--floor-classes zzz" "--gen-tokens 2000000" "--layers 99"; do
  expect_exit 128 "$BIN" golden --plan --model "$M" --cases "$WORK/plan-suite.json" "${rates[@]}" $opt
  cp "$WORK/out" "$WORK/plan.out"
  expect_exit 128 "$BIN" golden --model "$M" --cases "$WORK/plan-suite.json" --out "$WORK/plan-golden" $opt
  cmp -s "$WORK/out" "$WORK/plan.out" || { diff "$WORK/plan.out" "$WORK/out" >&2; fail "golden and golden --plan refuse '$opt' differently"; }
  grep -qF -- "${opt%% *}" "$WORK/out" || { cat "$WORK/out" >&2; fail "the refusal of '$opt' does not name the option"; }
done
[ ! -e "$WORK/plan-golden" ] || fail "a refused golden run wrote a record"
expect_exit 128 "$BIN" golden --plan --model "$M" --cases "$WORK/plan-suite.json" --storage-gbps 1 --memory-gbps 1e-320 --gflops 1
expect_out "--memory-gbps must be a positive number of at least 0.001 and below 1e9, found 1e-320"
expect_exit 0 "$BIN" golden --plan --model "$M" --cases "$WORK/plan-suite.json" "${rates[@]}"
expect_out "estimate: "
echo "bad_numbers: ok"
