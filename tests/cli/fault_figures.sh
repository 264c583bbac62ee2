# scripts/fault-figures.sh (tools/fault_figures.py) on the binary's own JSON: a stand-in degenbisect
# (tests/cli/fault_figures_stub.py) answers `faults --json`, eval's fault table and selftest from
# tests/fixtures/fault-figures/runs.json: what the real commands wrote for five faults, and made-up
# cases for the rest (an untestable row whose reason names the toggles, so the fault is run again with
# them; refusals without JSON; a table without rows; selftest's two JSON forms). The Markdown table
# must be the committed one (expected.md, what the script printed before it became a Python
# program), --json must hold each fault's last JSON, and bad options exit 128. A few seconds.
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
F="$SRC/tests/fixtures/fault-figures"
export STUB_FIXTURE="$F/runs.json" STUB_ROOT="$SRC"
# The stand-in through the interpreter itself (a python3 on PATH may be a slow launcher shim).
PY=$(python3 -c 'import sys; print(sys.executable)')
STUB="$WORK/degenbisect"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$PY" "$SRC/tests/cli/fault_figures_stub.py" >"$STUB"
chmod +x "$STUB"
ff() { bash "$SRC/scripts/fault-figures.sh" "$@"; }
same() {  # the table of the last command against a committed one (the run's seconds left out)
  grep -v '^fault-figures: ' "$WORK/out" | sed -E 's/\([0-9]+ s in all/(N s in all/' >"$WORK/table.md"
  diff -u "$F/$1" "$WORK/table.md" || fail "the table differs from tests/fixtures/fault-figures/$1"
}
expect_exit 0 ff --bin "$STUB" --json "$WORK/all.json"
same expected.md
expect_out "fault-figures: gdn-head-mod done"
python3 - "$F/runs.json" "$WORK/all.json" "$SRC" <<'PY' || fail "--json"
import json, sys
fixture, rows, root = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
written = lambda doc: json.loads(json.dumps(doc).replace("@ROOT@", root))  # as the stand-in writes it
assert [r["fault"] for r in rows] == [f["name"] for f in fixture["catalogue"]], [r["fault"] for r in rows]
for r in rows:
    run = fixture["runs"][r["fault"]]
    # the table of the fault's last eval that wrote one (gdn-head-mod: the second, with prefill_chunk=8)
    tables = [e["json"] for e in run["eval"].values() if e["json"] is not None]
    assert r["table"] == (written(tables[-1]) if tables else None), r["fault"]
    assert r["selftest"] == written(run["selftest"]["json"]), r["fault"]
PY
# Options: the faults named, their cases, no selftest; the same through the tool itself.
expect_exit 0 ff --bin "$STUB" --no-selftest --fault gdn-head-mod --fault kv-off-by-one --questions 3 --max-new-tokens 5 --case a --case b
same expected-no-selftest.md
expect_exit 0 env DEGEN_SCRIPT_NAME=fault-figures.sh python3 "$SRC/tools/fault_figures.py" --bin "$STUB" --no-selftest \
  --fault gdn-head-mod --fault kv-off-by-one --questions 3 --max-new-tokens 5 --case a --case b
same expected-no-selftest.md
# Bad input: exit 128 with what was expected and what was found.
expect_exit 128 ff --bogus
expect_out "fault-figures.sh: unknown argument '--bogus' (--help)"
expect_exit 128 ff --fault
expect_out "--fault: expected one argument"
expect_exit 128 ff --suite nope
expect_out "no record at $SRC/golden/tiny-trained/nope"
expect_exit 128 ff --bin "$WORK/nope"
expect_out "no binary at $WORK/nope (build it first: make build)"
expect_exit 128 env STUB_FAIL_FAULTS=1 bash "$SRC/scripts/fault-figures.sh" --bin "$STUB"
expect_out 'fault-figures.sh: `degenbisect faults --json` failed: stand-in: no catalogue'
expect_exit 0 ff --help
expect_out "--max-new-tokens N"
echo "fault figures: ok"
