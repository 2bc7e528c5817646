#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the project's Slurm tests (tests marked `slurm`).
#
#   bash tests/launch/local_cluster.sh start    # install (Debian packages, when missing), configure, start; wait for the node
#   bash tests/launch/local_cluster.sh status   # sinfo; exit 0 when the node takes jobs
#   bash tests/launch/local_cluster.sh stop     # cancel every job, stop slurmctld, slurmd and munged
#
#   bash tests/launch/local_cluster.sh start --nodes 2    # a second cluster beside it: 2 nodes, each in its own
#                                                  # network + UTS namespace ("Several nodes" below)
#   bash tests/launch/local_cluster.sh status --nodes 2   # its sinfo; exit 0 when every node takes jobs
#   bash tests/launch/local_cluster.sh stop --nodes 2     # cancel its jobs, stop its daemons, remove its namespaces
#   bash tests/launch/local_cluster.sh kill-node 2        # node 2 lost: SIGKILL to every process in its namespace
#   bash tests/launch/local_cluster.sh start-node 2       # node 2 back: its slurmd again
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
# written by lit-retrieval tests/launch/local_cluster.sh: a one-node test cluster
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

# The two clusters share munged and this host's process table: each one's start/stop leaves the other's
# daemons alone (those of the multi-node cluster run with `-f $MN_CONF`: they are told apart by that).
one_node_pids() {
  local pid
  for pid in $(pgrep -x "$1" || true); do
    if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$MN_CONF"; then echo "$pid"; fi
  done
}
kill_one_node() { one_node_pids "$1" | xargs -r kill 2>/dev/null || true; }

start() {
  install_packages
  write_config
  start_munge
  kill_one_node slurmctld
  kill_one_node slurmd
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
  if command -v scancel >/dev/null && [ -n "$(one_node_pids slurmctld)" ]; then
    scancel --user "$(id -un)" 2>/dev/null || true
  fi
  kill_one_node slurmd
  kill_one_node slurmctld
  if ! multi_ctld_pid >/dev/null; then pkill -x munged 2>/dev/null || true; fi  # the multi-node cluster uses it
  echo "local_cluster: stopped"
}

status() {
  local state
  state=$(node_state)
  sinfo 2>/dev/null || true
  case "$state" in idle* | mixed* | allocated*) return 0 ;; *) return 1 ;; esac
}

# ---------------------------------------------------------------------------------------------------------
# Several nodes (`--nodes N`, N >= 2): a second cluster on this machine whose nodes are namespaces.
#
# Each node is a network + UTS + mount namespace with its own hostname (lit-node1, lit-node2, ...) and its
# own address on a veth pair whose host end sits in a bridge the script creates: the host (slurmctld) holds
# 10.77.0.1/24 on the bridge, node i holds 10.77.0.(i+1)/24. These 10.x addresses exist only on that bridge
# and in those namespaces (start refuses when the subnet is already in use here); nothing is routed or
# forwarded, so no traffic leaves the bridge. In each node's mount namespace the cluster's hosts file is
# bind-mounted over /etc/hosts: the node names resolve to their bridge addresses there (Lightning takes
# MASTER_ADDR from the first name in SLURM_NODELIST; gloo binds the address its own hostname resolves to)
# while this host's /etc/hosts stays as it is. Filesystems are shared: munge's socket, the venv, the jobs'
# folders; only the network and the hostname differ between the nodes.
#
# slurmctld runs on the host on its own port (6827; the one-node cluster keeps 6817) with its own config,
# state and logs under LIT_SLURM_MULTI_DIR (default /var/lib/lit-retrieval-slurm-nodes). Slurm clients read it
# through SLURM_CONF=$MN_CONF (sbatch exports it to the jobs, whose srun and `scontrol requeue` then talk to
# this cluster); slurmctld and slurmd take `-f`. One partition `multi`, the default, with LLN=YES (least loaded
# node first: an array's tasks spread over the nodes). Each node declares MN_CPUS (default 4) CPUs with
# SlurmdParameters=config_overrides: the nodes share this machine's cores, and 4 lets a one-node 4-rank run
# compare with a 2 x 2 one. SlurmdTimeout=15: a lost node is DOWN within about 15 s, and is back
# (ReturnToService=2) as soon as its slurmd registers again.
MN_DIR=${LIT_SLURM_MULTI_DIR:-/var/lib/lit-retrieval-slurm-nodes}
MN_CONF=$MN_DIR/slurm.conf
MN_PARTITION=multi
MN_NET=10.77.0
MN_BRIDGE=litbr0
MN_CTLD_PORT=6827
MN_CPUS=${MN_CPUS:-4}

