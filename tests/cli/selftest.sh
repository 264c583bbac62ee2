# selftest on the four synthetic tiny models and the trained one with their committed golden records: every catalogue fault
# that the model can host is injected at two or more layers and must be named (layer and op) by bisect.
source "$(dirname "$0")/lib.bash"
for m in tiny-qwen35 tiny-qwen35-r3 tiny-qwen35-moe tiny-qwen3next; do
  expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
  expect_exit 0 "$BIN" -q selftest --model "$WORK/$m" --golden "$SRC/golden/$m/smoke" --case two-plus-two --json "$WORK/$m.json"
  cat "$WORK/out"
  expect_out "0 fail"
done
# The trained model: every catalogue fault it can host, named by bisect on real text.
expect_exit 0 "$BIN" -q selftest --model "$SRC/models/tiny-trained" --golden "$SRC/golden/tiny-trained/smoke" \
  --case two-plus-two --json "$WORK/tiny-trained.json"
cat "$WORK/out"
expect_out "0 fail"
# MTP faults under a SAMPLED case (issue 20 point 3): speculative sampling leaves the golden path at once,
# so the free-running generation alone covers few positions; the teacher-forced draft/verify check
# does not depend on it: every rollback depth occurs on the golden sequence, and the rolled-back state is
# compared with plain decode's. Both MTP faults are found with their op, and the clean run passes.
m="$WORK/tiny-qwen35"
expect_exit 0 "$BIN" -q selftest --model "$m" --golden "$SRC/golden/tiny-qwen35/smoke" --case sampled-story \
  --fault mtp-no-rollback --fault mtp-prenorm-hidden
expect_out "2 pass, 0 fail, 0 skip"
expect_exit 0 "$BIN" compare --golden "$SRC/golden/tiny-qwen35/smoke" --model "$m" --case sampled-story --config mtp=2 --json "$WORK/mtp.json"
python3 - "$WORK/mtp.json" <<'PY2'
import json, sys
f = json.load(open(sys.argv[1]))["cases"][0]["mtp_forced"]
assert f["pass"] and f["state_rel_l2"] == 0 and f["rollbacks"] >= 2, f  # exact on the CPU
PY2
expect_exit 1 "$BIN" compare --golden "$SRC/golden/tiny-qwen35/smoke" --model "$m" --case sampled-story --config mtp=2,fault=mtp-no-rollback
expect_out "MTP draft/verify teacher-forced: after a rollback the GDN state"
expect_exit 1 "$BIN" -q bisect --golden "$SRC/golden/tiny-qwen35/smoke" --model "$m" --case sampled-story --bad mtp=3,fault=mtp-no-rollback
expect_out "The operation: the rolled-back state."
expect_exit 1 "$BIN" -q bisect --golden "$SRC/golden/tiny-qwen35/smoke" --model "$m" --case sampled-story --bad mtp=2,fault=mtp-prenorm-hidden
expect_out "The operation: the MTP head"
# A miss is exit 1: a golden record of another model makes nothing bisectable.
expect_exit 128 "$BIN" -q selftest --model "$WORK/tiny-qwen35" --golden "$SRC/golden/tiny-qwen35-r3/smoke"
echo ok
