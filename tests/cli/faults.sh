# `faults` lists every entry of the fault catalogue (src/engine/faults.cpp), in text and JSON; `run`
# takes faults and the bf16 emulation toggles through --config: a fault scoped to a layer that
# cannot host it is an input error naming the layer kind (128), tp-skip-last-allreduce is
# untestable without tensor parallelism (125).
source "$(dirname "$0")/lib.bash"
names=$(grep -oE '^ +\{Fault::[a-z0-9_]+, "[a-z0-9-]+", FaultSite::' "$SRC/src/engine/faults.cpp" | grep -oE '"[a-z0-9-]+"' | tr -d '"')
n=$(echo "$names" | wc -l)
[ "$n" -ge 16 ] || fail "found only $n catalogue names in src/engine/faults.cpp"
expect_exit 0 "$BIN" faults
expect_out "$n faults."
for name in $names; do
  grep -qx -- "$name" "$WORK/out" || { cat "$WORK/out" >&2; fail "faults does not list '$name'"; }
done
expect_out "acts on: full-attention layers; first corrupted step: attn_q"
expect_out "source: "
expect_exit 0 "$BIN" faults --json
for name in $names; do expect_out "\"name\": \"$name\""; done
expect_out '"forward_pass": true'
expect_exit 0 "$BIN" --help
expect_out "faults"

m="$WORK/tiny"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
expect_exit 0 "$BIN" run --model "$m" --prompt "What is 2+2?" --max-new-tokens 4 --config precision=bf16,attn=flash
expect_out "backend cpu:bf16, config precision=bf16,attn=flash"
expect_exit 0 "$BIN" run --model "$m" --prompt "What is 2+2?" --max-new-tokens 4 --config fault=gdn-head-mod@4
expect_out "config fault=gdn-head-mod@4"
expect_exit 128 "$BIN" run --model "$m" --prompt "Hi" --max-new-tokens 2 --config fault=rope-interleaved@0
expect_out "layer 0 is a GDN (linear_attention) layer"
expect_exit 128 "$BIN" run --model "$m" --prompt "Hi" --max-new-tokens 2 --config fault=no-such-fault
expect_out "unknown fault 'no-such-fault'"
expect_exit 125 "$BIN" run --model "$m" --prompt "Hi" --max-new-tokens 2 --config fault=tp-skip-last-allreduce
expect_out "needs tp > 1"
echo ok
