#!/usr/bin/env bash
# The demo: the main job on the shipped model. For now: synthesize the shipped tiny model
# (deterministic: the same bytes on every machine) and inspect it.
set -euo pipefail
bin=${1:-build/degenbisect}
cd "$(dirname "$0")/.."
out=demo-out
mkdir -p "$out"
model=models/tiny-qwen35
if [ ! -f "$model/model.safetensors" ]; then
  echo "== synthesizing the shipped model into $model"
  "$bin" synth --preset tiny-qwen35 --out "$model"
fi
echo "== inspect $model"
"$bin" inspect "$model" | tee "$out/inspect.txt"
"$bin" inspect "$model" --json > "$out/inspect.json"
echo
echo "demo outputs: $out/inspect.txt, $out/inspect.json"
