#!/usr/bin/env bash
# The seed's incident replayed on the shipped trained model (README: "The seed's incident, replayed").
# The incident: Qwen3.6-27B on SGLang at TP=2 with MTP on answered "The user is asking for 2+2"
# again and again; its user flipped attention backends for hours. The cause was SGLang PR 19411: the
# last decoder layer's MLP all-reduce was deferred to a layer that does not exist at TP >= 2. The
# catalogue's fault tp-skip-last-allreduce models it.
#  1. sweep (cases/tiny-trained/matrix-seed.json): the axes the user flipped by hand, attention backend
#     x ssm_dtype x MTP, on the GPU storage path, with the bug in every tp=2 cell; and the same at tp=1,
#     where the build is correct (no all-reduce to skip: the catalogue refuses the fault there, exit
#     125), so those cells run without it. The main effects say which axis matters.
#  2. bisect from a good cell of the sweep to the bad cell that differs from it most: which toggles.
#  3. bisect between two of the user's own cells (tp=2, both bad, as every cell the user tried was):
#     no toggle explains it, so bisect localises against the golden record: the layer and operation.
#  4. compare the bad cell on three cases, texts included, and the report (Markdown, HTML, JSON):
#     golden and tested text side by side.
# Outputs in $SEED_OUT (default seed-out/): sweep/, bisect.json, localise.json, compare.json,
# report.md, report.html, report.json, cells.json (the cells the script chose), summary.txt (what it comes
# to, the text's part said plainly) and replay.md (summary.txt, then report.md).
# SEED_OUT, when given, is relative to the folder the script is run from (the default, seed-out/,
# is in the repository). The script replaces only a folder it made (scripts/lib/owned-dir.bash: the
# marker file .degenbisect-made-by in it), an empty one or none; another folder is refused, untouched.
# Exit 0 when every step ran (the verdicts are "bad" where the bug is: that is the finding), 128 when
# SEED_OUT is refused, else the step's exit code.
# What the script reads from degenbisect's JSON is tools/seed_replay.py's (the cells it chooses, the summary).
# Usage: scripts/seed-replay.sh [DEGENBISECT] (default build/degenbisect), SEED_OUT in the environment.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
source "$(dirname "$0")/lib/owned-dir.bash"
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(owned_abs "${1:-$root/build/degenbisect}")
out=$(owned_abs "${SEED_OUT:-$root/seed-out}")
cd "$root"
owned_fresh "$out" scripts/seed-replay.sh || exit 128
model=models/tiny-trained
golden=golden/tiny-trained/smoke
matrix=cases/tiny-trained/matrix-seed.json
sweep_cases=(--case two-plus-two)                                       # the seed's prompt
compare_cases=(--case two-plus-two --case raw-story --case story-sampled)  # and two longer answers
step() { printf '\n== %s\n' "$*"; }
# Runs a command whose exit 1 is a finding (bad); 125 and 128 stop the replay.
finding() {
  set +e
  "$@"
  local code=$?
  set -e
  [ "$code" -le 1 ] || { echo "seed-replay: '$*' exited $code" >&2; exit "$code"; }
}
t0=$(date +%s)

step "sweep $matrix: attention x ssm_dtype x MTP, at tp=2 with tp-skip-last-allreduce and at tp=1 (case two-plus-two, prefill passes)"
finding "$bin" -q sweep --golden "$golden" --model "$model" --matrix "$matrix" "${sweep_cases[@]}" --no-decode \
  --out "$out/sweep" > "$out/sweep.txt"
cat "$out/sweep.txt"

# The cells the next steps use, from the sweep's own results (tools/seed_replay.py cells): the first
# good cell; the bad cell that differs from it in the most axes; the user's cell nearest the good one
# (the good cell's attention, ssm_dtype and MTP at tp=2: bad too).
cells=$(python3 tools/seed_replay.py cells "$out/sweep/results.jsonl" "$out/cells.json")
{ read -r good; read -r bad; read -r near; } <<<"$cells"

step "bisect from a good cell to a bad one: $good -> $bad"
finding "$bin" -q bisect --golden "$golden" --model "$model" --good "$good" --bad "$bad" "${sweep_cases[@]}" --no-decode \
  --json "$out/bisect.json" > "$out/bisect.txt"
cat "$out/bisect.txt"

step "bisect between two of the user's cells (both tp=2, both bad): $near -> $bad"
finding "$bin" -q bisect --golden "$golden" --model "$model" --good "$near" --bad "$bad" "${sweep_cases[@]}" --no-decode \
  --json "$out/localise.json" > "$out/localise.txt"
cat "$out/localise.txt"

step "compare the bad cell, texts included: $bad"
finding "$bin" -q compare --golden "$golden" --model "$model" --config "$bad" "${compare_cases[@]}" \
  --json "$out/compare.json" > "$out/compare.txt"
cat "$out/compare.txt"

step "reports: $out/report.md (golden and tested text side by side), report.html, report.json"
"$bin" report "$out/sweep" "$out/bisect.json" "$out/localise.json" "$out/compare.json" --format md -o "$out/report.md"
"$bin" report "$out/sweep" "$out/bisect.json" "$out/localise.json" "$out/compare.json" --format html -o "$out/report.html"
"$bin" report "$out/sweep" "$out/bisect.json" "$out/localise.json" "$out/compare.json" --format json -o "$out/report.json"
awk '/^Text, golden and tested side by side:/ {p = 1} p && /^\|/ {t = 1} p && t && /^$/ {exit} p' "$out/report.md"

# What it comes to, from the outputs above (tools/seed_replay.py summary).
python3 tools/seed_replay.py summary "$out" | tee "$out/summary.txt"
{ printf '# Seed replay (scripts/seed-replay.sh)\n\n```\n'; cat "$out/summary.txt"; printf '```\n\n'; cat "$out/report.md"; } > "$out/replay.md"
printf '\nseed replay finished in %ss; outputs in %s/\n' "$(( $(date +%s) - t0 ))" "$out"
