#!/usr/bin/env bash
# make demo: the main job end to end on the shipped model.
#  1. the shipped model (synthesized: the same bytes on every machine) and what it is;
#  2. its golden record (committed under golden/; made by `degenbisect golden`);
#  3. a sweep over a small toggle matrix with one planted engine bug;
#  4. a bisect of the worst cell: which toggle, which layer, which operation;
#  5. the reports (Markdown and self-contained HTML) when `degenbisect report` exists.
set -euo pipefail
bin=${1:-build/degenbisect}
cd "$(dirname "$0")/.."
out=demo-out
rm -rf "$out"
mkdir -p "$out"
model=models/tiny-qwen35
golden=golden/tiny-qwen35/smoke
step() { printf '\n== %s\n' "$*"; }
t0=$(date +%s)

if [ ! -f "$model/model.safetensors" ]; then
  step "synthesizing the shipped model into $model"
  "$bin" synth --preset tiny-qwen35 --out "$model"
fi
step "inspect $model"
"$bin" inspect "$model" | tee "$out/inspect.txt"

step "golden record $golden (committed; regenerate with: $bin golden --model $model --cases cases/smoke.json --out $golden --force)"
"$bin" compare --golden "$golden" --model "$model" --case two-plus-two --no-decode -q > "$out/self-check.txt"
echo "the CPU reference reproduces its own golden record: good"

step "sweep: cases/matrix-demo.json (precision=bf16 x attn x ssm_dtype, plus one cell with a planted bug)"
# exit 1 is expected here (the planted bug makes a cell bad); 125/128 are not
set +e
"$bin" -q sweep --golden "$golden" --model "$model" --matrix cases/matrix-demo.json --out "$out/sweep" \
  --case two-plus-two --case repeated-pattern > "$out/sweep.txt"
code=$?
set -e
cat "$out/sweep.txt"
[ "$code" -le 1 ] || { echo "demo: sweep failed (exit $code)" >&2; exit "$code"; }
worst=$(cat "$out/sweep/worst_cell.txt" 2>/dev/null || true)
if [ -n "$worst" ]; then
  step "bisect the worst cell: $worst"
  set +e
  "$bin" -q bisect --golden "$golden" --model "$model" --bad "$worst" --good precision=bf16 \
    --case two-plus-two --case repeated-pattern --replay "$out/bisect-replay.jsonl" --json "$out/bisect.json" \
    > "$out/bisect.txt"
  code=$?
  set -e
  cat "$out/bisect.txt"
  [ "$code" -le 1 ] || { echo "demo: bisect failed (exit $code)" >&2; exit "$code"; }
else
  echo "no cell was bad: nothing to bisect"
fi

if "$bin" report --help >/dev/null 2>&1; then
  step "reports"
  inputs=("$out/sweep")
  [ -f "$out/bisect.json" ] && inputs+=("$out/bisect.json")
  "$bin" report "${inputs[@]}" --format md -o "$out/report.md"
  "$bin" report "${inputs[@]}" --format html -o "$out/report.html"
fi

printf '\ndemo finished in %ss; outputs in %s/:\n' "$(( $(date +%s) - t0 ))" "$out"
ls -1 "$out" | sed 's/^/  /'
