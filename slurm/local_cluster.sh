#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the project's Slurm tests (tests marked `slurm`).
#
#   bash slurm/local_cluster.sh start    # install (Debian packages, when missing), configure, start; wait for the node
#   bash slurm/local_cluster.sh status   # sinfo; exit 0 when the node takes jobs
#   bash slurm/local_cluster.sh stop     # cancel every job, stop slurmctld, slurmd and munged
#
# Needs root (apt-get, the daemons). The cluster: munge authentication, slurmctld + slurmd on this
# host, one node with this machine's CPUs and memory, one default partition `local`, no accounting
# database, no GPUs (ranks use gloo on the CPU), proctrack/linuxproc and task/none (no cgroups, so it
# also runs inside a container). Jobs run as the submitting user with the submitter's environment.
# State, spool and logs live under LIT_SLURM_DIR (default /var/lib/lit-retrieval-slurm); the config
# is written to /etc/slurm/slurm.conf, where sbatch/srun/squeue look for it. Each start is a clean one
# (`slurmctld -c`: no jobs survive a restart of the test cluster).
set -euo pipefail

STATE_DIR=${LIT_SLURM_DIR:-/var/lib/lit-retrieval-slurm}
CONF=/etc/slurm/slurm.conf
PARTITION=local

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && command -v munged >/dev/null; then
    return
  fi
  echo "local_cluster: installing slurmctld slurmd slurm-client munge (apt-get)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)  # leave 10 % to the system
  as_root mkdir -p /etc/slurm "$STATE_DIR/ctld" "$STATE_DIR/d" "$STATE_DIR/log"
  as_root tee "$CONF" >/dev/null <<EOF
# written by lit-retrieval slurm/local_cluster.sh: a one-node test cluster
ClusterName=lit-retrieval-test
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/d
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
# seconds between SIGTERM and SIGKILL at a time limit or scancel (Slurm's default)
KillWait=30
MinJobAge=600
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  if pgrep -x munged >/dev/null; then return; fi
  as_root mkdir -p /run/munge /var/log/munge /var/lib/munge
  if [ ! -s /etc/munge/munge.key ]; then as_root mungekey --create --force; fi
  as_root chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  as_root chmod 0700 /etc/munge && as_root chmod 0600 /etc/munge/munge.key
  as_root runuser -u munge -- munged
}

node_state() { sinfo -h -p "$PARTITION" -o %T 2>/dev/null | head -1; }

start() {
  install_packages
  write_config
  start_munge
  pkill -x slurmctld 2>/dev/null || true
  pkill -x slurmd 2>/dev/null || true
  sleep 1
  as_root slurmctld -c
  as_root slurmd
  for _ in $(seq 60); do
    case "$(node_state)" in
      idle* | mixed* | allocated*) echo "local_cluster: up, node $(hostname -s), $(nproc) CPUs, partition $PARTITION"; return 0 ;;
    esac
    sleep 1
  done
  echo "local_cluster: the node did not come up in 60 s; logs in $STATE_DIR/log" >&2
  tail -n 20 "$STATE_DIR/log/slurmctld.log" "$STATE_DIR/log/slurmd.log" >&2 || true
  return 1
}

stop() {
  if command -v scancel >/dev/null && pgrep -x slurmctld >/dev/null; then
    scancel --user "$(id -un)" 2>/dev/null || true
  fi
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
  echo "local_cluster: stopped"
}

status() {
  local state
  state=$(node_state)
  sinfo 2>/dev/null || true
  case "$state" in idle* | mixed* | allocated*) return 0 ;; *) return 1 ;; esac
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
