# compare --server judges a real llama-server where its bugs live: the decode path and the state
# restored after rejected drafts (issue 41). The llama.cpp built with tests/llama/serving-state-bugs.patch
# (scripts/build-llama-cpp.sh --dir build/llama.cpp-serving-bugs --patch ...) carries four deliberate
# bugs, each off unless DEGEN_LLAMA_BUG names it, all invisible to teacher-forced prefill scoring:
#  - no variable: the clean behaviour; good, the decode-path KLD at every generated step within the limit;
#  - handoff (the conv window saved from a multi-token prompt one column early): bad, with the
#    decode-path reason naming the step and the engine's own prefill there agreeing;
#  - rollback (after rejected MTP drafts the snapshot one token too late is restored), with
#    --spec-type draft-mtp: bad by greedy agreement (llama-server states no distribution for tokens
#    accepted from drafts), and a sweep over spec=none,draft-mtp shows "spec: effect";
#  - prefix (a context checkpoint restored without its recurrent state): bad by the prefix-cache probe,
#    and good with --probes none;
#  - batch (each sequence of a batch of several reads the next one's state): bad by the batching probe
#    on a server with 2 slots, and the probe not applicable with 1;
#  - chunk (each later ubatch of a batch split into several runs from a zero state): chunked prefill
#    is a server setting in llama-server 0.3.36 (-ub, no per-request switch), so its probe is a sweep
#    over it: the clean build chunked by 8 is good; with the bug, "ub: effect";
#  - handoff under llama-dump --decode: compare --dump names layer 0's causal conv.
# One case (count, 48 greedy tokens) keeps it cheap. Skips without the build or the GGUF.
source "$(dirname "$0")/lib.bash"

G="$SRC/golden/tiny-trained/smoke"
M="$SRC/models/tiny-trained"
GGUF="$SRC/models/tiny-trained-gguf/tiny-trained-f32.gguf"
SRV="${DEGEN_LLAMA_CPP_SERVING_BUGS:-$SRC/build/llama.cpp-serving-bugs}/build/bin/llama-server"
[ -f "$GGUF" ] || { echo "SKIP: no $GGUF (make gguf)"; exit 77; }
[ -x "$SRV" ] || {
  echo "SKIP: no llama-server with the serving-state bugs at $SRV (scripts/build-llama-cpp.sh --dir build/llama.cpp-serving-bugs --patch tests/llama/serving-state-bugs.patch --targets llama-server)"
  exit 77
}
# --poll 0: see tests/cli/server.sh.
cmd() { echo "$SRV -m $GGUF --host 127.0.0.1 --port {port} -t 1 --poll 0 -c 4096 -np 1 -ctk f32 -ctv f32 -fa off $*"; }
score() {  # BUG EXTRA_SERVER_ARGS... (the rest of compare's arguments after --)
  local bug=$1; shift
  DEGEN_LLAMA_BUG=$bug "$BIN" compare --golden "$G" --model "$M" --case count --health-timeout 120 \
    --server-cmd "$(cmd "$@")" --server-log "$WORK/server-$bug.log" --json "$WORK/$bug.json"
}

t0=$(date +%s)
# The clean run with 2 slots (the batching probe runs the case beside one distractor).
expect_exit 0 score "" -np 2
expect_out "verdict: good (exit 0)"
python3 - "$WORK/.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["cases"][0]["generation"]["decode_path"]
assert d["steps"] == 48 and d["scored"] == 48, d
assert d["first_bad_step"] is None and d["max_kld"] <= d["limit"], d
print("clean: decode-path KLD mean %.2e max %.2e, limit %.2e (peak floor %.2e, %s)" %
      (d["mean_kld"], d["max_kld"], d["limit"], d["peak_floor"], d["floor_source"]))
PY

expect_exit 1 score handoff
expect_out "decode path: step 1 (KLD"
expect_out "while the prefill of the same tokens agrees"
expect_out "greedy agreement: token 1 is"
grep -m1 "decode path: step" "$WORK/out"
# The reports show it: the decode-path row with the first bad step, the per-step plot, and the marker
# where that step's token starts in the tested text.
expect_exit 0 "$BIN" report "$WORK/handoff.json" --model "$M" --format md -o "$WORK/handoff.md"
grep -q "first bad step" "$WORK/handoff.md" || fail "the Markdown report has no decode-path table"
grep -Eq '^\| `count` \| [0-9]+ of [0-9]+ \| [^|]+ \| [^|]+ \| [^|]+ \| \*\*1\*\* \|' "$WORK/handoff.md" ||
  fail "the Markdown report's decode-path row does not name step 1: $(grep -m1 ' of .* | \*\*' "$WORK/handoff.md")"
expect_exit 0 "$BIN" report "$WORK/handoff.json" --model "$M" -o "$WORK/handoff.html"
for s in "Decode path, KLD per generated step: count" "first bad step (1)" 'class="firstbad" title="first bad decode step 1"' \
  "<h3>Serving probes</h3>"; do
  grep -qF "$s" "$WORK/handoff.html" || fail "the HTML report lacks: $s"
