# A throw-away single-node Slurm cluster in a folder, for tests (sourced; tests/cli/slurm_sweep.sh).
# Debian 12's packages (scripts/install-deps.sh --slurm): munged, slurmctld and slurmd started by us,
# as whoever runs the test (root in CI), with every file in the folder: the munge key and socket,
# slurm.conf, the controller's state, the node's spool, logs and PID files. No systemd, no cgroups
# (proctrack/linuxproc, task/none), no slurmdbd (so no sacct: exit codes come from `scontrol show
# job`, kept MinJobAge seconds, and from jobcomp/filetxt). The node declares 4 CPUs whatever the
# machine has (config_overrides) and 4 stand-in GPUs (empty files as their devices), so that
# --gres=gpu:1 jobs run as they would on a GPU node.
#
#   cluster_start DIR    exports SLURM_CONF; returns 1 with the reason in $CLUSTER_WHY (callers skip)
#   cluster_stop         kills the daemons it started (by PID), safe to call twice; use it in a trap
#   cluster_logs         the tails of the daemons' logs (for a failure message)

CLUSTER_DIR=""
CLUSTER_PIDS=()
CLUSTER_WHY=""

_cluster_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_cluster_why() {
  CLUSTER_WHY="$*"
  return 1
}

cluster_start() {
  local dir=$1 cmd
  for cmd in munged mungekey slurmctld slurmd sbatch scontrol squeue scancel python3; do
    command -v "$cmd" >/dev/null 2>&1 ||
      { _cluster_why "$cmd not found (install Debian's Slurm and munge: scripts/install-deps.sh --slurm)"; return 1; }
  done
  CLUSTER_DIR=$(mkdir -p "$dir" && cd "$dir" && pwd)
  local d=$CLUSTER_DIR host user
  host=$(hostname -s)
  user=$(id -un)
  mkdir -p "$d/munge" "$d/state" "$d/spool/slurmd-$host" "$d/log" "$d/run"
  chmod 700 "$d/munge"

  # munge: a key of our own and a socket in the folder (the system's munged, if any, is not touched).
  mungekey --create --keyfile="$d/munge/munge.key" --force >/dev/null 2>&1 ||
    { _cluster_why "mungekey could not create a key in $d/munge"; return 1; }
  chmod 400 "$d/munge/munge.key"
  munged --foreground --force --key-file="$d/munge/munge.key" --socket="$d/munge/munge.socket" \
    --pid-file="$d/run/munged.pid" --log-file="$d/log/munged.log" --seed-file="$d/munge/munged.seed" \
    >"$d/log/munged.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  local i
  for i in $(seq 50); do [ -S "$d/munge/munge.socket" ] && break; sleep 0.1; done
  [ -S "$d/munge/munge.socket" ] || { _cluster_why "munged did not start: $(tail -n 3 "$d/log/munged.out" "$d/log/munged.log" 2>/dev/null | tr '\n' ' ')"; return 1; }

  local ctld_port slurmd_port
  ctld_port=$(_cluster_free_port)
  slurmd_port=$(_cluster_free_port)
  [ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$(_cluster_free_port)
  cat >"$d/slurm.conf" <<EOF
# Written by tests/slurm/cluster.bash for a test; removed with its folder.
ClusterName=degentest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket,cred_expire=10
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/slurmd-%n
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$d/log/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
ReturnToService=2
JobRequeue=1
MinJobAge=3600
KillWait=2
InactiveLimit=0
SlurmdParameters=config_overrides
GresTypes=gpu
PlugStackConfig=$d/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 Gres=gpu:4 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  # Slurm drops a GPU without a device file: four stand-in files (never opened by the jobs, which run
  # on the CPU), so that Slurm allocates them and sets CUDA_VISIBLE_DEVICES as on a GPU node.
  mkdir -p "$d/dev"
  for i in 0 1 2 3; do : >"$d/dev/nvidia$i"; done
  echo "Name=gpu File=$d/dev/nvidia[0-3]" >"$d/gres.conf"
  : >"$d/plugstack.conf"
  : >"$d/cgroup.conf"
  # Only this cluster: no setting of an outer Slurm (a CI job run under Slurm) reaches our commands.
  local v
  for v in $(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|SQUEUE|SCONTROL)_' || true); do unset "$v"; done
  export SLURM_CONF=$d/slurm.conf

  slurmctld -D -i -f "$d/slurm.conf" >"$d/log/slurmctld.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  slurmd -D -N "$host" -f "$d/slurm.conf" >"$d/log/slurmd.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  # Ready when the node is idle (slurmd registered with the controller).
  local state=""
  for i in $(seq 100); do
    state=$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)
    [ "$state" = idle ] && return 0
    sleep 0.2
  done
  _cluster_why "the node did not come up (state '${state:-none}' after 20 s): $(cluster_logs | tail -n 6 | tr '\n' ' ')"
  return 1
}

cluster_logs() {
  [ -n "$CLUSTER_DIR" ] || return 0
  local f
  for f in "$CLUSTER_DIR"/log/slurmctld.log "$CLUSTER_DIR"/log/slurmd.log "$CLUSTER_DIR"/log/slurmctld.out \
           "$CLUSTER_DIR"/log/slurmd.out "$CLUSTER_DIR"/log/munged.log; do
    [ -s "$f" ] && { echo "== $f"; tail -n 15 "$f"; }
  done
  return 0
}

cluster_stop() {
  local pid
  # The jobs first: their slurmstepd processes outlive slurmd, so they are cancelled and waited for.
  if [ ${#CLUSTER_PIDS[@]} -ge 3 ]; then
    timeout 10 scancel --full -u "$(id -un)" >/dev/null 2>&1 || true
    for _ in $(seq 50); do
      [ -z "$(timeout 5 squeue -h -t pending,running,suspended,completing -o %i 2>/dev/null | head -n 1)" ] && break
      sleep 0.2
    done
  fi
  # The daemons first (slurmd kills its jobs' steps), munged last; then whatever of ours is left.
  for pid in "${CLUSTER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${CLUSTER_PIDS[@]}"; do
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
}
