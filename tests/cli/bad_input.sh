# Hostile inputs through the CLI (issue 21 items 1, 3, 4): each is exit 128 with a message naming the
# input, never a crash (SIGSEGV is exit 139), a hang (each run under `timeout`: 124 fails the test) or
# memory growing without bound. Issue 40: a path that cannot be used (a symlink loop, an --out that is a
# file or read-only) is exit 128 naming the path, never an internal error.
# Args: BINARY SOURCE_DIR WORKDIR; exit 0 pass, 77 skip.
source "$(dirname "$0")/lib.bash"
T="timeout 20"

m="$WORK/tiny"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"

# 1. JSON nested 300,000 deep: in a cases file (the prompt), config.json, a safetensors header, a matrix.
deep=$(printf '%*s' 300000 '' | tr ' ' '[')$(printf '%*s' 300000 '' | tr ' ' ']')
printf '{"suite": "s", "cases": [{"id": "a", "prompt": %s}]}' "$deep" > "$WORK/deep-cases.json"
expect_exit 128 $T "$BIN" golden --model "$m" --cases "$WORK/deep-cases.json" --out "$WORK/g-deep"
expect_out "deep-cases.json: JSON nested deeper than 256 levels"
cp -r "$m" "$WORK/deepcfg"
printf '{"model_type": "qwen3_5", "text_config": %s}' "$deep" > "$WORK/deepcfg/config.json"
expect_exit 128 $T "$BIN" inspect "$WORK/deepcfg"
expect_out "config.json: JSON nested deeper than 256 levels"
printf '{"axes": %s}' "$deep" > "$WORK/deep-matrix.json"
expect_exit 128 $T "$BIN" sweep --golden "$WORK/none" --model "$m" --matrix "$WORK/deep-matrix.json" --out "$WORK/sw"
expect_out "deep-matrix.json: JSON nested deeper"
cp -r "$m" "$WORK/deepst"
python3 - "$WORK/deepst/model.safetensors" <<'PY'
import struct, sys
h = b'{"x": ' + b"[" * 300000 + b"]" * 300000 + b"}"
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h)
PY
expect_exit 128 $T "$BIN" inspect "$WORK/deepst"
expect_out "model.safetensors: JSON nested deeper"

# 3. A FIFO, /dev/zero or a folder where a file is expected: refused before reading (no writer ever
# opens the FIFO, so a blocking open or read would hang until the timeout).
mkfifo "$WORK/fifo"
expect_exit 128 $T "$BIN" golden --model "$m" --cases "$WORK/fifo" --out "$WORK/g1"
expect_out "expected a regular file, found a named pipe (FIFO)"
expect_exit 128 $T "$BIN" golden --model "$m" --cases /dev/zero --out "$WORK/g2"
expect_out "/dev/zero: expected a regular file, found a character device"
expect_exit 128 $T "$BIN" sweep --golden "$WORK/none" --model "$m" --matrix /dev/zero --out "$WORK/sw"
expect_out "found a character device"
expect_exit 128 $T "$BIN" sweep --golden "$WORK/none" --model "$m" --matrix "$WORK/fifo" --out "$WORK/sw"
expect_out "found a named pipe"
expect_exit 128 $T "$BIN" tokenize --model "$m" --file /dev/zero
expect_out "found a character device"
expect_exit 128 $T "$BIN" tokenize --model "$m" --file "$WORK/fifo"
expect_out "found a named pipe"
expect_exit 128 $T "$BIN" tokenize --model "$m" --file "$WORK"
expect_out "expected a regular file, found a folder"
cp -r "$m" "$WORK/fifocfg"
rm "$WORK/fifocfg/config.json"
mkfifo "$WORK/fifocfg/config.json"
expect_exit 128 $T "$BIN" inspect "$WORK/fifocfg"
expect_out "config.json: expected a regular file, found a named pipe"
rm "$WORK/fifocfg/config.json"
ln -s /dev/zero "$WORK/fifocfg/config.json"
expect_exit 128 $T "$BIN" inspect "$WORK/fifocfg"
expect_out "found a character device"