done

expect_exit 1 score rollback --spec-type draft-mtp
expect_out "greedy agreement: token 5 is"
expect_out "the server stated no distribution at"
grep -m1 "greedy agreement" "$WORK/out"

# prefix (a context checkpoint restored without its recurrent state): the prefix-cache probe, warm
# against cold on the server itself, names the step; the clean run above had the probe good.
python3 - "$WORK/.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["cases"][0]["generation"]["probes"]
assert [x["probe"] for x in p] == ["prefix-cache", "batching"] and all(x["verdict"] == "good" for x in p), p
assert p[0]["cached_tokens"] > 0 and p[1]["slots"] == 2 and all(x["max_kld"] <= x["limit"] for x in p), p
print("clean: prefix-cache probe good, %d cached tokens, max KLD %.2e; batching probe good, max KLD %.2e" %
      (p[0]["cached_tokens"], p[0]["max_kld"], p[1]["max_kld"]))
PY
expect_exit 1 score prefix
expect_out "probe prefix-cache: warm (18 cached tokens) against cold: step 0 KLD over the limit"
grep -m1 "probe prefix-cache" "$WORK/out"
# --probes none: the same bug is not looked for, and the case is good.
expect_exit 0 env DEGEN_LLAMA_BUG=prefix "$BIN" compare --golden "$G" --model "$M" --case count --health-timeout 120 \
  --probes none --server-cmd "$(cmd)"
expect_out "verdict: good (exit 0)"
# batch (each sequence of a multi-sequence ubatch reads the next one's state): the batching probe,
# the case beside a distractor on 2 slots against the case alone; with 1 slot it is not applicable.
expect_exit 1 score batch -np 2
expect_out "probe batching: batched (beside 1 other request, 2 slots) against solo: step 0 KLD over the limit"
grep -m1 "probe batching" "$WORK/out"
expect_exit 0 score batch
expect_out "probe batching: not applicable (the server has 1 slot: concurrent requests queue, they are not batched"

# llama-dump --decode (the prompt in one batch, then a token per batch) localises handoff inside the
# engine: compare --dump judges it as the record's decode mode and names layer 0's causal conv; the
# prefill dump of the same build is good (the bug is confined to the decode path), as is the clean
# decode dump.
DUMP="$(dirname "$SRV")/llama-dump"
if [ -x "$DUMP" ]; then
  dump() {  # BUG OUT EXTRA...
    local bug=$1 out=$2; shift 2
    DEGEN_LLAMA_BUG=$bug "$DUMP" -m "$GGUF" --golden "$G" --out "$out" --case count --cache-type f32 --flash-attn off \
      --threads 1 "$@" > "$WORK/dump.log" 2>&1 || { cat "$WORK/dump.log"; fail "llama-dump $bug $*"; }
  }
  judge() { "$BIN" compare --golden "$G" --model "$M" --case count --dump "$1"; }
  dump "" "$WORK/d-clean" --decode
  expect_exit 0 judge "$WORK/d-clean"
  dump handoff "$WORK/d-prefill"
  expect_exit 0 judge "$WORK/d-prefill"
  dump handoff "$WORK/d-handoff" --decode
  expect_exit 1 judge "$WORK/d-handoff"
  expect_out "decode mode: first layer over its drift floor: 0 (Gated DeltaNet)"
  expect_out "first step over its floor in layer 0: gdn_conv (the engine's 'conv_output_silu-0'"
  grep -m1 "first step over its floor" "$WORK/out"
else
  echo "SKIP (part): no llama-dump beside $SRV (build it with --targets \"llama-server llama-dump\")"
fi

# chunked prefill (the count case's 18-token prompt in ubatches of 8): the clean build is good chunked,
# and a sweep over the ubatch size names the chunk bug.
expect_exit 0 score "" -ub 8
expect_out "verdict: good (exit 0)"
expect_exit 1 "$BIN" sweep --golden "$G" --model "$M" --case count --out "$WORK/sweep-ub" --health-timeout 120 \
  --server-cmd "env DEGEN_LLAMA_BUG=chunk $(cmd -ub {ub})" --axis ub=512,8
expect_out "-> ub: effect"
grep -m1 -- "-> ub:" "$WORK/out"

# The sweep over speculation names it (the bug selected by env(1) in the template: the command is exec'd).
expect_exit 1 "$BIN" sweep --golden "$G" --model "$M" --case count --out "$WORK/sweep" --health-timeout 120 \
  --server-cmd "env DEGEN_LLAMA_BUG=rollback $(cmd --spec-type {spec})" --axis spec=none,draft-mtp
expect_out "-> spec: effect"
grep -m1 -- "-> spec:" "$WORK/out"
echo "llama_decode: ok ($(($(date +%s) - t0)) s)"
