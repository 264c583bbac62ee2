# Outputs that survive kills and concurrent runs (issue 21, items 2, 5, 6, 7): a sweep matrix over the
# cell cap is refused at once with its count; `golden --force` killed before or after its swap keeps
# a whole record and the next run removes the leftovers; one process per sweep folder, record and
# replay file (a second is refused with the holder's PID); `sweep --resume` and `bisect --replay`
# refuse what was made for another model or case set, and files from before identities.
# Issue 40: an output into a device node or a FIFO is written in place (never replaced); symlinks are followed.
source "$(dirname "$0")/lib.bash"
m="$WORK/tiny"
g="$WORK/golden"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
cat >"$WORK/cases.json" <<'JSON'
{"suite": "cli", "defaults": {"max_new_tokens": 3},
 "cases": [{"id": "sum", "prompt": "What is 2+2?"}, {"id": "raw", "raw": "red green blue,"}]}
JSON
GOLDEN=("$BIN" -q golden --model "$m" --cases "$WORK/cases.json" --no-floors --positions 8)
leftovers() { find "$WORK" -maxdepth 1 \( -name '.golden.tmp-*' -o -name '.golden.old-*' \) | wc -l; }

# A lock holder other than degenbisect: a subshell that takes the flock and writes its PID, as ours do.
hold_lock() {  # hold_lock FILE: sets HOLDER
  mkdir -p "$(dirname "$1")"
  ( flock -x 9; echo $BASHPID >"$1"; exec sleep 60 ) 9>>"$1" &
  HOLDER=$!
  for _ in $(seq 100); do [ "$(cat "$1" 2>/dev/null)" = "$HOLDER" ] && return; sleep 0.05; done
  fail "the lock holder did not start"
}
release_lock() { kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true; }

# Item 2: 40 two-valued axes (2^40 cells) are refused at once, with the count (40 names: an axis
# given twice is an error of its own, issue 40; the count is checked before the keys are).
axes=()
for i in $(seq 40); do axes+=(--axis "x$i=a,b"); done
expect_exit 128 timeout 30 "$BIN" sweep --golden "$g" --model "$m" --out "$WORK/huge" "${axes[@]}"
expect_out "expected at most 100000 cells, found 1099511627776 (40 axes"
[ ! -e "$WORK/huge" ] || fail "a refused sweep created its --out"
expect_exit 0 "$BIN" sweep --help
expect_out "at most 100000 cells"

# Item 5: golden --force killed before and after its swap: --out stays a whole record (compare
# verifies every checksum), one temporary is left, and the next run removes it.
expect_exit 0 "${GOLDEN[@]}" --out "$g"
for point in before-swap after-swap; do
  expect_exit 137 env DEGEN_TEST_GOLDEN_KILL=$point "${GOLDEN[@]}" --out "$g" --force
  expect_exit 0 "$BIN" -q compare --golden "$g" --model "$m" --no-decode --case sum
  [ "$(leftovers)" = 1 ] || fail "killed at $point: expected one temporary beside the record, found $(leftovers)"
  expect_exit 0 "${GOLDEN[@]}" --out "$g" --force
  [ "$(leftovers)" = 0 ] || fail "after a run following a kill at $point: $(leftovers) temporaries left"
done
# A record moved aside by the two-rename fallback, killed between its renames: put back by the next run.
dead=$(bash -c 'echo $$')
mv "$g" "$WORK/.golden.old-$dead"
expect_exit 128 "${GOLDEN[@]}" --out "$g"
expect_out "already exists"
[ -f "$g/manifest.json" ] && [ "$(leftovers)" = 0 ] || fail "the record moved aside was not put back"

# Item 6: a second writer is refused while the first holds the lock, naming its PID.
hold_lock "$WORK/.golden.lock"
expect_exit 128 "${GOLDEN[@]}" --out "$g" --force
expect_out "locked by process $HOLDER"
release_lock
hold_lock "$WORK/s1/sweep.lock"
expect_exit 128 "$BIN" -q sweep --golden "$g" --model "$m" --axis attn=naive --case sum --no-decode --out "$WORK/s1"
expect_out "locked by process $HOLDER"
[ ! -e "$WORK/s1/results.jsonl" ] || fail "a refused sweep ran cells"
release_lock
hold_lock "$WORK/r1.jsonl.lock"
expect_exit 128 "$BIN" -q bisect --golden "$g" --model "$m" --bad attn=flash --case sum --no-decode --replay "$WORK/r1.jsonl"
expect_out "locked by process $HOLDER"
release_lock