mn_node() { echo "lit-node$1"; } # node i's name, hostname and network namespace
mn_addr() { echo "$MN_NET.$(($1 + 1))"; }
mn_count() { sed -n 's/^# nodes: //p' "$MN_CONF" 2>/dev/null | grep . || echo 0; }
mn() { SLURM_CONF=$MN_CONF "$@"; }

multi_ctld_pid() {
  local pid
  pid=$(cat "$MN_DIR/slurmctld.pid" 2>/dev/null) || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$MN_CONF" || return 1
  echo "$pid"
}

mn_write_config() {
  local nodes=$1 host mem_mb i
  host=$(hostname -s)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo) # each node: this machine's memory
  as_root mkdir -p "$MN_DIR/ctld" "$MN_DIR/log"
  {
    echo "# written by lit-retrieval tests/launch/local_cluster.sh start --nodes $nodes: a multi-node test cluster"
    echo "# nodes: $nodes"
    echo "ClusterName=lit-retrieval-nodes"
    echo "SlurmctldHost=$host($MN_NET.1)"
    echo "SlurmctldPort=$MN_CTLD_PORT"
    echo "SlurmdPort=6818"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "MpiDefault=none"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SchedulerType=sched/backfill"
    echo "SlurmdParameters=config_overrides"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "JobCompType=jobcomp/none"
    echo "ReturnToService=2"
    echo "StateSaveLocation=$MN_DIR/ctld"
    echo "SlurmdSpoolDir=$MN_DIR/spool-%n"
    echo "SlurmctldPidFile=$MN_DIR/slurmctld.pid"
    echo "SlurmdPidFile=$MN_DIR/slurmd-%n.pid"
    echo "SlurmctldLogFile=$MN_DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$MN_DIR/log/slurmd-%n.log"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=15"
    echo "KillWait=30"
    echo "MinJobAge=600"
    for i in $(seq "$nodes"); do
      echo "NodeName=$(mn_node "$i") NodeAddr=$(mn_addr "$i") NodeHostname=$(mn_node "$i") CPUs=$MN_CPUS" \
        "RealMemory=$mem_mb State=UNKNOWN"
    done
    echo "PartitionName=$MN_PARTITION Nodes=lit-node[1-$nodes] Default=YES MaxTime=INFINITE State=UP LLN=YES"
  } | as_root tee "$MN_CONF" >/dev/null
  {
    echo "127.0.0.1 localhost"
    echo "$MN_NET.1 $host"
    for i in $(seq "$nodes"); do echo "$(mn_addr "$i") $(mn_node "$i")"; done
  } | as_root tee "$MN_DIR/hosts" >/dev/null
}

mn_network() {
  local nodes=$1 i ns
  if ip -4 -o addr show | grep -qF " $MN_NET." || [ -n "$(ip -4 route show "$MN_NET.0/24")" ]; then
    echo "local_cluster: $MN_NET.0/24 is already in use on this machine; not creating the nodes' bridge" >&2
    return 1
  fi
  as_root ip link add "$MN_BRIDGE" type bridge
  as_root ip addr add "$MN_NET.1/24" dev "$MN_BRIDGE"
  as_root ip link set "$MN_BRIDGE" up
  for i in $(seq "$nodes"); do
    ns=$(mn_node "$i")
    as_root ip netns add "$ns"
    as_root ip link add "litv$i" type veth peer name eth0 netns "$ns"
    as_root ip link set "litv$i" master "$MN_BRIDGE" up
    as_root ip -n "$ns" addr add "$(mn_addr "$i")/24" dev eth0
    as_root ip -n "$ns" link set eth0 up
    as_root ip -n "$ns" link set lo up
  done
}

# slurmd of node i in its namespaces: the network one made above, a new UTS one (its hostname) and a new mount
# one (the cluster's hosts file over /etc/hosts); the steps it starts, and the jobs' processes, inherit them.
# nsenter, not `ip netns exec`: that one remounts /sys for the namespace, which hides the cgroup mounts
# under /sys/fs/cgroup, and Debian's slurmd 22.05 refuses to start without them.
mn_start_node() {
  local ns
  ns=$(mn_node "$1")
  as_root mkdir -p "$MN_DIR/spool-$ns"
  if ! as_root nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
    sh -c "hostname $ns && mount --bind $MN_DIR/hosts /etc/hosts && exec slurmd -f $MN_CONF -N $ns"; then
    echo "local_cluster: slurmd of $ns did not start" >&2
    tail -n 20 "$MN_DIR/log/slurmd-$ns.log" >&2 || true
    return 1
  fi
}

