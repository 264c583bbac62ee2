# synth -> inspect (text and --json), config-only folders, and corrupt checkpoints or NaN/Inf weights -> exit 128
# with a reason.
source "$(dirname "$0")/lib.bash"
m="$WORK/tiny"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
expect_exit 0 "$BIN" inspect "$m"
expect_out "GGGA×2"
expect_out "validation   ok"
expect_out "fingerprint"
expect_exit 0 "$BIN" inspect "$m" --json
grep -q '"layer_map": "GGGA×2"' "$WORK/out" || fail "json layer_map"
grep -q '"valid": true' "$WORK/out" || fail "json valid"
grep -q '"kv_bytes_per_token": 1024' "$WORK/out" || fail "json kv bytes (2 full layers x K,V x 2 kv heads x 64 x 2 B)"
grep -q '"ssm_state_bytes_per_seq": 98304' "$WORK/out" || fail "json ssm bytes (6 GDN layers x 4 x 32 x 32 x 4 B)"
grep -q '"fingerprint": "[0-9a-f]\{64\}"' "$WORK/out" || fail "json fingerprint"
grep -q '"mtp_layers": 1' "$WORK/out" || fail "json mtp"

# Config-only real-size preset: memory estimate without weights.
expect_exit 0 "$BIN" synth --preset qwen36-27b --out "$WORK/q27"
expect_exit 0 "$BIN" inspect "$WORK/q27"
expect_out "GGGA×16"
expect_out "config only"
expect_out "KV cache 64.00 KiB per token (+ 4.00 KiB for MTP)"   # spec §5.1: 16 layers x 2 x 4 x 256 x 2 B
expect_out "GDN state 144.00 MiB"   # spec §5.1: 48 x 3 MiB

# Corrupt checkpoints: each gives exit 128 and names the problem.
bad="$WORK/bad"
cp -r "$m" "$bad"
truncate -s 1000 "$bad/model.safetensors"
expect_exit 128 "$BIN" inspect "$bad"
expect_out "model.safetensors"
expect_out "truncated"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{not json at all' > "$bad/model.safetensors"
expect_exit 128 "$BIN" inspect "$bad"
expect_out "JSON"
printf '\xff\xff\xff\xff\x00\x00\x00\x00{}' > "$bad/model.safetensors"
expect_exit 128 "$BIN" inspect "$bad"
expect_out "header"
cp "$m/model.safetensors" "$bad/model.safetensors"
echo '{"model_type": "qwen3_5", "text_config": {"hidden_size": 128}}' > "$bad/config.json"
expect_exit 128 "$BIN" inspect "$bad"
cp "$m/config.json" "$bad/config.json"
sed -i 's/"hidden_size": 128/"hidden_size": 96/' "$bad/config.json"
expect_exit 128 "$BIN" inspect "$bad"
expect_out "validation   FAILED"
expect_out "mismatched"
echo '{not json' > "$bad/config.json"
expect_exit 128 "$BIN" inspect "$bad"
expect_out "not valid JSON"

# NaN/Inf weights (issue 21.9): invalid (128), the tensor and the count named; --headers-only skips the scan.
cp -r "$m" "$WORK/nan"
t=$(python3 - "$WORK/nan/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = sorted(k for k in h if k.endswith("layers.2.mlp.down_proj.weight"))[0]
assert h[name]["dtype"] == "BF16"
o = 8 + n + h[name]["data_offsets"][0]
for i in (7, 9, 11): b[o + 2 * i:o + 2 * i + 2] = b"\x80\x7f"   # bf16 +inf
open(p, "wb").write(b); print(name)
PY
)
expect_exit 128 "$BIN" inspect "$WORK/nan"
expect_out "validation   FAILED"
expect_out "the model: tensor $t has 3 non-finite values"
expect_out "element 7 is inf"
expect_exit 128 "$BIN" inspect "$WORK/nan" --json
grep -q '"count": 3' "$WORK/out" || fail "json nonfinite_tensors count"
expect_exit 0 "$BIN" inspect "$WORK/nan" --headers-only
expect_out "validation   ok (headers only; values not scanned for NaN/Inf)"
expect_exit 0 "$BIN" inspect "$m"
expect_out "validation   ok (every weight finite)"
echo ok
