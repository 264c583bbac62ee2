# What scripts/seed-replay.sh reads from degenbisect's JSON (tools/seed_replay.py), without running the
# replay (cli:seed_replay runs it, in about a minute): on committed outputs of a real replay, cut to the
# fields read (tests/fixtures/seed-replay/), the cells chosen and the summary must be those the replay
# wrote (cells.json, summary.txt: what the script's own Python printed before it moved to tools/).
# Then a variant whose text degenerates (no "no tested text degenerates" line), and the refusals: a
# sweep without a bad cell, a missing output (exit 1, saying what was expected and what was found).
# A second or two.
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
F="$SRC/tests/fixtures/seed-replay"
T="$SRC/tools/seed_replay.py"
expect_exit 0 python3 "$T" cells "$F/sweep-results.jsonl" "$WORK/cells.json"
cmp "$F/cells.json" "$WORK/cells.json" || fail "cells.json differs from tests/fixtures/seed-replay/cells.json"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["good"]); print(c["bad"]); print(c["bad_near"])' \
  "$F/cells.json" | diff - "$WORK/out" || fail "the cells printed are not good, bad and bad_near, one a line"
expect_exit 0 python3 "$T" summary "$F"
diff -u "$F/summary.txt" "$WORK/out" || fail "the summary differs from tests/fixtures/seed-replay/summary.txt"
# A replay whose first case's text degenerates and differs from the golden from byte 3.
mkdir -p "$WORK/degen"
cp "$F/bisect.json" "$F/localise.json" "$WORK/degen/"
python3 - "$F/report.json" "$WORK/degen/report.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
k = rep["compares"][0]["cases"][0]
k["generation"]["degenerate"] = True
k["generation"]["text"].update(tested="The The The", common_prefix_bytes=3)
json.dump(rep, open(sys.argv[2], "w"))
PY
expect_exit 0 python3 "$T" summary "$WORK/degen"
expect_out "text two-plus-two   differs from byte 3; degenerate: True; KLD prefill 7.60e-04; verdict bad"
! grep -q "no tested text degenerates" "$WORK/out" || fail "a degenerate text was said not to degenerate"
# Refusals.
head -n 1 "$F/sweep-results.jsonl" >"$WORK/good-only.jsonl"
expect_exit 1 python3 "$T" cells "$WORK/good-only.jsonl" "$WORK/c.json"
expect_out "seed-replay: the sweep has 1 good and 0 bad cells; it needs both"
expect_exit 1 python3 "$T" summary "$WORK/nowhere"
expect_out "seed-replay: expected $WORK/nowhere/report.json, a step's JSON output; found none"
echo '{"sweeps": []}' >"$WORK/degen/report.json"
expect_exit 1 python3 "$T" summary "$WORK/degen"
expect_out "expected degenbisect's JSON outputs in the form this replay reads"
expect_exit 2 python3 "$T" cellz
expect_out "invalid choice: 'cellz'"
echo "seed replay JSON: ok"
