# A sweep as a Slurm job array on a real (single-node, throw-away) Slurm (issue 24; README "Sweeps
# on a cluster"): tests/slurm/cluster.bash starts munged, slurmctld and slurmd from Debian's packages
# in a temporary folder; scripts/slurm-sweep.sh submits a 24-cell CPU sweep of the shipped
# tiny-qwen35 as a 4-task array (one stand-in GPU per task) plus its merge job. Checked:
#  - task 1 is cancelled (scancel) after its first results and requeued: its results from before the
#    cancel are kept byte for byte, and afterwards every cell of its shard is in results.jsonl exactly
#    once (nothing lost, nothing run twice), the task restarted once;
#  - the merge job waits for the requeued task, its report JSON equals the unsharded sweep's (apart
#    from the seconds each cell took), it writes HTML and JUnit, and its exit code
#    (from scontrol show job: no slurmdbd here) is the unsharded sweep's (1: the matrix has bad cells);
#  - a merge job for another shard count exits 128 naming the shard, and so does each task of an array
#    of another size than the shard count, before any work;
#  - whole nodes (--gpus-per-node 2): 2 tasks run 2 shards each, one per GPU of the task (--device 0
#    and 1); the merged report is the unsharded one's and the merge job exits 0 as that sweep does.
# Skips (77) with the reason when Slurm or munge is missing or the cluster does not come up.
# Every wait has a time-out; the daemons and jobs are stopped by a trap whatever happens.
source "$(dirname "$0")/lib.bash"
source "$SRC/tests/slurm/cluster.bash"

