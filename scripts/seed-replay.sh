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
set -euo pipefail
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

# The cells the next steps use, from the sweep's own results: the first good cell; the bad cell that
# differs from it in the most axes; the user's cell nearest the good one (the good cell's attention,
# ssm_dtype and MTP at tp=2: bad too).
python3 - "$out/sweep/results.jsonl" "$out/cells.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
good = [r for r in rows if r["verdict"] == "good"]
bad = [r for r in rows if r["verdict"] == "bad"]
if not good or not bad:
    sys.exit(f"seed-replay: the sweep has {len(good)} good and {len(bad)} bad cells; it needs both")
g = good[0]
differ = lambda r: sum(a != b for a, b in zip(r["values"], g["values"]))
far = max(bad, key=differ)
near = [r for r in bad if r["values"][:-1] == g["values"][:-1]]
if not near:
    sys.exit("seed-replay: no bad cell shares the good cell's attention, ssm_dtype and MTP")
json.dump({"good": g["cell"], "bad": far["cell"], "bad_near": near[0]["cell"]}, open(sys.argv[2], "w"), indent=1)
PY
good=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["good"])' "$out/cells.json")
bad=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bad"])' "$out/cells.json")
near=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bad_near"])' "$out/cells.json")

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

# What it comes to, from the outputs above.
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, sys, os
out = sys.argv[1]
rep = json.load(open(os.path.join(out, "report.json")))
sw = rep["sweeps"][0]
effects = {}
for e in sw["main_effects"]:
    effects.setdefault(e["axis"], []).append(e)
print("main effects (share of bad cells with each value):")
for axis, es in effects.items():
    shares = [f'{e["value"]} {e["bad_with"]}/{e["with"]}' for e in es]
    same = len({e["bad_with"] * 1.0 / e["with"] for e in es}) == 1
    print(f'  {axis:10} {"no effect" if same else "EFFECT   "}  ' + ", ".join(shares))
b = json.load(open(os.path.join(out, "bisect.json")))
print("bisect good -> bad: culprit toggles " + ", ".join(b["culprit_toggles"]))
loc = json.load(open(os.path.join(out, "localise.json"))).get("localisation", {})
print(f'bisect within tp=2: layer {loc.get("layer")}, operation {loc.get("op")}-{loc.get("layer")}, '
      f'confirmed by patching: {bool((loc.get("patch") or {}).get("confirmed"))}')
c = rep["compares"][0]
for k in c["cases"]:
    t = k["generation"]["text"] or {}
    same = t.get("golden") == t.get("tested")
    print(f'text {k["id"]:14} {"the same as the golden" if same else "differs from byte %d" % t.get("common_prefix_bytes", 0)}'
          f'; degenerate: {k["generation"]["degenerate"]}; KLD prefill {k["kld_mean_prefill"]:.2e}; verdict {k["verdict"]}')
# What a user would see, said plainly: on this model the text may show nothing where compare does.
if not any(k["generation"]["degenerate"] for k in c["cases"]):
    same = any((k["generation"]["text"] or {}).get("golden") == (k["generation"]["text"] or {}).get("tested")
               for k in c["cases"])
    fb = c["first_break"] or {}
    layer = next((l for l in c["layers"] if l["layer"] == fb.get("layer")), None)
    kld = [k["kld_mean_prefill"] for k in c["cases"]]
    print("no tested text degenerates" + (": the seed's prompt is answered as the golden answers it" if same else "")
          + f"; compare catches the fault in the logits (mean KLD {min(kld):.2e} to {max(kld):.2e}, every case over its limit)"
          + (f' and in the per-layer error (layer {layer["layer"]}: rel_l2 {layer["iso_prefill"]:.3g} with the golden input'
             f' injected, limit {layer["limit_prefill"]:.3g})' if layer else ""))
PY
{ printf '# Seed replay (scripts/seed-replay.sh)\n\n```\n'; cat "$out/summary.txt"; printf '```\n\n'; cat "$out/report.md"; } > "$out/replay.md"
printf '\nseed replay finished in %ss; outputs in %s/\n' "$(( $(date +%s) - t0 ))" "$out"
