# sweep --server-cmd: a sweep whose cells are server command lines, each started, waited for, scored
# and stopped by the sweep (docs/server.md, "Sweeps over server flags").
#  - bad templates are input errors (128) before any server starts: no {port}, a placeholder that is
#    no parameter, an axis the command does not use, --isolate;
#  - a server that exits at once, or never answers /health, is its cell's "untestable" (every cell:
#    exit 125) with its log's last line, and is not left running; Ctrl-C during a cell kills the server,
#    and so does a SIGKILL of the sweep; an axis given twice is 128; an axis value with $(...), `...`,
#    ; and * reaches the server's command line as literal text (issue 40);
#  - the llama.cpp with the deliberate GDN bug (tests/llama/gdn-read-before-decay.patch), swept over
#    flash attention on|off and MTP drafting on|off: every cell bad, "fa: no effect" (what the seed's
#    user saw by hand); --resume starts no server again;
#  - the clean llama.cpp with f32 caches: flash attention off is good with and without MTP drafting,
#    on breaks the fp32 floor on the longer prompt (with flash attention llama.cpp casts f32 K and V to
#    f16, src/llama-graph.cpp build_attn_mha): "fa: effect".
# The llama.cpp parts skip, with the reason, when scripts/build-llama-cpp.sh has not built them.
source "$(dirname "$0")/lib.bash"

G="$SRC/golden/tiny-trained/smoke"
M="$SRC/models/tiny-trained"
sweep() { "$BIN" -q sweep --golden "$G" --model "$M" --case two-plus-two "$@"; }
# No process of this test's command lines may outlive it.
leftover() { pgrep -f "^$1" >/dev/null 2>&1; }

expect_exit 0 "$BIN" sweep --help
expect_out "--server-cmd"
expect_out "{port}"

