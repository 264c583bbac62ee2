# The trained model (models/tiny-trained) on backend=cuda under the CUDA emulator (a CPU stand-in, not
# a GPU): compare against its golden record is good; eval's figures (held-out accuracy, MTP
# acceptance) on a subset are within 2 points of the CPU reference's; the planted GDN bug makes the
# CUDA path's text loop, as on the CPU. Arguments: degenbisect-emu SOURCE_DIR WORK_DIR.
source "$2/tests/cli/lib.bash"
M=$SRC/models/tiny-trained
G=$SRC/golden/tiny-trained
# two cases (issue 39; was three): 35 greedy and 48 sampled decode steps; the long prompt of
# recall-after-story (146 tokens) runs on the CPU path in cli:trained, and prompts across GDN chunks
# on backend=cuda in cuda-emu:compare-shipped-models (repeated-pattern, 91 tokens)
expect_exit 0 "$BIN" -q compare --golden "$G/smoke" --model "$M" --config backend=cuda \
  --case two-plus-two --case story-sampled --json "$WORK/compare.json"
expect_out "verdict: good"
# observing the layers changes nothing on the CUDA path (judge/observation.h): bit-equal logits
python3 - "$WORK/compare.json" <<'PY' || fail "the observed run's logits differ from the unobserved run's"
import json, sys
o = json.load(open(sys.argv[1]))["cases"][0]["observation"]
assert o["equal"] and o["differing"] == 0 and o["values"] > 0 and o["steps_observed"] > 0, o
PY
expect_exit 0 "$BIN" -q eval --model "$M" --config backend=cuda --limit 8 --mtp-max 1
cat "$WORK/out"
expect_out "within 2 points (or one item) of the reference"
expect_exit 1 "$BIN" -q compare --golden "$G/smoke" --model "$M" --config backend=cuda,fault=conv-window-stuck@linear \
  --case two-plus-two --json "$WORK/c.json"
grep -q '"degenerate": true' "$WORK/c.json" || { cat "$WORK/out" >&2; fail "the GDN bug did not make the CUDA path's text degenerate"; }
echo "ok: the trained model on backend=cuda (CUDA emulator)"
