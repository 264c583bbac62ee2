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
# A miss is exit 1: a golden record of another model makes nothing bisectable.
expect_exit 128 "$BIN" -q selftest --model "$WORK/tiny-qwen35" --golden "$SRC/golden/tiny-qwen35-r3/smoke"
echo ok
