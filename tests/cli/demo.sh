# make demo (scripts/demo.sh) on the shipped trained model, into a work folder: the planted GDN bug
# makes every attention backend bad (attention: no effect), bisect names the GDN op, and the HTML
# report shows the looping text beside the reference's with the loop framed.
source "$(dirname "$0")/lib.bash"
expect_exit 0 env DEMO_OUT="$WORK/demo" bash "$SRC/scripts/demo.sh" "$BIN"
cat "$WORK/out"
expect_out "-> attn: no effect (1/1 bad with each value)"
expect_out "the first operation over its noise floor is \`gdn_conv-"
expect_out "demo finished in"
grep -q 'class="loop"' "$WORK/demo/report.html" || fail "the HTML report frames no loop"
grep -q "loop from token" "$WORK/demo/report.html" || fail "the HTML report does not label the loop"
grep -q "golden (CPU reference)" "$WORK/demo/report.html" || fail "no side-by-side text"
[ -s "$WORK/demo/report.md" ] || fail "no Markdown report"
echo ok