t_start=$(date +%s)
cdir=$(mktemp -d /tmp/degen-slurm.XXXXXX)  # short: the munge socket's path must fit a sockaddr_un
cleanup() {
  cluster_stop
  rm -rf "$cdir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
if ! cluster_start "$cdir"; then
  echo "SKIP: Slurm could not start: $CLUSTER_WHY"
  exit 77
fi
echo "slurm: cluster up in $(( $(date +%s) - t_start )) s ($(sinfo -h -o '%N %c CPUs %G'))"

# The sweep: the shipped model and record, 24 cells (one axis value plants a GDN bug: bad cells), CPU.
m="$WORK/tiny-qwen35"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
G="$SRC/golden/tiny-qwen35/smoke"
ARGS=(--golden "$G" --model "$m"
      --axis attn=naive,flash --axis ssm_dtype=fp32,bf16,fp16 --axis conv_dtype=fp32,bf16
      --axis gdn_kernel=gdn=chunked,fault=gdn-read-before-decay@2)
cells=24 n=4

# The unsharded sweep, in the background while the array runs.
( set +e; "$BIN" -q sweep "${ARGS[@]}" --out "$WORK/all" >"$WORK/all.log" 2>&1; echo $? >"$WORK/all.rc" ) &
ref_pid=$!

# deadline SECONDS: the time left of this test's budget (ctest gives 600 s); fail() when spent.
budget=480
left() { echo $(( budget - ($(date +%s) - t_start) )); }
job_field() { { scontrol show job "$1" 2>/dev/null || true; } | tr " " "\n" | sed -n "s/^$2=//p" | head -n 1; }
dump() {
  echo "== squeue"; squeue -t all 2>&1 | head -20
  for f in "$WORK"/sweep/logs/*.out; do [ -f "$f" ] && { echo "== $f"; tail -n 20 "$f"; }; done
  cluster_logs
}
die() { dump >&2; fail "$@"; }
# wait_end JOB: until the job has ended, within the budget.
wait_end() {
  local state
  while :; do
    state=$(job_field "$1" JobState)
    case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) return 0 ;; esac
    [ "$(left)" -gt 0 ] || die "job $1 did not end in time (state ${state:-unknown})"
    sleep 0.5
  done
}
# same_report A B: two report JSONs are equal apart from what legitimately differs: the seconds each
# cell took. The differing top-level keys go to stderr.
same_report() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def norm(x):
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [norm(v) for v in x]
    return x
a, b = norm(json.load(open(sys.argv[1]))), norm(json.load(open(sys.argv[2])))
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        print(f"differs: {k}: {json.dumps(a.get(k))[:300]} vs {json.dumps(b.get(k))[:300]}", file=sys.stderr)
if a != b:
    sys.exit(1)
if len(a["sweeps"]) != 1 or a["sweeps"][0].get("missing"):
    sys.exit("expected one sweep with no cell missing")
EOF
}

out="$WORK/sweep"
"$SRC/scripts/slurm-sweep.sh" --shards $n --out "$out" --bin "$BIN" -- "${ARGS[@]}" >"$WORK/submit.log" 2>&1 ||
  die "slurm-sweep.sh failed: $(cat "$WORK/submit.log")"
read -r _ array _ merge <"$out/slurm-jobs"
[ -n "$array" ] && [ -n "$merge" ] || die "no job ids in $out/slurm-jobs"
grep -q "requeue: scontrol requeue ${array}_K" "$WORK/submit.log" || die "slurm-sweep.sh did not say how to requeue"

# Cancel task 1 (shard 2/4) once it has a result, while it still runs; then requeue it.
victim="${array}_1"
jsonl="$out/shard-2/results.jsonl"
while :; do
  [ "$(left)" -gt 0 ] || die "shard 2 wrote no result in time"
  have=$(grep -c . "$jsonl" 2>/dev/null || true)
  [ "${have:-0}" -ge 1 ] && break
  sleep 0.2
done
scancel "$victim"
while [ "$(job_field "$victim" JobState)" != CANCELLED ]; do
  [ "$(left)" -gt 0 ] || die "task $victim was not cancelled (state $(job_field "$victim" JobState))"
  sleep 0.2
done
# The complete lines (a line cut by the kill, if any, is not a result; the resumed sweep drops it).
kept=$(tr -cd '\n' <"$jsonl" | wc -c)
head -n "$kept" "$jsonl" >"$WORK/before-cancel.jsonl"
[ "$kept" -lt $((cells / n)) ] || die "task $victim had finished its $((cells / n)) cells before the cancel; the test needs slower cells"
[ "$(job_field "$merge" JobState)" = PENDING ] || die "the merge job did not wait for the cancelled task"
# Requeue (retried: Slurm may refuse while the cancelled task's processes are still being killed).
until scontrol requeue "$victim" 2>"$WORK/requeue.err"; do
  [ "$(left)" -gt 0 ] || die "scontrol requeue $victim failed: $(cat "$WORK/requeue.err")"
  sleep 0.5
done
# note: Slurm holds a requeued job until its old credential has expired (cred_expire, 2 minutes by
# default; 10 s in this cluster's slurm.conf); moving its StartTime earlier gets it killed at launch.
echo "slurm: cancelled $victim after $kept of its $((cells / n)) cells, requeued it"

# The merge job runs after the whole array, the requeued task included.
wait_end "$merge"
wait "$ref_pid" || true
ref_rc=$(cat "$WORK/all.rc")
[ "$ref_rc" = 1 ] || { cat "$WORK/all.log" >&2; die "the unsharded sweep exited $ref_rc, expected 1 (bad cells)"; }
merge_rc=$(job_field "$merge" ExitCode)
[ "$merge_rc" = "$ref_rc:0" ] || die "the merge job's exit code is $merge_rc, expected the sweep's: $ref_rc:0"
for t in 0 1 2 3; do
  [ "$(job_field "${array}_$t" JobState)" = COMPLETED ] || die "task ${array}_$t: $(job_field "${array}_$t" JobState), expected COMPLETED"
done
[ "$(job_field "$victim" Restarts)" = 1 ] || die "task $victim restarted $(job_field "$victim" Restarts) times, expected 1"

# Nothing lost, nothing repeated: the results from before the cancel are the first lines, byte for
# byte, and each cell of every shard is there exactly once.
head -n "$kept" "$jsonl" | cmp -s - "$WORK/before-cancel.jsonl" || die "results of $victim from before the cancel changed"
for i in 1 2 3 4; do
  f="$out/shard-$i/results.jsonl"
  python3 - "$f" "$i" "$n" "$cells" <<'EOF' || die "shard $i's results are wrong"
import json, sys
path, i, n, cells = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if l.strip()]
idx = [r["index"] for r in rows]
want = [c for c in range(cells) if c % n == i - 1]
if sorted(idx) != want:
    sys.exit(f"{path}: cell indices {sorted(idx)}, expected each of {want} once")
EOF
done
grep -q "restart 1" "$out"/logs/task-"${array}"_1.out || die "the requeued task's log lacks its second start"

# The merged report is the unsharded sweep's.
expect_exit 1 "$BIN" report "$WORK/all" -o "$WORK/all.json" --expect-shards 1
same_report "$WORK/all.json" "$out/report.json" || die "the merged report differs from the unsharded sweep's"
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["sweeps"][0]["rows"]))' "$out/report.json")" = $cells ] ||
  die "the merged report does not have $cells cells"
grep -q "<testsuite" "$out/junit.xml" || die "the merge job wrote no JUnit"
grep -q "<svg" "$out/report.html" || die "the merge job wrote no HTML report"

# A merge for an array of another size is refused, naming the shard: exit 128.
bad=$(DEGEN_BIN=$BIN sbatch --parsable --output="$out/logs/badmerge-%j.out" "$SRC/scripts/slurm/merge.sbatch" "$out" 3)
bad=${bad%%;*}
wait_end "$bad"
[ "$(job_field "$bad" ExitCode)" = "128:0" ] || die "a merge for 3 shards of a 4-shard sweep exited $(job_field "$bad" ExitCode), expected 128:0"
grep -q "is shard 1/4 of a sweep in 4 shards, expected shards of 3" "$out"/logs/badmerge-"$bad".out ||
  die "the refused merge does not name the shard: $(cat "$out"/logs/badmerge-"$bad".out)"

# An array of another size than the shard count: each task refuses before any work, exit 128.
wrong=$(DEGEN_BIN=$BIN DEGEN_SHARDS=4 sbatch --parsable --array=0-2 --output="$out/logs/wrong-%A_%a.out" \
  "$SRC/scripts/slurm/sweep.sbatch" "$WORK/wrong" -- "${ARGS[@]}")
wrong=${wrong%%;*}
wait_end "${wrong}_0"
[ "$(job_field "${wrong}_0" ExitCode)" = "128:0" ] || die "a task of a 3-task array for 4 shards exited $(job_field "${wrong}_0" ExitCode), expected 128:0"
grep -q "the sweep is in 4 shards (DEGEN_SHARDS), but this array runs 3" "$out/logs/wrong-${wrong}_0.out" ||
  die "the refused task does not say why: $(cat "$out/logs/wrong-${wrong}_0.out")"
[ ! -e "$WORK/wrong" ] || die "the refused task wrote $WORK/wrong"

# Whole nodes: 2 tasks of 2 shards each, on the 2 GPUs of each task's node (--gpus-per-node 2), a
# smaller matrix without the planted bug: the merge job's exit code follows the verdict (0 here).
ARGS2=(--golden "$G" --model "$m" --case two-plus-two --no-decode --axis attn=naive,flash --axis ssm_dtype=fp32,bf16)
set +e
"$BIN" -q sweep "${ARGS2[@]}" --out "$WORK/all2" >"$WORK/all2.log" 2>&1
ref2_rc=$?
set -e
[ "$ref2_rc" = 0 ] || { cat "$WORK/all2.log" >&2; die "the second unsharded sweep exited $ref2_rc, expected 0"; }
out2="$WORK/sweep2"
"$SRC/scripts/slurm-sweep.sh" --shards 4 --gpus-per-node 2 --out "$out2" --bin "$BIN" -- "${ARGS2[@]}" >"$WORK/submit2.log" 2>&1 ||
  die "slurm-sweep.sh --gpus-per-node 2 failed: $(cat "$WORK/submit2.log")"
read -r _ array2 _ merge2 <"$out2/slurm-jobs"
wait_end "$merge2"
[ "$(job_field "$merge2" ExitCode)" = "$ref2_rc:0" ] ||
  die "the whole-node merge job's exit code is $(job_field "$merge2" ExitCode), expected the sweep's: $ref2_rc:0"
for t in 0 1; do
  log="$out2/logs/task-${array2}_$t.out"
  for s in 1 2; do
    i=$((t * 2 + s))
    grep -q "shard $i/4 on --device $((s - 1)) " "$log" || die "task $t did not run shard $i on its GPU $((s - 1)): $(cat "$log")"
  done
done
expect_exit 0 "$BIN" report "$WORK/all2" -o "$WORK/all2.json"
same_report "$WORK/all2.json" "$out2/report.json" || die "the whole-node merged report differs from the unsharded sweep's"

echo "slurm_sweep: ok in $(( $(date +%s) - t_start )) s: 4-task array + merge; a cancelled and requeued task lost and repeated nothing; merge exit $merge_rc; whole nodes: 2 tasks x 2 shards, merge exit 0"
