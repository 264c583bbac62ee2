#!/usr/bin/env bash
# make demo: the main job end to end on the shipped trained model (models/tiny-trained), in the
# seed's scenario: an engine with a Gated DeltaNet bug makes the model's text loop; switching the
# attention backend changes nothing; bisect names the GDN layer and the operation.
#  1. the shipped model (trained here, committed) and what it is;
#  2. its golden record (committed under golden/; made by `degenbisect golden`);
#  3. a sweep over the attention backends, with the planted GDN bug in every cell (cases/tiny-trained/matrix-demo.json);
#  4. the worst cell compared against the golden record: the looping text beside the reference's;
#  5. a bisect of the worst cell against the same engine without the bug: which toggle, which layer, which op;
#  6. the reports (Markdown and self-contained HTML: golden and tested text side by side, the loop framed).
# DEMO_OUT: another output folder than demo-out/ (tests/cli/demo.sh), relative to the folder the
# script is run from. The script replaces only a folder it made (scripts/lib/owned-dir.bash: the
# marker file .degenbisect-made-by in it), an empty one or none; another folder is refused (exit 128),
# untouched.
set -euo pipefail
source "$(dirname "$0")/lib/owned-dir.bash"
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(owned_abs "${1:-$root/build/degenbisect}")
out=$(owned_abs "${DEMO_OUT:-$root/demo-out}")
cd "$root"
owned_fresh "$out" scripts/demo.sh || exit 128
model=models/tiny-trained
golden=golden/tiny-trained/smoke
matrix=cases/tiny-trained/matrix-demo.json
cases=(--case two-plus-two --case recall-after-story)
step() { printf '\n== %s\n' "$*"; }
t0=$(date +%s)

step "inspect $model (trained here: tools/train_tiny_hybrid.py; see models/README.md)"
"$bin" inspect "$model" | tee "$out/inspect.txt"

step "golden record $golden (committed; regenerate with: $bin golden --model $model --cases cases/tiny-trained/smoke.json --out $golden --positions 32 --force)"
"$bin" compare --golden "$golden" --model "$model" "${cases[@]}" --no-decode -q > "$out/self-check.txt"
echo "the CPU reference reproduces its own golden record: good"

step "sweep: $matrix (the GPU storage path, a Gated DeltaNet bug planted in every cell, three attention backends)"
# exit 1 is expected here (the planted bug makes every cell bad); 125/128 are not
set +e
"$bin" -q sweep --golden "$golden" --model "$model" --matrix "$matrix" --out "$out/sweep" "${cases[@]}" > "$out/sweep.txt"
code=$?
set -e
cat "$out/sweep.txt"
[ "$code" -le 1 ] || { echo "demo: sweep failed (exit $code)" >&2; exit "$code"; }
worst=$(cat "$out/sweep/worst_cell.txt" 2>/dev/null || true)
[ -n "$worst" ] || { echo "demo: no cell was bad; the planted bug went unnoticed" >&2; exit 1; }

step "compare the worst cell: $worst"
set +e
"$bin" -q compare --golden "$golden" --model "$model" --config "$worst" "${cases[@]}" --json "$out/compare.json" > "$out/compare.txt"
code=$?
set -e
cat "$out/compare.txt"
[ "$code" -le 1 ] || { echo "demo: compare failed (exit $code)" >&2; exit "$code"; }

step "bisect the worst cell against the same engine without the bug"
set +e
"$bin" -q bisect --golden "$golden" --model "$model" --bad "$worst" --good precision=bf16 "${cases[@]}" \
  --replay "$out/bisect-replay.jsonl" --json "$out/bisect.json" > "$out/bisect.txt"
code=$?
set -e
cat "$out/bisect.txt"
[ "$code" -le 1 ] || { echo "demo: bisect failed (exit $code)" >&2; exit "$code"; }

step "reports"
"$bin" report "$out/sweep" "$out/compare.json" "$out/bisect.json" --format md -o "$out/report.md"
"$bin" report "$out/sweep" "$out/compare.json" "$out/bisect.json" --format html -o "$out/report.html"

printf '\ndemo finished in %ss; outputs in %s/ (open report.html: the looping text beside the reference'"'"'s):\n' \
  "$(( $(date +%s) - t0 ))" "$out"
ls -1 "$out" | sed 's/^/  /'
