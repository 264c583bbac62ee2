#!/usr/bin/env bash
# The trained model under every fault of the catalogue: one Markdown row per fault, for docs/faults.md.
# A benchmark-style script, not a test: it prints figures and never fails on them.
#
# For each fault of `degenbisect faults --json` it runs
#   - eval's fault table (`eval --faults --fault NAME`) on models/tiny-trained with a record of
#     golden/tiny-trained (default: smoke, its chat case two-plus-two, "What is 2+2?", 48 tokens):
#     compare's verdict and first layer, the free-running generation (degenerate or not, and the
#     start of the tested text) and the held-out accuracy under the fault. The fault table adds what
#     a fault needs (tp=2, mtp=2, the serving toggles); this script also passes the serving toggles of
#     the catalogue's `needs` (prefill_chunk=8, prefix_cache=on, batch=4) as eval's base
#     configuration, so that the accuracy without the fault is measured under the same toggles;
#   - selftest on the smoke record (one case, one layer of each kind), unless --no-selftest.
# An untestable configuration (exit 125, or a fault-table row marked untestable) prints
# "untestable: reason"; a fault the model cannot host prints "n/a: reason".
#
# Usage: scripts/fault-figures.sh [--bin PATH] [--fault NAME]... [--suite S] [--case ID]... [--questions N]
#                                 [--max-new-tokens N] [--no-selftest] [--json FILE]
#   --bin             the binary (default build/degenbisect)
#   --fault           only this fault (repeatable; default: the whole catalogue)
#   --suite           record of golden/tiny-trained for compare and the free-running runs (default smoke;
#                     long-decode: 520-token cases, about 5 s per case and fault more)
#   --case            case of that record (repeatable; default with smoke: two-plus-two)
#   --questions       held-out questions per fault (default 10)
#   --max-new-tokens  token budget per question (default 128; eval's own default is 256)
#   --json            also write every fault-table and selftest row as JSON
# Cost: about 5-20 s per fault on 2 cores with the defaults, 28 faults in about 5 minutes (docs/faults.md).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/degenbisect
MODEL=$ROOT/models/tiny-trained
SUITE=smoke
SMOKE=$ROOT/golden/tiny-trained/smoke
SMOKE_CASE=two-plus-two
QUESTIONS=10
MAX_NEW=128
SELFTEST=1
JSON_OUT=
FAULTS=()
CASES=()

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --bin) BIN=$2; shift 2 ;;
    --fault) FAULTS+=("$2"); shift 2 ;;
    --case) CASES+=("$2"); shift 2 ;;
    --suite) SUITE=$2; shift 2 ;;
    --max-new-tokens) MAX_NEW=$2; shift 2 ;;
    --questions) QUESTIONS=$2; shift 2 ;;
    --no-selftest) SELFTEST=0; shift ;;
    --json) JSON_OUT=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fault-figures.sh: unknown argument '$1' (--help)" >&2; exit 128 ;;
  esac
