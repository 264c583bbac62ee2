# A golden run survives interruption (issue 22): killed with SIGKILL at random points at least five
# times and run again each time, it keeps its finished cases (checked by SHA-256) and its final
# record is byte-identical to an uninterrupted run's; a partial record made with other settings is
# discarded, not mixed in. `golden --plan` prints the cost of a run, without weights for a
# config-only folder, and a run that the memory cannot hold is refused with exit 125 before it starts.
source "$(dirname "$0")/lib.bash"
m="$WORK/tiny"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
cases="$SRC/cases/smoke.json"
out="$WORK/a/smoke"
GOLDEN=("$BIN" golden --model "$m" --cases "$cases" --out "$out")

# The uninterrupted record, and how long it takes on this machine now.
t0=$(date +%s%N)
expect_exit 0 "${GOLDEN[@]}"
t_full=$(( ($(date +%s%N) - t0) / 1000000 ))  # ms
expect_out "golden: 7 of 7 cases done"
expect_out "golden: cost:"
mv "$out" "$WORK/reference"

# Kills at random points: each run is killed after a random share of the time a whole run takes,
# until five kills have hit a running process; then the run is let finish.
RANDOM=$$
kills=0 tries=0 kept_seen=0
while [ "$kills" -lt 5 ]; do
  tries=$((tries + 1))
  [ "$tries" -le 40 ] || fail "only $kills of 5 kills hit a running golden in 40 tries"
  delay_ms=$(( t_full * (10 + RANDOM % 50) / 100 ))
  "${GOLDEN[@]}" >"$WORK/run.log" 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || true
    kills=$((kills + 1))
    [ -e "$out" ] && [ ! -e "$out/manifest.json" ] && fail "a killed run left $out without a manifest"
    grep -q "kept from an interrupted run" "$WORK/run.log" && kept_seen=$((kept_seen + 1))
    if [ -e "$out" ]; then  # killed after the record was put in place: it must be the whole record; start over
      diff -r "$WORK/reference" "$out" >/dev/null || fail "a run killed after its swap left a record that differs"
      kills=$((kills - 1))
      rm -rf "$out" "$WORK/a/.smoke.partial" "$WORK/a/.smoke.resume"
    fi
  else
    wait "$pid" || fail "golden failed: $(cat "$WORK/run.log")"
    rm -rf "$out" "$WORK/a/.smoke.partial" "$WORK/a/.smoke.resume"  # finished before the kill: start over
  fi
done
[ -e "$out" ] || expect_exit 0 "${GOLDEN[@]}"
[ "$kept_seen" -ge 1 ] || grep -q "kept from an interrupted run" "$WORK/out" ||
  fail "no run kept a finished case of an interrupted one (kills too early?)"
diff -r "$WORK/reference" "$out" || fail "the resumed record differs from the uninterrupted one"
left=$(find "$WORK/a" -maxdepth 1 -name '.smoke.*' ! -name '.smoke.lock' | wc -l)
[ "$left" = 0 ] || fail "leftovers after the record was completed: $(ls -a "$WORK/a")"
echo "golden resume: $kills kills in $tries runs; the record is byte-identical to the uninterrupted one"

# A partial record made with other settings is discarded, and --restart discards one made with the same.
rm -rf "$out"
"${GOLDEN[@]}" >"$WORK/run.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -n "$(ls "$WORK/a/.smoke.resume" 2>/dev/null | grep case.json)" ] && break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
[ -d "$WORK/a/.smoke.partial" ] || fail "no partial record after a kill"
expect_exit 0 "${GOLDEN[@]}" --topk 5 --no-floors
expect_out "discarded the partial record of an interrupted run (made with other settings)"
expect_exit 0 "$BIN" -q golden --model "$m" --cases "$cases" --out "$WORK/b" --no-floors --gen-tokens 2
rm -rf "$WORK/b"
"$BIN" golden --model "$m" --cases "$cases" --out "$WORK/b" --gen-tokens 2 >"$WORK/run.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -n "$(ls "$WORK/.b.resume" 2>/dev/null | grep case.json)" ] && break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
expect_exit 0 "$BIN" golden --model "$m" --cases "$cases" --out "$WORK/b" --gen-tokens 2 --restart
expect_out "discarded the partial record of an interrupted run (--restart)"