# Item 7: a resume for another case set or model is refused, saying what differs.
expect_exit 0 "$BIN" -q sweep --golden "$g" --model "$m" --axis attn=naive --case sum --no-decode --out "$WORK/s2"
expect_exit 128 "$BIN" -q sweep --golden "$g" --model "$m" --axis attn=naive --case raw --no-decode --out "$WORK/s2" --resume
expect_out 'cases (--case/--cases): expected ["raw"] (this run), found ["sum"]'
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --seed 7 --out "$WORK/other"
expect_exit 128 "$BIN" -q sweep --golden "$g" --model "$WORK/other" --allow-model-mismatch --axis attn=naive --case sum \
  --no-decode --out "$WORK/s2" --resume
expect_out "model weights (--model)"
expect_exit 0 "$BIN" -q sweep --golden "$g" --model "$m" --axis attn=naive --case sum --no-decode --out "$WORK/s2" --resume
# Results written before identities: refused, with what to do.
python3 - "$WORK/s2/results.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for l in lines: l.pop("identity")
open(sys.argv[1], "w").write("".join(json.dumps(l) + "\n" for l in lines))
PY
expect_exit 128 "$BIN" -q sweep --golden "$g" --model "$m" --axis attn=naive --case sum --no-decode --out "$WORK/s2" --resume
expect_out "choose a new --out"
# bisect --replay with another case: refused, never the other case's evidence.
BISECT=("$BIN" -q bisect --golden "$g" --model "$m" --bad attn=flash --no-decode --no-subop --no-localise --replay "$WORK/r2.jsonl")
set +e; "${BISECT[@]}" --case sum >"$WORK/out" 2>&1; rc=$?; set -e
case $rc in 0|1|125) ;; *) cat "$WORK/out" >&2; fail "bisect exited $rc";; esac
[ -s "$WORK/r2.jsonl" ] || fail "bisect wrote no replay lines"
expect_exit 128 "${BISECT[@]}" --case raw
expect_out 'cases (--case/--cases): expected ["raw"] (this run), found ["sum"]'
expect_exit $rc "${BISECT[@]}" --case sum
# Issue 40, finding 1: every output (--json, --junit, report -o, --server-log) into a character device
# or a FIFO is written in place, never replaced: as root a rename over /dev/null replaced it with a
# regular file. Private nodes only (mknod in $WORK): a regression must not destroy the system's.
CMP=("$BIN" -q compare --golden "$g" --model "$m" --no-decode --case sum)
# A symbolic link is followed: its target is replaced, the link stays a link; a loop is refused.
ln -s target.json "$WORK/link.json"
expect_exit 0 "${CMP[@]}" --json "$WORK/link.json"
[ -L "$WORK/link.json" ] && [ -f "$WORK/target.json" ] || fail "--json through a symbolic link replaced the link"
ln -s loop.json "$WORK/loop.json"
expect_exit 128 "${CMP[@]}" --json "$WORK/loop.json"
expect_out "compare --json: cannot write $WORK/loop.json: Too many levels of symbolic links"
[ -L "$WORK/loop.json" ] || fail "a symlink loop given as --json was replaced"
c="$WORK/target.json"  # a compare JSON, the report's input below
if [ "$(id -u)" = 0 ] && mknod "$WORK/null" c 1 3 2>/dev/null && mknod "$WORK/full" c 1 7 2>/dev/null; then
  expect_exit 0 "${CMP[@]}" --json "$WORK/null"
  expect_exit 128 "${CMP[@]}" --junit "$WORK/full"
  expect_out "cannot write $WORK/full: write: No space left on device"
  expect_exit 0 "$BIN" report "$c" --format json -o "$WORK/null"
  expect_exit 128 "$BIN" report "$c" -o "$WORK/full"
  expect_out "No space left on device"
  # A server that exits at once (untestable): its log stays the node.
  expect_exit 125 timeout 20 "$BIN" -q compare --golden "$g" --model "$m" --case sum --server-cmd 'echo {port}; exit 3' \
    --server-log "$WORK/null" --health-timeout 5
  expect_out "the server exited"
  for n in null full; do [ -c "$WORK/$n" ] || fail "$WORK/$n is no longer a character device"; done
  # A block device (a disk) is refused before the run, never written or replaced (7,250: a loop device minor).
  if mknod "$WORK/blk" b 7 250 2>/dev/null; then
    expect_exit 128 "${CMP[@]}" --json "$WORK/blk"
    expect_out "it is a block device"
    [ -b "$WORK/blk" ] || fail "$WORK/blk is no longer a block device"
  fi
else
  echo "outputs: skipping the device-node checks (needs root and mknod)"