done
RECORD=$ROOT/golden/tiny-trained/$SUITE
[[ -f $RECORD/manifest.json ]] || { echo "fault-figures.sh: no record at $RECORD" >&2; exit 128; }
if ! ((${#CASES[@]})); then
  if [[ $SUITE == smoke ]]; then CASES=(two-plus-two); else CASES=(story-fox); fi
fi

[[ -x $BIN ]] || { echo "fault-figures.sh: no binary at $BIN (build it first: make build)" >&2; exit 128; }
command -v python3 >/dev/null || { echo "fault-figures.sh: needs python3 (JSON)" >&2; exit 128; }
export FF_ROOT=$ROOT
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The catalogue as JSON (every fault's name; `needs` when the catalogue has that field).
if ! "$BIN" faults --json > "$WORK/faults.json" 2> "$WORK/faults.err"; then
  echo "fault-figures.sh: \`degenbisect faults --json\` failed: $(head -c 300 "$WORK/faults.err")" >&2
  exit 128
fi
mapfile -t ALL < <(python3 -c '
import json, sys
for f in json.load(open(sys.argv[1])): print(f["name"])' "$WORK/faults.json")
((${#FAULTS[@]})) || FAULTS=("${ALL[@]}")

# needs NAME: the catalogue's needs for the fault minus mtp= and tp= (the fault table adds those, and
# eval's --config takes no mtp); "" when none.
needs_of() {
  python3 - "$WORK/faults.json" "$1" <<'PY'
import json, sys
for f in json.load(open(sys.argv[1])):
    if f["name"] == sys.argv[2]:
        needs = f.get("needs") or ""
        keep = [kv for kv in needs.split(",") if kv and not kv.startswith(("mtp=", "tp="))]
        print(",".join(keep))
PY
}

# strip_mtp_tp "a=1,mtp=2,tp=2": the same without mtp= and tp=
strip_mtp_tp() { tr ',' '\n' <<<"$1" | grep -v -e '^mtp=' -e '^tp=' -e '^$' | paste -sd, -; }

# run_table NAME BASE: eval's fault table for one fault; writes $WORK/NAME.json, $WORK/NAME.out, returns the exit code
run_table() {
  local name=$1 base=$2 args=()
  for c in "${CASES[@]}"; do args+=(--case "$c"); done
  [[ -n $base ]] && args+=(--config "$base")
  timeout 900 "$BIN" -q eval --model "$MODEL" --golden "$RECORD" --faults --fault "$name" "${args[@]}" \
    --limit "$QUESTIONS" --fault-questions "$QUESTIONS" --max-new-tokens "$MAX_NEW" --mtp-max 0 --no-reference \
    --json "$WORK/$name.json" > "$WORK/$name.out" 2>&1
}

echo "fault-figures: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && git diff --quiet HEAD -- src 2>/dev/null || echo ' (+ uncommitted changes in src/)'), $BIN, record $SUITE (cases ${CASES[*]}), $QUESTIONS held-out questions per fault, $MAX_NEW tokens each" >&2
echo
echo "| fault | added config | free-running (all layers of its kind) | tested text | accuracy under the fault (without it) | compare: all layers / one layer | selftest |"
echo "|---|---|---|---|---|---|---|"
T0=$SECONDS
for name in "${FAULTS[@]}"; do
  t=$SECONDS
  base=$(needs_of "$name")
  run_table "$name" "$base"; rc=$?
  # A catalogue without a `needs` field: take the serving toggles from the untestable reason
  # ("... it needs prefill_chunk (for example prefill_chunk=8)") and run once more.
  if [[ -z $base && -f $WORK/$name.json ]]; then
    hint=$(python3 - "$WORK/$name.json" <<'PY'
import json, re, sys
for r in json.load(open(sys.argv[1])).get("faults", []):
    m = re.search(r"\(for example ([^)]*)\)", r.get("reason") or "")
    if r.get("verdict") == "untestable" and m:
        print(m.group(1)); break
PY
)
    hint=$(strip_mtp_tp "$hint")
    if [[ -n $hint ]]; then base=$hint; run_table "$name" "$base"; rc=$?; fi
  fi
  st="-"
  if ((SELFTEST)); then
    timeout 900 "$BIN" -q selftest --model "$MODEL" --golden "$SMOKE" --case "$SMOKE_CASE" --fault "$name" \
      --layers-per-kind 1 --json "$WORK/$name.selftest.json" > "$WORK/$name.selftest.out" 2>&1
    st_rc=$?
    st=$(python3 - "$WORK/$name.selftest.json" "$st_rc" "$WORK/$name.selftest.out" <<'PY'
import json, os, sys
path, rc, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if not os.path.exists(path):
    tail = open(out, errors="replace").read().strip().splitlines()[-1:] or ["?"]
    print(("untestable: " if rc == 125 else f"exit {rc}: ") + tail[0].replace(os.environ.get("FF_ROOT", "") + "/", "")[:120].replace("|", "/")); sys.exit()
doc = json.load(open(path))
rows = doc if isinstance(doc, list) else doc.get("rows", [])
if not rows:
    print(f"no rows (exit {rc})"); sys.exit()
by = {}
for r in rows: by.setdefault(r.get("status", "?"), []).append(r)
parts = []
for s in ("pass", "fail", "skip"):
    if s in by:
        rs = by[s]
        where = ", ".join((("L%d" % r["layer"]) if r.get("layer", -1) >= 0 else "model")
                          + (": " + r["found_op"] if s == "pass" and r.get("found_op") else "") for r in rs)
        note = ""
        if s != "pass" and rs[0].get("note"):
            note = ": " + rs[0]["note"].replace(os.environ.get("FF_ROOT", "") + "/", "")[:100]
        parts.append(f"{s} ({where}){note}")
print("; ".join(parts).replace("|", "/"))
PY
)
  fi
  python3 - "$WORK/$name.json" "$rc" "$WORK/$name.out" "$name" "$base" "$st" "$((SECONDS - t))" <<'PY'
import json, os, sys
path, rc, out, name, base, st, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
root = os.environ.get("FF_ROOT", "") + "/"
def clean(s, n=140): return " ".join(str(s).replace(root, "").split())[:n].replace("|", "/")
cfg = f"`{base}`" if base else "-"
if not os.path.exists(path):
    lines = [l for l in open(out, errors="replace").read().splitlines() if l.strip()]
    why = next((l for l in reversed(lines) if "untestable" in l or "error" in l.lower()), lines[-1] if lines else "?")
    kind = "untestable" if rc == 125 else f"error (exit {rc})"
    print(f"| {name} | {cfg} | {kind}: {clean(why)} | | | | {st} |"); sys.exit()
doc = json.load(open(path))
rows = doc.get("faults", [])
ref = doc.get("tested", {}).get("accuracy", {})
ref_s = f"{ref.get('correct', '?')}/{ref.get('n', '?')}" if ref else "?"
if not rows:
    print(f"| {name} | {cfg} | no fault-table row (exit {rc}) | | | | {st} |"); sys.exit()
first = rows[0]
def verdict(r):
    if not r.get("applicable", True): return "n/a: " + clean(r.get("reason", ""), 90)
    if r.get("verdict") == "untestable": return "untestable: " + clean(r.get("reason", ""), 200)
    v = r.get("verdict", "?")
    if r.get("first_layer") is not None: v += f" (layer {r['first_layer']})"
    return v
if not first.get("applicable", True) or first.get("verdict") == "untestable":
    print(f"| {name} | {cfg} | {verdict(first)} | | | | {st} |"); sys.exit()
cases = first.get("cases", 0)
free = f"{first.get('degenerate', 0)}/{cases} degenerate"
extra = []
if first.get("looping"): extra.append(f"{first['looping']} loop")
if first.get("empty"): extra.append(f"{first['empty']} empty")
if first.get("rules"): extra.append(first["rules"])
extra.append(f"seq_rep_4 {first.get('mean_seq_rep_4', 0):.3f}")
if first.get("golden_degenerate"): extra.append(f"golden {first['golden_degenerate']}/{cases}")
free += " (" + ", ".join(extra) + ")"
q = first.get("questions", 0)
acc = f"{first.get('correct', 0)}/{q}" + (f" = {100 * first.get('correct', 0) / q:.0f} %" if q else "") + f" ({ref_s})"
comp = " / ".join(f"{verdict(r)}" + ("" if i == 0 else f" [{r.get('scope', '')}]") for i, r in enumerate(rows[:2]))
ex = first.get("example") or ""
ex = clean(ex, 70).replace("`", "'")
ex = f"`{ex}`" if ex else ""
print(f"| {name} | {cfg} | {free} | {ex} | {acc} | {comp} | {st} |")
PY
  if [[ -n $JSON_OUT ]]; then
    python3 - "$WORK" "$name" >> "$WORK/all.jsonl" <<'PY'
import json, os, sys
w, n = sys.argv[1], sys.argv[2]
row = {"fault": n}
for k, f in (("table", f"{n}.json"), ("selftest", f"{n}.selftest.json")):
    p = os.path.join(w, f)
    row[k] = json.load(open(p)) if os.path.exists(p) else None
print(json.dumps(row))
PY
  fi
  echo "fault-figures: $name done ($((SECONDS - t)) s)" >&2
done
echo
echo "($((SECONDS - T0)) s in all; accuracy in brackets: the base configuration without the fault on the same questions)"
if [[ -n $JSON_OUT ]]; then
  python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1])], indent=1))' "$WORK/all.jsonl" > "$JSON_OUT"
fi
exit 0