# 4. Sizes that overflow: a config-only folder with hidden_size 2^63-1 (printed negative parameter
# counts and exited 0); a safetensors header length one byte short (every tensor a byte off).
mkdir -p "$WORK/huge"
echo '{"model_type": "qwen3_5_text", "hidden_size": 9223372036854775807}' > "$WORK/huge/config.json"
expect_exit 128 $T "$BIN" inspect "$WORK/huge"
expect_out "field 'hidden_size': expected at most 2^31-1"
echo '{"model_type": "qwen3_5_text", "num_experts": 4096, "moe_intermediate_size": 1073741824}' > "$WORK/huge/config.json"
sed -i 's/qwen3_5_text/qwen3_5_moe_text/' "$WORK/huge/config.json"
expect_exit 128 $T "$BIN" inspect "$WORK/huge"
expect_out "num_experts (4096) x moe_intermediate_size (1073741824)"
# More experts than any model has: refused before any table is sized by them.
echo '{"model_type": "qwen3_5_moe_text", "num_experts": 1048576}' > "$WORK/huge/config.json"
expect_exit 128 $T "$BIN" inspect "$WORK/huge"
expect_out "'num_experts': expected at most 4096"
cp -r "$m" "$WORK/short"
python3 - "$WORK/short/model.safetensors" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
assert b[8 + n - 1:8 + n] == b" ", "expected the writer's space padding"
b[:8] = struct.pack("<Q", n - 1)
open(sys.argv[1], "wb").write(b)
PY
expect_exit 128 $T "$BIN" inspect "$WORK/short"
expect_out "expected them to end exactly at the end of the file"
# Issue 40, finding 2: a path that cannot be used (a symlink loop as any path, an --out that is a
# regular file or on a read-only mount) is exit 128 naming the path and the reason, never an
# "internal error" (an escaped std::filesystem error).
ln -s loop "$WORK/loop"
L="$WORK/loop"
echo '{"suite": "s", "cases": [{"id": "a", "prompt": "hi"}]}' >"$WORK/cases.json"
expect_no_internal() {  # expect_no_internal TEXT CMD...: exit 128, TEXT in the output, no "internal error"
  local text=$1; shift
  expect_exit 128 $T "$BIN" "$@"
  expect_out "$text"
  if grep -q "internal error" "$WORK/out"; then cat "$WORK/out" >&2; fail "'$*' reported an internal error"; fi
}
loop_msg="Too many levels of symbolic links"
loop_case() { expect_no_internal "$loop_msg" "$@"; expect_out "$L"; }  # the message names the path
loop_case inspect "$L"
loop_case run --model "$L" --prompt hi
loop_case tokenize --model "$L" hi
loop_case tokenize --model "$m" --file "$L"
loop_case golden --model "$L" --cases "$WORK/cases.json" --out "$WORK/g-loop"
loop_case golden --model "$m" --cases "$L" --out "$WORK/g-loop"
loop_case golden --model "$m" --cases "$WORK/cases.json" --out "$L"
loop_case compare --golden "$L" --model "$m"
loop_case compare --golden "$WORK/none" --model "$m" --json "$L"
loop_case compare --golden "$WORK/none" --model "$m" --junit "$L"
loop_case compare --golden "$WORK/none" --model "$m" --server-cmd 'x {port}' --server-log "$L"
loop_case eval --model "$m" --json "$L"
loop_case selftest --json "$L"
loop_case sweep --golden "$L" --model "$m" --axis attn=naive --out "$WORK/sw-loop"
loop_case sweep --golden "$WORK/none" --model "$m" --axis attn=naive --out "$L"
loop_case sweep --golden "$WORK/none" --model "$m" --matrix "$L" --out "$WORK/sw-loop"
loop_case bisect --golden "$L" --model "$m" --bad attn=flash
loop_case bisect --golden "$WORK/none" --model "$m" --bad attn=flash --json "$L"
loop_case synth --preset tiny-qwen35 --out "$L"
loop_case synth --config "$L" --out "$WORK/s-loop"
loop_case report "$L"
loop_case report "$WORK/none" -o "$L"
loop_case eval --model "$L"
loop_case selftest --model "$L"
loop_case bench --model "$L"
[ -L "$L" ] || fail "a symlink loop given as a path was replaced"
# An --out that is a regular file: refused before any work, the file untouched.
echo keep >"$WORK/file"
for cmd in "synth --preset tiny-qwen35" "golden --model $m --cases $WORK/cases.json" \
           "sweep --golden $WORK/none --model $m --axis attn=naive"; do
  expect_no_internal "--out: cannot write into $WORK/file: it is a regular file; expected a folder" $cmd --out "$WORK/file"
done
expect_no_internal "cannot write $WORK/file/x.json" compare --golden "$WORK/none" --model "$m" --json "$WORK/file/x.json"
[ "$(cat "$WORK/file")" = keep ] || fail "an --out that is a regular file was changed"
# A read-only mount (root writes through chmod): a read-only bind mount, else /proc (takes no new files).
ro="$WORK/ro"
mkdir -p "$ro.src" "$ro"
if mount --bind -o ro "$ro.src" "$ro" 2>/dev/null; then
  trap 'umount "$ro" 2>/dev/null || true' EXIT
  why="Read-only file system"
else
  echo "bad_input: no read-only bind mount here (needs root and mount); using /proc"
  ro=/proc/degen-no-such; why="cannot"
fi
for cmd in "synth --preset tiny-qwen35" "golden --model $m --cases $WORK/cases.json" \
           "sweep --golden $WORK/none --model $m --axis attn=naive"; do
  expect_no_internal "$why" $cmd --out "$ro/out"
done
expect_no_internal "$why" compare --golden "$WORK/none" --model "$m" --json "$ro/c.json"
expect_no_internal "$why" report "$WORK/none" -o "$ro/r.md"

