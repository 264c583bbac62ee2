# CLI smoke: --help, --version, usage errors exit 128 (metrics.md §6).
source "$(dirname "$0")/lib.bash"
expect_exit 0 "$BIN" --help
expect_out "Exit codes: 0 good, 1 bad, 125 untestable, 128 usage or input error"
for sub in inspect synth; do expect_out "$sub"; done
expect_exit 0 "$BIN" --version
expect_out "degenbisect 0."
expect_exit 0 "$BIN" inspect --help
expect_out "--json"
expect_exit 0 "$BIN" synth --list
expect_out "tiny-qwen35"
expect_out "qwen36-27b"
expect_exit 128 "$BIN"                       # no subcommand
expect_exit 128 "$BIN" frobnicate            # unknown subcommand
expect_exit 128 "$BIN" inspect               # missing argument
expect_exit 128 "$BIN" inspect --bogus x
expect_exit 128 "$BIN" synth --preset nope --out "$WORK/x"
expect_out "unknown preset 'nope'"
expect_exit 128 "$BIN" inspect "$WORK/does-not-exist"
expect_out "not found"
echo ok
