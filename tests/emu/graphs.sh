# CUDA graphs (graphs=on) end to end on the CUDA emulator (tests/emu; a CPU stand-in, not a GPU):
# compare on backend=cuda gives the same metrics to the last bit with graphs=on as with graphs=off
# (timings and the config line aside), including the teacher-forced decode and the generations,
# while the decode steps really are replayed from graphs (the progress line counts them); on a
# dense model and on an MoE model (its routing stays on the device: one graph per step). Graphs are
# the default on backend=cuda: without the key the decode steps are replayed too. graphs=on with
# tp=2 is refused as untestable; tp=2 without the key runs plain launches. Arguments:
# degenbisect-emu SOURCE_DIR WORK_DIR. One case, sampled-story (issue 39; was two): its 12 decode steps
# replay graphs whose inputs include the sampler's settings, which a greedy case would not read.
source "$2/tests/cli/lib.bash"
for m in tiny-qwen35 tiny-qwen35-moe; do
  expect_exit 0 "$BIN" synth --preset "$m" --out "$WORK/$m"
  for g in off on default; do
    config="backend=cuda,graphs=$g"
    [ "$g" = default ] && config=backend=cuda
    expect_exit 0 "$BIN" compare --golden "$SRC/golden/$m/smoke" --model "$WORK/$m" --config "$config" \
      --case sampled-story --json "$WORK/$g.json"
    grep -v '"seconds"\|"config"\|"graphs"' "$WORK/$g.json" > "$WORK/$g.txt"
    if [ "$g" = off ]; then
      ! grep -q "decode steps replayed from CUDA graphs" "$WORK/out" || fail "$m: graphs=off replayed decode steps"
    else
      expect_out "verdict: good"
      grep -Eq "compare: graphs=on: [1-9][0-9]* decode steps replayed from CUDA graphs" "$WORK/out" ||
        { cat "$WORK/out" >&2; fail "$m: compare with $config replayed no decode step"; }
    fi
  done
  cmp -s "$WORK/off.txt" "$WORK/default.txt" ||
    { diff "$WORK/off.txt" "$WORK/default.txt" | head -20 >&2; fail "$m: the default (graphs on) changes the metrics"; }
  [ "$(wc -l < "$WORK/off.txt")" -gt 100 ] || fail "compare --json wrote almost nothing"
  cmp -s "$WORK/off.txt" "$WORK/on.txt" ||
    { diff "$WORK/off.txt" "$WORK/on.txt" | head -20 >&2; fail "$m: graphs=on changes the metrics"; }
done
expect_exit 125 "$BIN" -q compare --golden "$SRC/golden/tiny-qwen35/smoke" --model "$WORK/tiny-qwen35" \
  --config backend=cuda,graphs=on,tp=2 --case two-plus-two
expect_out "graphs=on with tp > 1 is not built"
expect_exit 0 "$BIN" compare --golden "$SRC/golden/tiny-qwen35/smoke" --model "$WORK/tiny-qwen35" \
  --config backend=cuda,tp=2 --case two-plus-two
! grep -q "decode steps replayed from CUDA graphs" "$WORK/out" || fail "tp=2 replayed decode steps from graphs"
echo "ok: graphs=on gives the metrics of graphs=off, from replayed graphs"
