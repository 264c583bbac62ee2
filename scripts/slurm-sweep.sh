#!/usr/bin/env bash
# Submits a degenbisect sweep to Slurm as a job array plus a merge job (README "Sweeps on a cluster"):
#
#   scripts/slurm-sweep.sh --shards 8 --out /shared/sweeps/s1 -- \
#       --golden golden/big/smoke --model /models/big --matrix cases/matrix-default.json
#   scripts/slurm-sweep.sh --shards 16 --gpus-per-node 8 --out DIR -- ...   # whole nodes, 8 shards each
#
# One GPU per array task (scripts/slurm/sweep.sbatch), or with --gpus-per-node G one node per task
# running G shards on its G GPUs (--exclusive --gres=gpu:G); the merge job (scripts/slurm/merge.sbatch)
# depends on the whole array (afterany), merges OUT/shard-* into OUT/report.{json,html} and
# OUT/junit.xml, and exits with the sweep's verdict. OUT must be on storage every node sees.
# Options: --bin PATH (degenbisect, default build/degenbisect beside this script, else PATH);
# --sbatch "ARGS" (more sbatch options for both jobs: partition, account, time limit...).
# Prints the two job ids ("array JOB merge JOB") and how to watch them; writes them to OUT/slurm-jobs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  echo "usage: scripts/slurm-sweep.sh --shards N --out DIR [--gpus-per-node G] [--bin PATH] [--sbatch \"ARGS\"] -- SWEEP_ARGS..." >&2
  exit 128
}
shards="" out="" per_node=1 bin="" extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=${2:-}; shift 2 || usage ;;
    --out) out=${2:-}; shift 2 || usage ;;
    --gpus-per-node) per_node=${2:-}; shift 2 || usage ;;
    --bin) bin=${2:-}; shift 2 || usage ;;
    --sbatch) extra=${2:-}; shift 2 || usage ;;
    --) shift; break ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "slurm-sweep.sh: unknown option '$1'" >&2; usage ;;
  esac
done
[ -n "$out" ] && [ $# -gt 0 ] || usage
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-sweep.sh: --shards '$shards': expected a count of at least 1" >&2; exit 128; }
[[ "$per_node" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-sweep.sh: --gpus-per-node '$per_node': expected a count of at least 1" >&2; exit 128; }
if [ $((shards % per_node)) != 0 ]; then
  echo "slurm-sweep.sh: --shards $shards is not a multiple of --gpus-per-node $per_node (each node runs $per_node shards)" >&2
  exit 128
fi
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
if [ -z "$bin" ]; then
  if [ -x "$here/../build/degenbisect" ]; then bin=$(cd "$here/../build" && pwd)/degenbisect; else bin=$(command -v degenbisect || true); fi
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "slurm-sweep.sh: no degenbisect binary (build it, or pass --bin PATH)" >&2; exit 128; }
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
mkdir -p "$out/logs"

tasks=$((shards / per_node))
gpu_args=()
task_args=()
if [ "$per_node" -gt 1 ]; then
  gpu_args=(--exclusive "--gres=gpu:$per_node")
  task_args=(--shards-per-task "$per_node")
fi
# shellcheck disable=SC2086  # --sbatch's words are sbatch options
array=$(DEGEN_BIN=$bin DEGEN_SHARDS=$shards sbatch --parsable $extra --array="0-$((tasks - 1))" "${gpu_args[@]}" \
  --output="$out/logs/task-%A_%a.out" --export=ALL "$here/slurm/sweep.sbatch" "${task_args[@]}" "$out" -- "$@")
array=${array%%;*}
# shellcheck disable=SC2086
merge=$(DEGEN_BIN=$bin sbatch --parsable $extra --dependency="afterany:$array" --output="$out/logs/merge-%j.out" \
  --export=ALL "$here/slurm/merge.sbatch" "$out" "$shards")
merge=${merge%%;*}
printf 'array %s merge %s\n' "$array" "$merge" | tee "$out/slurm-jobs"
cat >&2 <<EOF
slurm-sweep.sh: $shards shards in $tasks task(s) of job $array; merge job $merge; logs in $out/logs
  watch:   squeue -j $array,$merge
           $bin report $out/shard-* -o $out/progress.md     # cells done so far, the others listed as missing
  requeue: scontrol requeue ${array}_K                        # a failed or cancelled task K continues where it stopped
  verdict: scontrol show job $merge | grep ExitCode           # 0 good, 1 bad, 125 untestable, 128 refused
EOF
