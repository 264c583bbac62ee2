# `report` through the real CLI: every format from the committed fixtures (tests/fixtures/report),
# the format from -o's extension, input errors (128); a real sweep run as two shards merges into
# the same table as the unsharded run (timings aside), and --expect-shards (a job array's final merge)
# gives the sweep's exit code or refuses a missing, mismatched or incomplete shard by name (128);
# compare and bisect JSON written by the tool are accepted; the README's report commands work.
source "$(dirname "$0")/lib.bash"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")  # the README part runs from another folder
fx="$SRC/tests/fixtures/report"

# Every format, to stdout and to files.
expect_exit 0 "$BIN" report "$fx/sweep"
expect_out "# degenbisect report: **bad**"
expect_out "| \`precision=bf16,ssm_dtype=fp32\` | good |"
expect_exit 0 "$BIN" report "$fx" --format json
grep -q '"schema_version": 1' "$WORK/out" || fail "JSON lacks schema_version"
expect_exit 0 "$BIN" report "$fx" -o "$WORK/r.html"
head -c 15 "$WORK/r.html" | grep -q '<!DOCTYPE html>' || fail "-o r.html did not write HTML"
if grep -Eq 'https?:|src=|@import|url\(|<link' "$WORK/r.html"; then fail "the HTML references something outside itself"; fi
expect_exit 0 "$BIN" report "$fx" -o "$WORK/r.xml"
grep -q '<testsuites name="degenbisect report" tests="23" failures="13" errors="0" skipped="2"' "$WORK/r.xml" || fail "JUnit counts"
if command -v xmllint >/dev/null; then xmllint --noout "$WORK/r.xml" || fail "xmllint rejects the JUnit XML"; fi
expect_exit 0 "$BIN" report "$fx/compare.json" "$fx/bisect.json" --format md -o "$WORK/r.md"
grep -q "Prime suspect: layer 0" "$WORK/r.md" || fail "Markdown lacks the compare summary"
grep -q "gdn_core-2" "$WORK/r.md" || fail "Markdown lacks the bisect's operation"

# Input errors: 128, naming the path.
expect_exit 128 "$BIN" report "$WORK/none"
expect_out "no such file or folder"
expect_exit 128 "$BIN" report "$fx/cases.json"
expect_out "not a compare or bisect result"
expect_exit 128 "$BIN" report "$fx" --format pdf
expect_out "expected md, html, json or junit"
expect_exit 128 "$BIN" report
expect_exit 128 "$BIN" report "$fx/compare.json" --model "$WORK"
expect_out "no tokenizer.json"
# A compare JSON without a verdict (truncated or hand-made) is not a compare result: 128, not "within tolerances".
python3 -c 'import json,sys; j = json.load(open(sys.argv[1])); del j["verdict"]; json.dump(j, open(sys.argv[2], "w"))' \
  "$fx/compare.json" "$WORK/noverdict.json"
expect_exit 128 "$BIN" report "$WORK/noverdict.json"
expect_out 'not a compare result: expected "verdict": good, bad, model-intrinsic or untestable, found no "verdict" field'
if grep -q "within tolerances" "$WORK/out"; then fail "a compare JSON without a verdict was rendered"; fi

# A real sweep, unsharded and as two shards: the same report, apart from the seconds column.
m="$WORK/tiny"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
cat >"$WORK/cases.json" <<'EOF'
{"suite": "cli-report", "defaults": {"max_new_tokens": 4},
 "cases": [{"id": "sum", "prompt": "What is 2+2?"}, {"id": "raw", "raw": "red green blue, red green blue,"}]}
EOF
expect_exit 0 "$BIN" -q golden --model "$m" --cases "$WORK/cases.json" --out "$WORK/golden"
sweep=(-q sweep --golden "$WORK/golden" --model "$m" --no-decode --axis gdn=chunked,recurrent --axis attn=naive,flash
       --base fault=gdn-head-mod@2)
