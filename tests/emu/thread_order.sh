# The CUDA kernels do not depend on the order of the threads within a block (no missing barrier, no
# race on shared memory): compare on backend=cuda, run on the CUDA emulator (tests/emu) with each
# block's threads in forward and in reverse order between barriers, gives the same metrics to the
# last bit (timings aside). Covers every kernel family: attention (naive/flash/splitkv), cuBLAS and
# gemm=simple, GDN chunked and recurrent, MoE routing, the fused Qwen3-Next layout.
# Arguments: degenbisect-emu SOURCE_DIR WORK_DIR.
source "$2/tests/cli/lib.bash"
m=tiny-qwen3next
expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
for cfg in backend=cuda backend=cuda,attn=splitkv,gemm=simple,gdn=recurrent backend=cuda,attn=flash; do
  for order in forward reverse; do
    export DEGEN_EMU_ORDER=$order
    expect_exit 0 "$BIN" -q compare --golden "$SRC/golden/$m/smoke" --model "$WORK/$m" \
      --config "$cfg" --case two-plus-two --no-decode --json "$WORK/$order.json"
    grep -v '"seconds"' "$WORK/$order.json" > "$WORK/$order.txt"
  done
  unset DEGEN_EMU_ORDER
  [ "$(wc -l < "$WORK/forward.txt")" -gt 100 ] || fail "compare --json wrote almost nothing"
  cmp -s "$WORK/forward.txt" "$WORK/reverse.txt" ||
    { diff "$WORK/forward.txt" "$WORK/reverse.txt" | head -20 >&2; fail "$cfg: the metrics depend on the thread order"; }
done
echo "ok: thread order does not change any metric"
