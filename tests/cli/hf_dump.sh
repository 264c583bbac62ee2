# tools/hf_dump_hooks.py: Hugging Face transformers' own forward pass over the golden tokens, captured
# with forward hooks under our step names, judged by compare --dump. HF in fp32 agrees with our
# reference (exit 0); a planted bug (--perturb, a test aid: layer 5's down_proj weight x 1.01) is
# found at its layer and step (exit 1); bad input is exit 1 with a message. Skipped (77) without
# torch / transformers / safetensors.
source "$(dirname "$0")/lib.bash"
if ! python3 -c "import torch, transformers, safetensors" >/dev/null 2>&1; then
  echo "SKIP: python3 cannot import torch, transformers and safetensors (tools/hf_dump_hooks.py needs them)"
  exit 77
fi
M=$SRC/models/tiny-trained
G=$SRC/golden/tiny-trained/smoke
HOOKS=(python3 "$SRC/tools/hf_dump_hooks.py" --model "$M" --golden "$G" --threads 2)

# 1. HF in fp32 is a correct engine: every layer within 3x the fp64 reference's drift, logits too.
expect_exit 0 "${HOOKS[@]}" --out "$WORK/good" --case two-plus-two --case count --dtype float32
expect_out "two-plus-two.safetensors: T="
python3 - "$WORK/good/count.safetensors" <<'PY' || fail "dump file contents"
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], "pt") as f:
    m, keys = f.metadata(), set(f.keys())
    T = int(m["tokens"])
    assert m["format"] == "degenbisect-dump" and m["names"] == "degenbisect" and m["case"] == "count", m
    assert m["engine"].startswith("transformers "), m
    for k in ["embed", "final_norm", "logits"] + [f"{s}-{L}" for L in range(8)
              for s in ("attn_norm", "mixer_out", "h_mid", "ffn_norm", "ffn_out", "l_out")]:
        assert k in keys, k
    for k in ("gdn_qkv-0", "gdn_core-0", "gdn_norm-0", "attn_gate-3", "attn_v-3", "attn_gated-3"):
        assert k in keys, k
    assert "gdn_core-3" not in keys and "attn_gate-0" not in keys
    for k in keys:
        t = f.get_slice(k)
        assert t.get_dtype() == "F32" and t.get_shape()[0] == T, (k, t.get_dtype(), t.get_shape())
    assert f.get_slice("logits").get_shape() == [T, 2048]
PY
expect_exit 0 "$BIN" compare --golden "$G" --model "$M" --dump "$WORK/good" --engine-class fp32 \
  --case two-plus-two --case count
expect_out "verdict: good (exit 0): 2 cases, 2 good"
cat "$WORK/out"

# 2. A planted bug: layer 5's MLP down_proj weight scaled by 1.01 in HF (a test aid, not an engine option).
expect_exit 0 "${HOOKS[@]}" --out "$WORK/bad" --case two-plus-two --perturb layers.5.mlp.down_proj.weight=1.01
expect_out "TEST AID: model.language_model.layers.5.mlp.down_proj.weight scaled by 1.01"
expect_exit 1 "$BIN" compare --golden "$G" --model "$M" --dump "$WORK/bad" --engine-class fp32 --case two-plus-two
expect_out "first layer over its drift floor: 5"
expect_out "first step over its floor in layer 5: ffn_out"
expect_out "verdict: bad (exit 1)"

# 3. Bad input: exit 1 and a message, not a traceback.
expect_exit 1 "${HOOKS[@]/$G/$WORK/nowhere}" --out "$WORK/x"
expect_out "hf_dump_hooks: error: golden record '$WORK/nowhere' is not a directory"
mkdir -p "$WORK/nomanifest"
expect_exit 1 "${HOOKS[@]/$G/$WORK/nomanifest}" --out "$WORK/x"
expect_out "has no manifest.json"
expect_exit 1 "${HOOKS[@]}" --out "$WORK/x" --case no-such-case
expect_out "case 'no-such-case' is not in"
mkdir -p "$WORK/badmodel"
echo '{"model_type": "no-such-architecture"}' > "$WORK/badmodel/config.json"
expect_exit 1 "${HOOKS[@]/$M/$WORK/badmodel}" --out "$WORK/x" --case count
expect_out "hf_dump_hooks: error: transformers cannot read the config of"
expect_exit 1 "${HOOKS[@]}" --out "$WORK/x" --case count --perturb layers.99.mlp.down_proj.weight
expect_out "no parameters match 'layers.99.mlp.down_proj.weight'"
if grep -q Traceback "$WORK/out"; then fail "a traceback"; fi
echo ok