set +e
"$BIN" "${sweep[@]}" --out "$WORK/all" >/dev/null 2>&1
all_rc=$?
"$BIN" "${sweep[@]}" --out "$WORK/s1" --shard 1/2 >/dev/null 2>&1
"$BIN" "${sweep[@]}" --out "$WORK/s2" --shard 2/2 >/dev/null 2>&1
set -e
untimed() { awk -F'|' 'NF >= 10 && /^\|/ { $9 = "" } { print }' "$1"; }
expect_exit 0 "$BIN" report "$WORK/all" -o "$WORK/all.md"
expect_exit 0 "$BIN" report "$WORK/s2" "$WORK/s1" -o "$WORK/merged.md"
diff <(untimed "$WORK/all.md") <(untimed "$WORK/merged.md") || fail "two shards do not merge into the unsharded report"
grep -q "4 of 4 cells" "$WORK/merged.md" || fail "merged report lacks cells"
expect_exit 0 "$BIN" report "$WORK/s1" -o "$WORK/half.md"
grep -q "2 cells have no result" "$WORK/half.md" || fail "one shard alone should name the missing cells"
# The final merge of a job array (--expect-shards N): the unsharded sweep's exit code, or 128 naming
# the shard that is missing, of another count, or of another sweep.
[ "$all_rc" = 1 ] || fail "the sweep with a planted bug exited $all_rc, expected 1"
expect_exit "$all_rc" "$BIN" report "$WORK/s1" "$WORK/s2" --expect-shards 2 -o "$WORK/final.md"
diff <(untimed "$WORK/all.md") <(untimed "$WORK/final.md") || fail "--expect-shards changed the report"
expect_exit 128 "$BIN" report "$WORK/s1" --expect-shards 2 -o "$WORK/final.md"
expect_out "shard 2/2 is missing"
expect_exit 128 "$BIN" report "$WORK/s1" "$WORK/s2" --expect-shards 3 -o "$WORK/final.md"
expect_out "$WORK/s1 is shard 1/2 of a sweep in 2 shards, expected shards of 3"
set +e
"$BIN" "${sweep[@]}" --axis kv_dtype=bf16 --out "$WORK/o2" --shard 2/2 >/dev/null 2>&1
set -e
expect_exit 128 "$BIN" report "$WORK/s1" "$WORK/o2" --expect-shards 2 -o "$WORK/final.md"
expect_out "different sweeps: $WORK/o2 is not of the sweep of $WORK/s1 (axes: "
# Every line of a shard is checked against its shard's sweep.json (identity, cell list, shard) and
# the cell count against the matrix (issue 40): a duplicated or moved line, an edited identity, an
# unknown verdict, a renamed cell, NUL bytes, a huge cell count: 128 naming shard, line and field.
tamper() {  # tamper PYTHON (on l: s1's lines, b: s2's lines, m: s1's sweep.json) EXPECTED-MESSAGE
  rm -rf "$WORK/t1" "$WORK/t2" && cp -a "$WORK/s1" "$WORK/t1" && cp -a "$WORK/s2" "$WORK/t2"
  python3 - "$WORK/t1" "$WORK/t2" <<PY
import json, sys
t1, t2 = sys.argv[1], sys.argv[2]
l = open(t1 + "/results.jsonl", "rb").read().splitlines(True)
b = open(t2 + "/results.jsonl", "rb").read().splitlines(True)
m = json.load(open(t1 + "/sweep.json"))
def edit(i, f):
    j = json.loads(l[i]); f(j); l[i] = (json.dumps(j) + "\n").encode()
$1
open(t1 + "/results.jsonl", "wb").writelines(l)
json.dump(m, open(t1 + "/sweep.json", "w"))
PY
  expect_exit 128 "$BIN" report "$WORK/t1" "$WORK/t2" --expect-shards 2 -o "$WORK/final.md"
  expect_out "$2"
}
t1="shard 1/2 ($WORK/t1): $WORK/t1/results.jsonl"
tamper 'l.append(l[0])' "$t1 line 3: field 'index' is 0, whose result is on line 1 already"
tamper 'l.append(b[0])' "$t1 line 3: field 'index' is 1, a cell of shard 2/2, not of this shard"
tamper 'edit(1, lambda j: j["identity"].update(model="0" * 64))' "$t1 line 2: field 'identity' differs from the shard's (sweep.json) in 'model'"
tamper 'edit(0, lambda j: j.update(verdict="zzz"))' "$t1: line 1: field 'verdict' is \"zzz\""
tamper 'edit(0, lambda j: j.update(cell="attn=flash"))' "$t1 line 1: field 'cell' is \"attn=flash\", expected \"fault=gdn-head-mod@2\""
tamper 'edit(1, lambda j: j.update(cell=j["cell"] + "\0"))' "$t1 line 2: field 'cell' is"
tamper 'l.append(b"\0\0\0\n")' "$t1: line 3 is not a sweep result"
tamper 'm["cells"] = 99999999999' "$WORK/t1/sweep.json: field 'cells' is 99999999999, expected a cell count of at most 100000"
tamper 'm["cells"] = 7' "shard 1/2 ($WORK/t1): sweep.json: field 'cells' is 7, expected 4"
head -n 1 "$WORK/s2/results.jsonl" >"$WORK/s2-cut" && cp "$WORK/s2-cut" "$WORK/s2/results.jsonl"
expect_exit 128 "$BIN" report "$WORK/s1" "$WORK/s2" --expect-shards 2 -o "$WORK/final.md"
expect_out "shard 2/2 ($WORK/s2) is incomplete: 1 of its 2 cells have a result"

# compare and bisect JSON straight from the tool, with the tokenizer for the text.
set +e
"$BIN" -q compare --golden "$WORK/golden" --model "$m" --config fault=gdn-head-mod@2 --json "$WORK/c.json" >/dev/null 2>&1
"$BIN" -q bisect --golden "$WORK/golden" --model "$m" --bad fault=gdn-head-mod@2 --no-decode --json "$WORK/b.json" >/dev/null 2>&1
set -e
expect_exit 0 "$BIN" report "$WORK/c.json" "$WORK/b.json" --model "$m" -o "$WORK/cb.html"
grep -q "golden (CPU reference)" "$WORK/cb.html" || fail "the HTML lacks the decoded text"
grep -q "first break: layer 2" "$WORK/cb.html" || fail "the HTML lacks the culprit layer"

# The README's commands (## Usage / ### report), from the source tree with the shipped model.
if [ -f "$SRC/models/tiny-qwen35/model.safetensors" ]; then
  mkdir -p "$WORK/readme"
  cd "$WORK/readme"
  ln -sfn "$SRC/models" models
  ln -sfn "$SRC/golden" golden
  mkdir -p build && ln -sfn "$BIN" build/degenbisect
  awk '/^### report/{on=1; next} /^##/{on=0} on && /^ *build\/degenbisect /' "$SRC/README.md" | sed 's/^ *//' >"$WORK/readme.sh"
  [ "$(wc -l <"$WORK/readme.sh")" -ge 5 ] || fail "README has no '### report' commands"
  set +e
  while IFS= read -r cmd; do
    bash -c "$cmd" >"$WORK/out" 2>&1
    rc=$?
    [ $rc = 0 ] || [ $rc = 1 ] || { cat "$WORK/out" >&2; fail "README command failed ($rc): $cmd"; }
  done <"$WORK/readme.sh"
  set -e
  [ -f out/report.html ] || fail "the README's commands did not write out/report.html"
fi
echo "report: ok"
