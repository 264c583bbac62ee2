# `steps` lists every trace step of src/engine/trace.h in forward order with the fused op of the
# engine's path that computes it (src/engine/fused_ops.cpp), in text and JSON.
source "$(dirname "$0")/lib.bash"
names=$(grep -oE '^  X\([a-z_]+,' "$SRC/src/engine/trace.h" | sed -E 's/^  X\(([a-z_]+),/\1/')
n=$(echo "$names" | wc -l)
[ "$n" -ge 30 ] || fail "found only $n trace steps in src/engine/trace.h"
expect_exit 0 "$BIN" steps
expect_out "$n trace steps in forward order"
for s in $names; do grep -q "^$s " "$WORK/out" || { cat "$WORK/out" >&2; fail "steps does not list '$s'"; }; done
# the order is trace.h's
listed=$(grep -oE '^[a-z_]+ ' "$WORK/out" | tr -d ' ')
[ "$listed" = "$names" ] || fail "steps lists them in another order than src/engine/trace.h"
expect_out "in (G) gdn_inputs (gdn_conv -> gdn_q -> gdn_k -> gdn_g -> gdn_beta: causal conv + SiLU"
expect_out "in (A) sigmoid_gate_matmul (attn_gated -> mixer_out -> h_mid"
expect_out "in (M) matmul_gate_add (moe_shared -> ffn_out"
expect_exit 0 "$BIN" steps --json
python3 - "$WORK/out" <<'PY' || fail "steps --json is not what it should be"
import json, sys
j = json.load(open(sys.argv[1]))
by = {s["step"]: s for s in j}
assert by["gdn_norm"]["fused_op_gdn_layer"]["op"] == "gated_norm_matmul", by["gdn_norm"]
assert by["gdn_core"]["fused_op_gdn_layer"] is None  # the recurrence is an op of its own
assert by["attn_q"]["fused_op_attention_layer"]["steps"][0] == "attn_q"
PY
expect_exit 0 "$BIN" --help
expect_out "steps"
expect_exit 128 "$BIN" steps --no-such-flag
echo "steps: ok"