# Bad templates: input errors, named, before any work.
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port 8080 -fa {fa}' --axis fa=on,off
expect_out "the command has no {port}"
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port {port} -fa {fa} -t {threads}' --axis fa=on,off
expect_out "placeholder {threads} is neither {port} nor an axis or base parameter (have: port, fa)"
expect_out "a brace the command itself needs, as in a JSON argument, is written '{{' and '}}'"
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port {port}' --axis fa=on,off
expect_out "parameter 'fa' is not used by the command"
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port {port} {fa' --axis fa=on,off
expect_out "is not closed"
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port {port} -fa {fa}' --axis fa=on,off --isolate
expect_out "--isolate does not apply"
[ ! -e "$WORK/s0/servers" ] || fail "a server log was written although the template is bad"
# An axis given twice was merged (the main effects listed a value that never ran): 128, named.
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port {port} -fa {fa}' --axis fa=on,off --axis fa=x
expect_out "axis 'fa' is given twice"
echo '{"axes": {"fa": ["on"], "fa": ["off"]}}' >"$WORK/dup.json"
expect_exit 128 sweep --out "$WORK/s0" --server-cmd 'true --port {port} -fa {fa}' --matrix "$WORK/dup.json"
expect_out "key 'fa' appears twice"

# Issue 40: values were pasted into the line sh runs, so a shared matrix could run commands. Each
# value reaches the server's command line as literal text, outside quotes and inside "..." alike.
mkdir -p "$WORK/inj"
evil='$(touch PWNED)`touch PW2`; echo *'
tmpl='sh -c '"'"'printf "%s|" "$@" >argv; exit 3'"'"' sh {x} "{x}" {port}'
bin=$(realpath "$BIN") g=$(realpath "$G") m=$(realpath "$M")
(cd "$WORK/inj" && "$bin" -q sweep --golden "$g" --model "$m" --case two-plus-two --out out --health-timeout 3 \
  --server-cmd "$tmpl" --axis "x=$evil" >log 2>&1) && fail "the sweep over a server that exits at once exited 0"
[ ! -e "$WORK/inj/PWNED" ] && [ ! -e "$WORK/inj/PW2" ] || fail "an axis value ran as a command"
[ "$(cut -d'|' -f1,2 "$WORK/inj/argv")" = "$evil|$evil" ] || { cat "$WORK/inj/argv"; fail "the value did not reach the server as literal text"; }

# A server that exits at once: each cell untestable with the log's last line; all untestable -> 125.
t0=$(date +%s)
expect_exit 125 sweep --out "$WORK/s1" --health-timeout 3 --server-cmd "sh -c 'echo error: invalid argument: -fa \$0 >&2; exit 3' {fa} {port}" \
  --axis fa=on,off
expect_out "2 cells: 0 bad, 0 error, 2 untestable"
grep -q "exited with status 3 before it was healthy" "$WORK/s1/results.jsonl" || { cat "$WORK/s1/results.jsonl"; fail "no exit status"; }
grep -q "error: invalid argument: -fa off" "$WORK/s1/results.jsonl" || fail "the log's last line is not in the reason"
[ -s "$WORK/s1/servers/cell-1.log" ] || fail "no server log for cell 1"
# One that never answers /health: untestable after --health-timeout (3 s), and killed.
expect_exit 125 sweep --out "$WORK/s2" --health-timeout 3 --server-cmd 'sh -c "sleep 293" {port} {fa}' --axis fa=on
expect_out "1 cells: 0 bad, 0 error, 1 untestable"
grep -q "was not healthy after 3 s" "$WORK/s2/results.jsonl" || { cat "$WORK/s2/results.jsonl"; fail "no health time-out"; }
sleep 0.5
! leftover "sleep 293" || fail "the unhealthy server was left running"
el=$(($(date +%s) - t0))
[ "$el" -le 40 ] || fail "the failing servers took $el s"
# Ctrl-C during a cell: the sweep dies of it and takes the server with it.
"$BIN" -q sweep --golden "$G" --model "$M" --out "$WORK/s3" --health-timeout 60 \
  --server-cmd 'sh -c "sleep 297" {port} {fa}' --axis fa=on >"$WORK/s3.log" 2>&1 &
spid=$!
for _ in $(seq 1 50); do leftover "sleep 297" && break; sleep 0.1; done
leftover "sleep 297" || fail "the server of the interrupted sweep never started"
kill -INT "$spid"
set +e; wait "$spid"; rc=$?; set -e
[ "$rc" -ne 0 ] || fail "the interrupted sweep exited 0"
sleep 0.5
! leftover "sleep 297" || { pkill -f "^sleep 297"; fail "Ctrl-C left the cell's server running"; }
# SIGKILL of the sweep (no handler sees it): its server dies with it, and so does what the server
# started (here a python that sh forks: '; true' keeps sh from exec'ing it), by the watcher that
# leads the server's group (PR_SET_PDEATHSIG).
"$BIN" -q sweep --golden "$G" --model "$M" --out "$WORK/s4" --health-timeout 60 \
  --server-cmd "sh -c 'python3 -c \"import time; time.sleep(296)\"; true' {port} {fa}" --axis fa=on >"$WORK/s4.log" 2>&1 &
spid=$!
for _ in $(seq 1 50); do pgrep -f "python3 -c import time; time.sleep.296" >/dev/null && break; sleep 0.1; done
spid_server=$(pgrep -f "python3 -c import time; time.sleep.296" || true)
[ -n "$spid_server" ] || fail "the server of the killed sweep never started"
set +e; { kill -9 "$spid"; wait "$spid"; } 2>/dev/null; set -e
for _ in $(seq 1 30); do kill -0 "$spid_server" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$spid_server" 2>/dev/null || { kill "$spid_server"; fail "SIGKILL of the sweep left its server (pid $spid_server) running"; }
echo "failing servers: ok ($el s)"

GGUF="$SRC/models/tiny-trained-gguf/tiny-trained-f32.gguf"
BUG="${DEGEN_LLAMA_CPP_GDN_BUG:-$SRC/build/llama.cpp-gdn-bug}/build/bin/llama-server"
CLEAN="${DEGEN_LLAMA_CPP:-$SRC/build/llama.cpp}/build/bin/llama-server"
# --poll 0: see tests/cli/server.sh (spinning llama-server threads slow each other on 2 cores).
cmd() { echo "$1 -m $GGUF --host 127.0.0.1 --port {port} -t 1 --poll 0 -c 4096 -np 1 -ctk f32 -ctv f32 -fa {fa} --spec-type {spec}"; }
if [ ! -f "$GGUF" ]; then
  echo "note: no $GGUF (make gguf): the llama.cpp parts not run"
  exit 0
fi
if [ -x "$BUG" ]; then
  t0=$(date +%s)
  expect_exit 1 sweep --out "$WORK/bug" --health-timeout 120 --no-generate --server-cmd "$(cmd "$BUG")" \
    --axis fa=on,off --axis spec=none,draft-mtp
  expect_out "-> fa: no effect (2/2 bad with each value)"
  expect_out "-> spec: no effect (2/2 bad with each value)"
  expect_out "4 cells: 4 bad, 0 error, 0 untestable"
  expect_out "every cell is bad: the cause lies in what every cell shares, not in an axis: the rest of the server's"
  grep -E "^fa=|-> " "$WORK/out"
  [ "$(grep -c '"verdict":"bad"' "$WORK/bug/results.jsonl")" = 4 ] || fail "results.jsonl lacks 4 bad cells"
  # Resumed: every cell is done, no server is started again.
  rm -rf "$WORK/bug/servers"
  expect_exit 1 sweep --out "$WORK/bug" --health-timeout 120 --no-generate --server-cmd "$(cmd "$BUG")" \
    --axis fa=on,off --axis spec=none,draft-mtp --resume
  expect_out "4 cells: 4 bad"
  [ ! -e "$WORK/bug/servers" ] || fail "--resume started a server for a finished cell"
  # The report of a server sweep is the report of any sweep.
  expect_exit 0 "$BIN" report "$WORK/bug"
  expect_out "| fa | \`on\` | 2/2 | 2/2 |"
  echo "GDN bug sweep: ok ($(($(date +%s) - t0)) s)"
else
  echo "note: no llama-server with the deliberate GDN bug at $BUG (scripts/build-llama-cpp.sh --dir build/llama.cpp-gdn-bug --patch tests/llama/gdn-read-before-decay.patch): that part not run"
fi
if [ -x "$CLEAN" ]; then
  t0=$(date +%s)
  expect_exit 1 sweep --out "$WORK/clean" --case out-of-domain --health-timeout 120 --server-cmd "$(cmd "$CLEAN")" \
    --axis fa=on,off --axis spec=none,draft-mtp
  expect_out "-> fa: effect (bad: on 2/2 off 0/2)"
  expect_out "-> spec: no effect (1/2 bad with each value)"
  grep -E "^fa=|-> " "$WORK/out"
  grep -q "creating MTP draft context" "$WORK/clean/servers/cell-3.log" || fail "the MTP cell did not draft with MTP"
  echo "clean llama.cpp sweep: ok ($(($(date +%s) - t0)) s)"
else
  echo "note: no llama-server at $CLEAN (scripts/build-llama-cpp.sh): the clean part not run"
fi
echo "server sweep: ok"
