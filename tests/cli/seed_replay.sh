# The seed's incident replayed (scripts/seed-replay.sh, README "The seed's incident, replayed"): on the
# shipped trained model, a sweep of attention x ssm_dtype x MTP with tp-skip-last-allreduce in every
# tp=2 cell and the same cells at tp=1. Checked from the script's JSON outputs: the main effects say
# attention, ssm_dtype and MTP have no effect and TP does; bisect names the fault and, between two of
# the user's tp=2 cells, the last layer's MLP output (where the all-reduce was skipped); the Markdown
# report shows golden and tested text side by side. Cost: 52-61 s on 2 cores beside other work (about 35 s of CPU).
source "$(dirname "$0")/lib.bash"
out="$WORK/seed"
expect_exit 0 env SEED_OUT="$out" bash "$SRC/scripts/seed-replay.sh" "$BIN"
cat "$WORK/out"
expect_out "seed replay finished in"
python3 - "$out" "$SRC/models/tiny-trained/config.json" <<'PY' || fail "the seed replay's outputs"
import json, os, sys
out, config = sys.argv[1], json.load(open(sys.argv[2]))
last = config.get("text_config", config)["num_hidden_layers"] - 1
rep = json.load(open(os.path.join(out, "report.json")))

# The sweep: every tp=2 cell (the bug in it) bad, every tp=1 cell good.
sw = rep["sweeps"][0]
axes = [a["name"] for a in sw["axes"]]
assert axes == ["attn", "ssm_dtype", "mtp", "tp"], axes
assert len(sw["rows"]) == 4 * 2 * 2 * 2 and not sw["missing"], (len(sw["rows"]), sw["missing"])
for r in sw["rows"]:
    want = "bad" if "fault=tp-skip-last-allreduce" in r["values"][3] else "good"
    assert r["verdict"] == want, (r["cell"], r["verdict"])

# Main effects: the same share of bad cells with every value of attn, ssm_dtype and mtp; for tp, none
# bad at tp=1 and all bad at tp=2.
share = {}
for e in sw["main_effects"]:
    share.setdefault(e["axis"], {})[e["value"]] = e["bad_with"] / e["with"]
for axis in ("attn", "ssm_dtype", "mtp"):
    assert len(set(share[axis].values())) == 1, (axis, share[axis])
assert share["tp"] == {"tp=1": 0.0, "tp=2,fault=tp-skip-last-allreduce": 1.0}, share["tp"]
table = open(os.path.join(out, "sweep", "table.txt")).read()
for axis in ("attn", "ssm_dtype", "mtp"):
    assert f"-> {axis}: no effect" in table, table
assert "-> tp: effect" in table, table

# Bisect from a good cell to the bad cell that differs most: attention, ssm_dtype and MTP drop out;
# the fault (with the tp=2 it needs) is the cause.
b = json.load(open(os.path.join(out, "bisect.json")))
assert b["status"] == "found" and b["exit_code"] == 1, b["status"]
assert "fault:tp-skip-last-allreduce" in b["culprit_toggles"], b["culprit_toggles"]
assert not {"attn", "ssm_dtype", "mtp"} & set(b["culprit_toggles"]), b["culprit_toggles"]
assert {"attn", "ssm_dtype", "mtp"} <= set(b["differing"]), b["differing"]
# Between two of the user's cells (both tp=2, both bad): localised against the record to the last
# layer's MLP output, confirmed by patching that layer's output with the record's.
loc = json.load(open(os.path.join(out, "localise.json")))["localisation"]
assert loc["layer"] == last and loc["op"] == "ffn_out" and loc["patch"]["confirmed"], (loc["layer"], loc["op"], loc["patch"])

# The compare of the bad cell: bad on every case, with both texts in the report.
c = rep["compares"][0]
assert c["verdict"] == "bad", c["verdict"]
for k in c["cases"]:
    t = k["generation"]["text"]
    assert t and t["golden"] and t["tested"], k["id"]
md = open(os.path.join(out, "report.md")).read()
assert "Text, golden and tested side by side:" in md
assert "| `two-plus-two` | The user is asking for 2+2." in md
# When no text degenerates (this model under this fault), the replay says so instead of implying it.
summary = open(os.path.join(out, "summary.txt")).read()
if not any(k["generation"]["degenerate"] for k in c["cases"]):
    assert "no tested text degenerates" in summary, summary
PY
expect_out "tp         EFFECT"
echo ok