# Command-line strings that are not UTF-8 (the byte 0xFF: legal in a Linux path). Each reaches JSON
# (a record's manifest, --json, sweep results, replay lines) or XML (--junit), which hold UTF-8 only;
# it ended as "internal error: [json.exception.type_error.316]" once the whole run was done, its
# record or result lost. Now: exit 128 before any work, naming the option and showing the byte. The
# folders and files exist (copies): under a UTF-8 name each command would run.
X=$'\xff'
g="$WORK/golden"
expect_exit 0 $T "$BIN" -q golden --model "$m" --cases "$WORK/cases.json" --no-floors --positions 8 --out "$g"
expect_exit 0 $T "$BIN" -q compare --golden "$g" --model "$m" --no-decode --json "$WORK/c.json"
cp -r "$m" "$WORK/m$X"
cp -r "$g" "$WORK/g$X"
cp "$WORK/c.json" "$WORK/c$X.json"
utf8_case() {  # OPTION CMD...: exit 128 naming OPTION and the byte, before anything ran or was written
  local opt=$1; shift
  expect_no_internal "$opt: expected UTF-8 text, found \"" "$@"
  expect_out '\xFF'
  expect_out '" (byte '
  if grep -q "^verdict:\|^golden: wrote" "$WORK/out"; then cat "$WORK/out" >&2; fail "'$*' ran before it was refused"; fi
  [ ! -e "$WORK/u.json" ] || fail "'$*' wrote its --json before it was refused"
}
utf8_case "golden --model" golden --model "$WORK/m$X" --cases "$WORK/cases.json" --no-floors --positions 8 --out "$WORK/g-u"
utf8_case "golden --out" golden --model "$m" --cases "$WORK/cases.json" --no-floors --positions 8 --out "$WORK/g-u$X"
utf8_case "golden --cases" golden --model "$m" --cases "$WORK/cases$X.json" --out "$WORK/g-u"
[ ! -e "$WORK/g-u" ] && [ ! -e "$WORK/g-u$X" ] || fail "a refused golden created its --out"
utf8_case "compare --golden" compare --golden "$WORK/g$X" --model "$m" --no-decode --json "$WORK/u.json"
utf8_case "compare --model" compare --golden "$g" --model "$WORK/m$X" --no-decode --json -
utf8_case "compare --case" compare --golden "$g" --model "$m" --no-decode --case "a$X" --junit "$WORK/u.xml"
utf8_case "compare --dump" compare --golden "$g" --model "$m" --dump "$WORK/d$X" --json "$WORK/u.json"
utf8_case "compare --server" compare --golden "$g" --model "$m" --server "http://127.0.0.1:9/$X" --json "$WORK/u.json"
utf8_case "compare --server-cmd" compare --golden "$g" --model "$m" --server-cmd "true {port} $X" --json "$WORK/u.json"
utf8_case "bisect --model" bisect --golden "$g" --model "$WORK/m$X" --bad attn=flash --no-decode --json "$WORK/u.json"
utf8_case "bisect --bad" bisect --golden "$g" --model "$m" --bad "attn=flash$X" --no-decode --json "$WORK/u.json"
utf8_case "sweep --out" sweep --golden "$g" --model "$m" --axis attn=naive --no-decode --out "$WORK/sw$X"
[ ! -e "$WORK/sw$X" ] || fail "a refused sweep created its --out"
utf8_case "report argument paths" report "$WORK/c$X.json" --format json
utf8_case "report --out" report "$WORK/c.json" -o "$WORK/r$X.json"
utf8_case "inspect argument model" inspect "$WORK/m$X" --json
# Text from outside the command line that is not UTF-8 (here a server's error body) reaches JSON as
# U+FFFD: the verdict (untestable, 125) and its JSON survive, the JSON is valid.
expect_exit 125 $T "$BIN" -q compare --golden "$g" --model "$m" --health-timeout 10 --attempts 1 --json "$WORK/srv.json" \
  --server-cmd "python3 $SRC/tests/cli/misbehaving_server.py rawbytes port={port}"
# The same body in a sweep cell's reason: the cell is recorded (results.jsonl), the sweep goes on.
expect_exit 125 $T "$BIN" -q sweep --golden "$g" --model "$m" --health-timeout 10 --attempts 1 --out "$WORK/sw-raw" \
  --server-cmd "env X={x} python3 $SRC/tests/cli/misbehaving_server.py rawbytes port={port}" --axis x=a
python3 - "$WORK/srv.json" "$WORK/sw-raw/results.jsonl" <<'PY'
import json, sys
docs = [json.load(open(sys.argv[1], encoding="utf-8", errors="strict"))]
docs += [json.loads(l) for l in open(sys.argv[2], encoding="utf-8", errors="strict")]
for j in docs:
    if j.get("verdict") != "untestable" or "\ufffd\ufffd upstream failed \ufffd" not in j.get("reason", ""):
        sys.exit("FAIL: expected an untestable verdict whose reason quotes the server's body with U+FFFD, found %r" % j)
if len(docs) != 2:
    sys.exit("FAIL: expected one sweep cell in results.jsonl, found %d" % (len(docs) - 1))
PY
echo "bad_input: ok"