# The resume state is checked whole (issue 40): an entry edited after it was written (a floor, the
# case id, its index, its degeneration), one made for another run, a data file that does not match
# its entry, or a file the run does not write in the partial record is refused (128, naming the file
# and what to remove), nothing computed or removed; a damaged resume.json is rewritten with a
# warning, the entries still checked one by one. A partial state made deterministically: killed
# right after case 2's entry is written.
rm -rf "$WORK/t" "$WORK/t0" "$WORK/f"
TG=("$BIN" golden --model "$m" --cases "$cases" --out "$WORK/t/smoke" --no-floors)
expect_exit 137 env DEGEN_TEST_GOLDEN_KILL=case-2 "${TG[@]}"
cp -a "$WORK/t" "$WORK/t0"
entry="$WORK/t/.smoke.resume/two-plus-two.case.json"
edit_entry() {  # edit_entry PYTHON-STATEMENT-ON-e: a fresh copy of the partial state with the entry edited
  rm -rf "$WORK/t" && cp -a "$WORK/t0" "$WORK/t"
  python3 -c "import json, sys; e = json.load(open(sys.argv[1])); $1; json.dump(e, open(sys.argv[1], 'w'))" "$entry"
}
for edit in "e['entry']['floors'] = {'bf16': None, 'fp32': None}; e['entry']['max_new_tokens'] = 1" \
            "e['entry']['id'] = 'prime-function'" "e['entry']['index'] = 5" \
            "e['entry']['degeneration']['degenerate'] = True"; do
  edit_entry "$edit"
  expect_exit 128 "${TG[@]}"
  expect_out "$entry: its content does not match its own checksum"
  expect_out "Nothing was computed or removed. Remove $entry and $WORK/t/.smoke.partial/two-plus-two.safetensors"
  [ ! -e "$WORK/t/smoke" ] || fail "a tampered resume entry was sealed into a record ($edit)"
done
rm -rf "$WORK/t" && cp -a "$WORK/t0" "$WORK/t" && echo x >"$WORK/t/.smoke.partial/extra.bin"
expect_exit 128 "${TG[@]}"
expect_out "$WORK/t/.smoke.partial/extra.bin: not a file the run writes there"
rm "$WORK/t/.smoke.partial/extra.bin"  # the remedy the message names: the rest is kept
rm -rf "$WORK/t/.smoke.resume/prime-function.case.json" "$WORK/t/.smoke.partial/prime-function.safetensors"
expect_exit 137 env DEGEN_TEST_GOLDEN_KILL=case-1 "${TG[@]}"  # (case 1 computed again, as the message says)
expect_exit 137 env DEGEN_TEST_GOLDEN_KILL=case-0 "$BIN" golden --model "$m" --cases "$cases" --out "$WORK/f/smoke" --no-floors --topk 5
cp "$WORK/f/.smoke.resume/two-plus-two.case.json" "$entry"
expect_exit 128 "${TG[@]}"
expect_out "$entry: it was made for another run (key_sha256"
rm -rf "$WORK/t" && cp -a "$WORK/t0" "$WORK/t"
printf 'xx' | dd of="$WORK/t/.smoke.partial/two-plus-two.safetensors" conv=notrunc status=none
expect_exit 128 "${TG[@]}"
expect_out "two-plus-two.safetensors: does not match its entry $entry"
rm -rf "$WORK/t" && cp -a "$WORK/t0" "$WORK/t" && echo garbage >"$WORK/t/.smoke.resume/resume.json"
expect_exit 0 "${TG[@]}"
expect_out "resume.json is damaged or was edited (not a JSON object); rewritten for this run's settings"
expect_out "resumed: 3 of 7 cases kept from an interrupted run"

# --plan: the cost of a run before it starts, for a config-only 27B (no weights needed) and this model.
q27="$WORK/q27"
expect_exit 0 "$BIN" synth --preset qwen36-27b --out "$q27"
expect_exit 0 "$BIN" golden --plan --model "$q27" --cases "$cases" --no-floors --memory-gbps 100 --gflops 2000 --memory-gb 512
expect_out "passes over the weights: 92 = 84 generation + 7 teacher-forced + 0 noise floors + 1 digest read"
expect_out "peak anonymous memory, at most"
expect_out "(config only; bf16 assumed)"
expect_out "estimate:"
# the MoE presets (config only) plan too: experts counted as a pass's tokens are expected to reach them
for p in qwen3next-80b-a3b qwen35-35b-a3b; do
  expect_exit 0 "$BIN" synth --preset "$p" --out "$WORK/$p"
  expect_exit 0 "$BIN" golden --plan --model "$WORK/$p" --cases "$cases" --batch all --storage-gbps 100 --memory-gbps 100 \
    --gflops 2000 --memory-gb 512
  expect_out "generated in 2 batch groups (--batch all)"
  expect_out " = 24 generation + 7 teacher-forced + "
  expect_out "estimate:"
done
# a machine that cannot hold the activations: refused with the figure, exit 125
expect_exit 125 "$BIN" golden --plan --model "$q27" --cases "$cases" --memory-gbps 100 --gflops 2000 --memory-gb 0.2
expect_out "REFUSED: needs"
expect_out "cannot hold the run: it needs about"
# ... and a real run the same: refused before any work, nothing written
expect_exit 125 "$BIN" golden --model "$m" --cases "$cases" --out "$WORK/c" --memory-gb 0.01
expect_out "cannot hold the run"
[ ! -e "$WORK/c" ] && [ ! -e "$WORK/.c.partial" ] || fail "a refused run wrote something"
# bad values
expect_exit 128 "$BIN" golden --plan --model "$q27" --cases "$cases" --memory-gb -1
expect_out "--memory-gb must be a positive number"
echo "golden resume and plan: ok"
