# Our tokenizer against llama.cpp's own test vectors for the qwen35 vocabulary
# (src/models/ggml-vocab-qwen35.gguf{,.inp,.out} of the llama.cpp that scripts/build-llama-cpp.sh
# unpacks): tools/gguf_vocab_to_tokenizer.py turns the vocab-only GGUF into a tokenizer.json, then
# `degenbisect tokenize --ids-only` must give exactly the .out ids for every .inp string. Also: the
# converter's --nfc variant, the qwen2 vectors when present (no --nfc there: all of them are NFC),
# and the converter's errors on bad files. Skips (77) when llama.cpp is not built; DEGEN_LLAMA_CPP
# names its directory (default SOURCE_DIR/build/llama.cpp).
#
# Note: llama.cpp's ggml-vocab-qwen35.gguf is not the 248,320-token Qwen3.5 vocabulary. It is the
# Qwen2 vocabulary (151,936 tokens, general.architecture qwen2; identical to ggml-vocab-qwen2.gguf
# except tokenizer.ggml.pre), so it tests the Qwen3.5 split pattern, not the Qwen3.5 merges.
#
# Convention of llama.cpp's reader (tests/test-tokenizer-0.cpp): the .inp is cut at every
# "\n__ggml_vocab_test__\n" (the newline before and after the marker belong to the separator, so a
# string keeps any other leading/trailing newlines; the file ends with a separator); .out has one
# line per string, ids separated by spaces. Strings are encoded without BOS and with
# parse_special=false; none of the strings contains a special token's text (checked below), so
# that flag changes nothing here (we, like Hugging Face, always match added tokens in text).
# The GGUF holds no normalizer and llama.cpp applies none to BPE vocabularies; the converter
# therefore writes none by default. With --nfc (as Hugging Face's Qwen2/Qwen3 tokenizer.json files,
# and as far as we know Qwen3.5's, have it) the strings that are not in NFC tokenize differently:
# that variant is checked against our own ids of the NFC-normalised strings instead. When the
# Python package `tokenizers` is installed, Hugging Face's library must agree on both files.
#
# The tokenizer loads in ~0.7 s (151k tokens), so the strings are not run one binary launch each:
# they are joined with a special token in between, which cuts the text into pieces that are
# normalised, pre-tokenized and merged independently (Hugging Face and our tokenizer alike); a few
# strings are run on their own too, to confirm that.
# Args: BINARY SOURCE_DIR WORKDIR; exit 0 pass, 77 skip.
source "$(dirname "$0")/lib.bash"

LLAMA="${DEGEN_LLAMA_CPP:-$SRC/build/llama.cpp}"
VOCAB="$LLAMA/src/models/ggml-vocab-qwen35.gguf"
if [ ! -f "$VOCAB" ]; then
  echo "llama_vocab: llama.cpp not built: run scripts/build-llama-cpp.sh (no $VOCAB); skipped"
  exit 77
fi
command -v python3 >/dev/null || { echo "llama_vocab: no python3 (the converter needs it); skipped"; exit 77; }
for f in "$VOCAB.inp" "$VOCAB.out"; do [ -f "$f" ] || fail "$f missing next to $VOCAB"; done
CONV="$SRC/tools/gguf_vocab_to_tokenizer.py"
start=$(date +%s.%N)

