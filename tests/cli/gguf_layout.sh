# The trained model's f32 GGUF is llama.cpp's converter output, kept in git as its layout
# (models/tiny-trained-gguf: header, computed tensors, where every other tensor's bytes come from in
# models/tiny-trained) and rebuilt by tools/gguf_rebuild.py (make gguf):
#  - the rebuild gives the recorded SHA-256, byte for byte;
#  - a damaged layout is refused (exit 1, naming the digests), never a silently different model;
#  - where llama.cpp's converter can run here (its source from scripts/build-llama-cpp.sh, torch and
#    numpy installed), converting the checkpoint again gives the same bytes: the layout is the
#    converter's file, not ours. Without them that part says why it did not run.
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
L="$SRC/models/tiny-trained-gguf"
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sha256"])' "$L/layout.json")

expect_exit 0 python3 "$SRC/tools/gguf_rebuild.py" "$L" "$WORK/rebuilt.gguf"
expect_out "the converter's file"
[ "$(sha256sum "$WORK/rebuilt.gguf" | cut -d' ' -f1)" = "$want" ] || fail "the rebuilt GGUF's digest is not the recorded one"

mkdir -p "$WORK/bad"
cp "$L/layout.json" "$L/header.bin" "$WORK/bad/"
python3 - "$L/extra.bin" "$WORK/bad/extra.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[100] ^= 1; open(sys.argv[2], "wb").write(b)
PY
expect_exit 1 python3 "$SRC/tools/gguf_rebuild.py" "$WORK/bad" "$WORK/bad.gguf"
expect_out "the converter's file had $want"
[ ! -e "$WORK/bad.gguf" ] || fail "a mismatching rebuild was written"
expect_exit 1 python3 "$SRC/tools/gguf_rebuild.py" "$WORK/nowhere"

LLAMA_SRC="${DEGEN_LLAMA_CPP:-$SRC/build/llama.cpp}/src"
if [ -f "$LLAMA_SRC/convert_hf_to_gguf.py" ] && python3 -c 'import torch, numpy' 2>/dev/null; then
  expect_exit 0 python3 "$SRC/tools/convert_gguf.py" "$SRC/models/tiny-trained" "$WORK/converted.gguf" --outtype f32 \
    --llama "$LLAMA_SRC"
  cmp "$WORK/converted.gguf" "$WORK/rebuilt.gguf" || fail "llama.cpp's converter now writes other bytes than the layout records (re-record with tools/gguf_layout.py)"
  echo "llama.cpp's converter, run again: the same $(stat -c %s "$WORK/converted.gguf") bytes"
else
  echo "note: llama.cpp's converter not run (needs $LLAMA_SRC/convert_hf_to_gguf.py from scripts/build-llama-cpp.sh, and torch and numpy): the layout's digest is checked, not re-derived"
fi
echo "gguf layout: ok"
