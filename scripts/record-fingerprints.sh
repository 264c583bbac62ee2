#!/usr/bin/env bash
# Regenerates models/fingerprints.json: for each shipped tiny model, the model fingerprint and the
# SHA-256 of its model.safetensors as synthesized with seed 0 (tiny-realvocab with the synthetic
# tokenizer: with the real one, scripts/make-realvocab-model.sh, only config.json differs). tests/test_synth.cpp checks that every
# machine reproduces them (the committed golden records depend on it). Run after changing synth.
# The trained model (models/tiny-trained, committed) is recorded with the SHA-256 of its files;
# tests/test_trained_model.cpp checks them. Run after retraining it.
set -euo pipefail
bin=${1:-build/degenbisect}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "{"
  first=1
  for m in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next tiny-qwen35-tp3 tiny-realvocab; do
    "$bin" synth --preset "$m" --out "$tmp/$m" 2>/dev/null
    fp=$("$bin" inspect "$tmp/$m" --json | sed -n 's/.*"fingerprint": "\([0-9a-f]*\)".*/\1/p')
    sha=$(sha256sum "$tmp/$m/model.safetensors" | cut -d' ' -f1)
    [ $first = 1 ] || echo ","
    first=0
    printf '  "%s": {"fingerprint": "%s", "model.safetensors": "%s"}' "$m" "$fp" "$sha"
  done
  # the trained model is not synthesized: its committed files are recorded as they are
  m=models/tiny-trained
  fp=$("$bin" inspect "$m" --json | sed -n 's/.*"fingerprint": "\([0-9a-f]*\)".*/\1/p')
  printf ',\n  "tiny-trained": {"fingerprint": "%s"' "$fp"
  for f in model.safetensors config.json tokenizer.json heldout.json; do
    printf ', "%s": "%s"' "$f" "$(sha256sum "$m/$f" | cut -d' ' -f1)"
  done
  printf '}'
  echo
  echo "}"
} > models/fingerprints.json
cat models/fingerprints.json