mn_idle_nodes() { mn sinfo -h -N -p "$MN_PARTITION" -o %T 2>/dev/null | grep -cE '^(idle|mixed|allocated)' || true; }

mn_wait_up() {
  local nodes=$1
  for _ in $(seq 60); do
    if [ "$(mn_idle_nodes)" -ge "$nodes" ]; then return 0; fi
    sleep 1
  done
  echo "local_cluster: the $nodes nodes did not come up in 60 s; logs in $MN_DIR/log" >&2
  tail -n 20 "$MN_DIR"/log/*.log >&2 || true
  return 1
}

start_multi() {
  local nodes=$1 i
  if [ "$nodes" -lt 2 ] || [ "$nodes" -gt 9 ]; then echo "local_cluster: --nodes takes 2 to 9" >&2; return 2; fi
  install_packages
  stop_multi >/dev/null 2>&1 || true # a clean start: no jobs, daemons or namespaces of an earlier one
  mn_write_config "$nodes"
  mn_network "$nodes"
  start_munge
  as_root slurmctld -f "$MN_CONF" -c
  for i in $(seq "$nodes"); do mn_start_node "$i"; done
  mn_wait_up "$nodes"
  echo "local_cluster: up, $nodes nodes lit-node[1-$nodes] ($MN_NET.2-$(mn_addr "$nodes")), $MN_CPUS CPUs each," \
    "partition $MN_PARTITION; clients: export SLURM_CONF=$MN_CONF"
}

# node i lost at once, as at a power failure: SIGKILL to every process in its network namespace (slurmd, the
# steps' slurmstepd, the job's ranks); its network stays, so `start-node` can bring it back
kill_node() {
  local ns
  ns=$(mn_node "$1")
  as_root ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
  echo "local_cluster: $ns lost (its processes killed)"
}

start_node() {
  local ns
  ns=$(mn_node "$1")
  if [ -n "$(as_root ip netns pids "$ns")" ]; then
    echo "local_cluster: $ns has processes running; kill-node it first" >&2
    return 1
  fi
  mn_start_node "$1"
  for _ in $(seq 60); do
    case "$(mn sinfo -h -n "$ns" -o %T 2>/dev/null)" in
      idle* | mixed* | allocated*) echo "local_cluster: $ns back"; return 0 ;;
    esac
    sleep 1
  done
  echo "local_cluster: $ns did not come back in 60 s" >&2
  return 1
}

stop_multi() {
  local i ns pid nodes
  nodes=$(mn_count)
  if pid=$(multi_ctld_pid); then
    mn scancel --user "$(id -un)" 2>/dev/null || true
    as_root kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done # its port free for a next start
  fi
  for i in $(seq "$nodes"); do
    ns=$(mn_node "$i")
    if ip netns list | grep -qw "$ns"; then
      as_root ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
      as_root ip netns del "$ns"
    fi
  done
  if ip link show "$MN_BRIDGE" >/dev/null 2>&1; then as_root ip link del "$MN_BRIDGE"; fi
  if [ -z "$(one_node_pids slurmctld)" ]; then # the one-node cluster uses it
    pkill -x munged 2>/dev/null || true
    for _ in $(seq 50); do pgrep -x munged >/dev/null || break; sleep 0.1; done # a next start starts a new one
  fi
  echo "local_cluster: the $nodes-node cluster stopped"
}

status_multi() {
  local nodes
  nodes=$(mn_count)
  mn sinfo -N 2>/dev/null || true
  [ "$nodes" -ge 2 ] && [ "$(mn_idle_nodes)" -ge "$nodes" ]
}

command=${1:-}
nodes=1
if [ "${2:-}" = --nodes ]; then nodes=${3:?--nodes needs a count}; fi
case "$command:$nodes" in
  start:1) start ;;
  stop:1) stop ;;
  status:1) status ;;
  start:*) start_multi "$nodes" ;;
  stop:*) stop_multi ;;
  status:*) status_multi ;;
  kill-node:*) kill_node "${2:?kill-node needs a node number}" ;;
  start-node:*) start_node "${2:?start-node needs a node number}" ;;
  *) echo "usage: $0 start|stop|status [--nodes N] | kill-node I | start-node I" >&2; exit 2 ;;
esac