# check_vectors NAME VOCAB.gguf [nfc]: convert (and with "nfc" also --nfc), compare every vector.
check_vectors() {
  local name=$1 gguf=$2 nfc_dir=""
  expect_exit 0 python3 "$CONV" "$gguf" "$WORK/$name"
  expect_out "pre $name:"
  expect_out "normalizer none"
  cat "$WORK/out"
  if [ "${3:-}" = nfc ]; then
    nfc_dir="$WORK/$name-nfc"
    expect_exit 0 python3 "$CONV" --nfc "$gguf" "$nfc_dir"
    expect_out "normalizer NFC"
  fi
  python3 - "$BIN" "$gguf" "$WORK/$name" "$WORK/$name-run" "$nfc_dir" <<'EOF' || fail "$name: our tokenizer disagrees with llama.cpp's test vectors (see above)"
import json, os, subprocess, sys, unicodedata

binary, gguf, plain_dir, work, nfc_dir = sys.argv[1:6]
name = os.path.basename(plain_dir)
os.makedirs(work, exist_ok=True)

# --- the vectors, cut as llama.cpp's test-tokenizer-0 does
raw = open(gguf + ".inp", "rb").read()
sep = b"\n__ggml_vocab_test__\n"
inputs = raw.split(sep)
if inputs and inputs[-1] == b"":  # the file ends with a separator: nothing after it
    inputs.pop()
lines = open(gguf + ".out", "rb").read().decode("ascii").split("\n")
if lines and lines[-1] == "":
    lines.pop()
if len(lines) != len(inputs):
    sys.exit(f"{name}: {len(inputs)} strings in .inp but {len(lines)} lines in .out; expected one line per string")
texts = [b.decode("utf-8") for b in inputs]
expected = [[int(x) for x in line.split()] for line in lines]

tok = json.load(open(os.path.join(plain_dir, "tokenizer.json"), encoding="utf-8"))
added = [a["content"] for a in tok["added_tokens"]]
specials = [a for a in tok["added_tokens"] if a["special"]]
if not specials:
    sys.exit(f"{name}: the converted tokenizer has no special token to separate the strings with")
for i, t in enumerate(texts):
    for c in added:
        if c in t:
            sys.exit(f"{name}: vector {i} contains the added token {c!r}; llama.cpp's test does not parse "
                     f"special tokens but we always do, so this comparison would not be meaningful")
SEP, SEP_ID = specials[0]["content"], specials[0]["id"]

def esc(t, limit=240):
    s = json.dumps(t)
    return s if len(s) <= limit else s[:limit] + '..."'

def run(model_dir, text, tag):
    path = os.path.join(work, tag + ".txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    p = subprocess.run([binary, "tokenize", "--model", model_dir, "--ids-only", "--file", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{name}: degenbisect tokenize exited {p.returncode}: {p.stdout}{p.stderr}")
    return [int(x) for x in p.stdout.split()]

def run_batch(model_dir, strings, tag):
    text = SEP.join(strings)
    # every added-token match in the joined text must be one of our separators
    starts, pos = set(), 0
    for s in strings[:-1]:
        pos += len(s)
        starts.add(pos)
        pos += len(SEP)
    for c in added:
        j = text.find(c)
        while j != -1:
            if not (c == SEP and j in starts):
                sys.exit(f"{name}: joining the strings with {SEP!r} creates an added-token match {c!r} at {j}")
            j = text.find(c, j + 1)
    ids = run(model_dir, text, tag)
    out, cur = [], []
    for i in ids:
        if i == SEP_ID:
            out.append(cur)
            cur = []
        else:
            cur.append(i)
    out.append(cur)
    if len(out) != len(strings):
        sys.exit(f"{name}: the joined run gave {len(out) - 1} separators; expected {len(strings) - 1}")
    return out

# --- 1. the plain conversion (no normalizer, as llama.cpp): every vector must match. The same run
# also encodes the NFC form of the strings that are not NFC, for part 2.
nfc_texts = [unicodedata.normalize("NFC", t) for t in texts]
differ = [i for i in range(len(texts)) if nfc_texts[i] != texts[i]]
got = run_batch(plain_dir, texts + ([nfc_texts[i] for i in differ] if nfc_dir else []), "batch")
want = list(got[:len(texts)])
for k, i in enumerate(differ if nfc_dir else []):
    want[i] = got[len(texts) + k]
got = got[:len(texts)]
bad = [i for i in range(len(texts)) if got[i] != expected[i]]
for i in bad:
    alone = run(plain_dir, texts[i], f"single-{i}")
    first = next((k for k in range(min(len(alone), len(expected[i]))) if alone[k] != expected[i][k]),
                 min(len(alone), len(expected[i])))
    print(f"MISMATCH {name} vector {i}: input {esc(texts[i])}")
    print(f"  expected ({len(expected[i])}): {' '.join(map(str, expected[i]))}")
    print(f"  got      ({len(alone)}): {' '.join(map(str, alone))}" + ("" if alone == got[i] else
          f"\n  got in the joined run: {' '.join(map(str, got[i]))}"))
    print(f"  first difference at position {first}")
# the joined run equals separate runs: the longest string, one ending in whitespace, one with marks
picks = {max(range(len(texts)), key=lambda i: len(texts[i]))}
picks |= {next((i for i, t in enumerate(texts) if t[-1:].isspace()), 0)}
picks |= {next((i for i, t in enumerate(texts) if any(unicodedata.category(c).startswith("M") for c in t)), 0)}
for i in sorted(picks):
    alone = run(plain_dir, texts[i], f"single-{i}")
    if alone != got[i]:
        sys.exit(f"{name}: vector {i} {esc(texts[i])} gives {alone} on its own but {got[i]} in the joined run")
n_ids = len({a['id'] for a in tok['added_tokens']} | set(tok['model']['vocab'].values()))
print(f"{name}: {len(texts) - len(bad)}/{len(texts)} llama.cpp vectors match "
      f"(vocabulary {n_ids} ids: {len(tok['model']['vocab'])} BPE + {len(tok['added_tokens'])} added, "
      f"{len(tok['model']['merges'])} merges; {len(picks)} also run alone)")

# --- 2. the --nfc conversion must give, for every string, the plain conversion's ids of its NFC form
bad_nfc = []
if nfc_dir:
    got_nfc = run_batch(nfc_dir, texts, "batch-nfc")
    bad_nfc = [i for i in range(len(texts)) if got_nfc[i] != want[i]]
    for i in bad_nfc:
        print(f"MISMATCH {name} --nfc vector {i}: input {esc(texts[i])}\n  expected (plain conversion of the NFC "
              f"text): {' '.join(map(str, want[i]))}\n  got: {' '.join(map(str, got_nfc[i]))}")
    changed = [i for i in differ if want[i] != expected[i]]
    print(f"{name} --nfc: {len(texts) - len(bad_nfc)}/{len(texts)} vectors match our ids of the NFC text; "
          f"{len(differ)} strings are not NFC ({', '.join(map(str, differ)) or 'none'}), {len(changed)} of them "
          f"tokenize differently with NFC than llama.cpp (which applies no normalizer) expects")

# --- 3. Hugging Face `tokenizers`, when installed, reads both files and agrees with us
try:
    import tokenizers
except ImportError:
    print(f"{name}: note: python3 tokenizers not installed; Hugging Face cross-check skipped")
else:
    bad_hf = []
    for d, ours in [(plain_dir, got)] + ([(nfc_dir, got_nfc)] if nfc_dir else []):
        hf = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        for i, t in enumerate(texts):
            theirs = hf.encode(t, add_special_tokens=False).ids
            if theirs != ours[i]:
                bad_hf.append(i)
                print(f"MISMATCH {name} Hugging Face tokenizers on {os.path.basename(d)}, vector {i}: input "
                      f"{esc(t)}\n  tokenizers: {' '.join(map(str, theirs))}\n  ours: {' '.join(map(str, ours[i]))}")
    if not bad_hf:
        print(f"{name}: Hugging Face tokenizers {tokenizers.__version__} gives the same ids on the converted file(s)")
    bad_nfc += bad_hf
sys.exit(1 if bad or bad_nfc else 0)
EOF
}

