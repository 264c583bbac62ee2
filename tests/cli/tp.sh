# Tensor parallelism from the command line (backend=cpu,tp=N, the CPU twin): inspect --tp shows what
# one rank holds and rejects a split that does not divide; run at tp=2 generates what tp=1 does;
# compare at tp=2 passes against the tp=1 golden record and a TP fault fails it; bisect names the
# TP fault; bench --tp reports the all-reduces per decoded token.
source "$(dirname "$0")/lib.bash"
m="$WORK/tiny-qwen35"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"

# inspect --tp: per-rank memory; 27B config at tp=2 halves the KV cache per token (64 -> 32 KiB)
expect_exit 0 "$BIN" synth --preset qwen36-27b --out "$WORK/q27"
expect_exit 0 "$BIN" inspect "$WORK/q27" --tp 2
expect_out "KV cache 32.00 KiB per token"
expect_out "128 all-reduces of 10.00 KiB per decoded token"
expect_exit 0 "$BIN" inspect "$m" --tp 2 --json
grep -q '"rank_weight_bytes"' "$WORK/out" || fail "inspect --json lacks tp.rank_weight_bytes"
expect_exit 128 "$BIN" inspect "$WORK/q27" --tp 8
expect_out "num_key_value_heads (n_kv) = 4 is not a multiple of 8"
expect_exit 128 "$BIN" run --model "$m" --prompt "Hi" --config tp=3
expect_out "linear_num_key_heads (n_k) = 2 is not a multiple of 3"

# backend=cuda,tp=2: --devices must name one device per rank (a CUDA build says so before looking
# for devices; a CPU-only build says it has no CUDA backend)
if "$BIN" --version | grep -q "CUDA backend built"; then
  expect_exit 128 "$BIN" --devices 0 run --model "$m" --prompt "Hi" --config backend=cuda,tp=2
  expect_out "--devices lists 1 device(s); tp=2 needs 2"
else
  expect_exit 125 "$BIN" --devices 0 run --model "$m" --prompt "Hi" --config backend=cuda,tp=2
  expect_out "no CUDA backend"
fi
expect_exit 128 "$BIN" --devices 0,x run --model "$m" --prompt "Hi"
expect_out "--devices"

# run: the same greedy tokens at tp=1 and tp=2 (and with MTP at tp=2)
expect_exit 0 "$BIN" run --model "$m" --prompt "The user is asking for" --max-new-tokens 12
grep '^\[ids\]' "$WORK/out" > "$WORK/ids1"
expect_exit 0 "$BIN" run --model "$m" --prompt "The user is asking for" --max-new-tokens 12 --config tp=2
grep '^\[ids\]' "$WORK/out" > "$WORK/ids2"
expect_exit 0 "$BIN" run --model "$m" --prompt "The user is asking for" --max-new-tokens 12 --config tp=2,mtp=2
grep '^\[ids\]' "$WORK/out" > "$WORK/ids3"
[ -s "$WORK/ids1" ] || fail "run printed no [ids] line"
cmp -s "$WORK/ids1" "$WORK/ids2" || fail "tp=2 generated other tokens than tp=1"
cmp -s "$WORK/ids1" "$WORK/ids3" || fail "tp=2,mtp=2 generated other tokens than tp=1"

# compare against the committed (tp=1) golden record: clean at tp=2, bad with a TP fault
g="$SRC/golden/tiny-qwen35/smoke"
expect_exit 0 "$BIN" -q compare --model "$m" --golden "$g" --config tp=2 --case two-plus-two
expect_exit 1 "$BIN" -q compare --model "$m" --golden "$g" --config tp=2,fault=tp-skip-last-allreduce --case two-plus-two
expect_exit 125 "$BIN" -q compare --model "$m" --golden "$g" --config fault=tp-skip-last-allreduce --case two-plus-two
expect_out "needs tp > 1"

# bisect names the TP fault between two tp=2 configurations
expect_exit 1 "$BIN" -q bisect --model "$m" --golden "$g" --case two-plus-two --good tp=2 \
  --bad tp=2,fault=tp-gdn-no-allreduce@5 --json "$WORK/b.json"
grep -q '"fault:tp-gdn-no-allreduce"' "$WORK/b.json" || { cat "$WORK/b.json" >&2; fail "bisect did not name the TP fault"; }

# bench --tp: all-reduces per decoded token = 2 per decoder layer (8 layers -> 16)
expect_exit 0 "$BIN" bench --model "$m" --tp 2 --prefill 8 --decode 4
expect_out "all-reduce: 16.0 per decoded token, 512 bytes each"
echo ok