fi
# A FIFO (a reader in the background, under a time limit): --json, report -o and --server-log reach it.
mkfifo "$WORK/fifo"
timeout 20 cat "$WORK/fifo" >"$WORK/fifo.out" &
expect_exit 0 timeout 20 "${CMP[@]}" --json "$WORK/fifo"
wait $! || fail "the FIFO's reader failed or timed out"
grep -q '"verdict"' "$WORK/fifo.out" || fail "the JSON written into the FIFO did not reach its reader"
timeout 20 cat "$WORK/fifo" >"$WORK/fifo.out" &
expect_exit 0 timeout 20 "$BIN" report "$c" -o "$WORK/fifo"
wait $! || fail "the FIFO's reader failed or timed out"
timeout 20 cat "$WORK/fifo" >"$WORK/fifo.out" &
expect_exit 125 timeout 20 "$BIN" -q compare --golden "$g" --model "$m" --case sum --server-cmd 'echo port {port}; exit 3' \
  --server-log "$WORK/fifo" --health-timeout 5
wait $! || fail "the FIFO's reader failed or timed out"
grep -q "^port " "$WORK/fifo.out" || fail "the server's log did not reach the FIFO's reader"
[ -p "$WORK/fifo" ] || fail "$WORK/fifo is no longer a FIFO"

# stdout is an output too: whatever a command prints (JSON with '-', a report, a table, --help) and
# cannot write is exit 128 naming stdout and the OS error, never 0 with the output lost.
# (The system's /dev/full is only written to here: a shell redirection never replaces it.)
if [ -c /dev/full ]; then
  expect_stdout_full() {  # CMD...: stdout into /dev/full; stderr in $WORK/out
    local got
    set +e
    "$@" >/dev/full 2>"$WORK/out"
    got=$?
    set -e
    [ "$got" = 128 ] || { cat "$WORK/out" >&2; fail "'$*' >/dev/full exited $got, expected 128 (a failed write on stdout)"; }
    expect_out "cannot write stdout (/dev/full): write: No space left on device"
  }
  expect_stdout_full "$BIN" report "$c" -o -
  expect_stdout_full "$BIN" report "$c" --format json
  expect_stdout_full "${CMP[@]}" --json -
  expect_stdout_full "${CMP[@]}"
  expect_stdout_full "$BIN" inspect "$m" --json
  expect_stdout_full "$BIN" inspect "$m"
  expect_stdout_full "$BIN" faults
  expect_stdout_full "$BIN" faults --json
  expect_stdout_full "$BIN" tokenize --model "$m" "red green blue"
  expect_stdout_full "$BIN" tokenize --write-synth qwen35
  expect_stdout_full "$BIN" steps --json
  expect_stdout_full "$BIN" --help
  expect_stdout_full "$BIN" -q bisect --golden "$g" --model "$m" --bad attn=naive --case sum --no-decode --no-subop \
    --no-localise --json -
else
  echo "outputs: skipping the stdout checks (no /dev/full)"
fi
# A reader that left before anything was written (a pipe whose read end is closed): with SIGPIPE
# ignored (inherited) the write fails with EPIPE: exit 128 naming the pipe; with SIGPIPE's default
# action the process dies of the signal, quietly, as `... | head` expects. Never exit 0.
python3 - "$BIN" "$c" <<'PY'
import os, signal, subprocess, sys
binary, compare_json = sys.argv[1], sys.argv[2]
for cmd in (["faults"], ["report", compare_json, "-o", "-"]):
    for action in (signal.SIG_IGN, signal.SIG_DFL):
        r, w = os.pipe()
        os.close(r)
        p = subprocess.run([binary] + cmd, stdout=w, stderr=subprocess.PIPE, timeout=30,
                           preexec_fn=lambda: signal.signal(signal.SIGPIPE, action))
        os.close(w)
        err = p.stderr.decode(errors="replace")
        what = "%s with SIGPIPE %s" % (" ".join(cmd), "ignored" if action == signal.SIG_IGN else "at its default")
        if action == signal.SIG_IGN:
            if p.returncode != 128 or "cannot write stdout (pipe:[" not in err or "write: Broken pipe" not in err:
                sys.exit("FAIL: %s: expected exit 128 and 'cannot write stdout (pipe:[...]): write: Broken pipe', "
                         "found exit %d and %r" % (what, p.returncode, err))
        elif p.returncode != -signal.SIGPIPE:
            sys.exit("FAIL: %s: expected death by SIGPIPE, found exit %d and %r" % (what, p.returncode, err))
PY
echo "outputs: ok"