check_vectors qwen35 "$VOCAB" nfc
# The Qwen2/Qwen3 pattern (Qwen3-Next) on the same vocabulary, when llama.cpp ships its vectors.
if [ -f "$LLAMA/src/models/ggml-vocab-qwen2.gguf.out" ]; then
  check_vectors qwen2 "$LLAMA/src/models/ggml-vocab-qwen2.gguf"
fi

# --- The converter's errors: exit 1 with what was expected and found, never a traceback.
expect_conv_error() {  # FILE TEXT
  expect_exit 1 python3 "$CONV" "$1" "$WORK/bad-out"
  expect_out "$2"
  if grep -q "Traceback" "$WORK/out"; then cat "$WORK/out" >&2; fail "converter printed a traceback for $1"; fi
}
head -c 100000 "$VOCAB" > "$WORK/truncated.gguf"       # inside tokenizer.ggml.tokens
expect_conv_error "$WORK/truncated.gguf" "truncated GGUF file"
expect_out "tokenizer.ggml.tokens"
head -c 20 "$VOCAB" > "$WORK/truncated-header.gguf"    # inside the key/value count
expect_conv_error "$WORK/truncated-header.gguf" "truncated GGUF file"
expect_conv_error "$VOCAB.inp" "not a GGUF file"
expect_out "expected the magic b'GGUF'"
: > "$WORK/empty.gguf"
expect_conv_error "$WORK/empty.gguf" "empty file"
expect_conv_error "$WORK/nothing-here.gguf" "cannot open"
# Small GGUF files written here: another version, no tokens, another tokenizer model.
python3 - "$WORK" <<'EOF'
import struct, sys
def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b
def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)
def kv_strs(k, vs):
    return s(k) + struct.pack("<IIQ", 9, 8, len(vs)) + b"".join(s(v) for v in vs)
def gguf(version, kvs):
    return b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs)) + b"".join(kvs)
w = sys.argv[1]
open(f"{w}/v4.gguf", "wb").write(gguf(4, [kv_str("general.architecture", "qwen35")]))
open(f"{w}/notokens.gguf", "wb").write(gguf(3, [kv_str("general.architecture", "qwen35"),
                                               kv_str("tokenizer.ggml.model", "gpt2")]))
open(f"{w}/llama.gguf", "wb").write(gguf(3, [kv_str("tokenizer.ggml.model", "llama"),
                                            kv_strs("tokenizer.ggml.tokens", ["<unk>", "a"])]))
EOF
expect_conv_error "$WORK/v4.gguf" "unsupported GGUF version 4; expected version 2 or 3"
expect_conv_error "$WORK/notokens.gguf" "no metadata key 'tokenizer.ggml.tokens'"
expect_conv_error "$WORK/llama.gguf" "tokenizer.ggml.model is \"llama\"; expected \"gpt2\""

echo "llama_vocab: done in $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)") s"
echo ok
