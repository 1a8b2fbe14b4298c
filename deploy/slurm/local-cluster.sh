#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for tests and for trying deploy/slurm/phub.sbatch:
# a private munged, slurmctld and slurmd (Debian's slurm-wlm and munge), every file under DIR,
# ports of their own, no cgroups and no systemd needed (../shared/tools/slurm-local says what
# it takes). Root only (slurmd runs tasks as their users).
#   deploy/slurm/local-cluster.sh start DIR   # then: export SLURM_CONF=DIR/slurm.conf
#   deploy/slurm/local-cluster.sh stop DIR
# `start` waits until the node is idle (30 s at most) and exits 77 with the reason if the
# daemons cannot start here (not root, packages missing), so tests can skip.
set -euo pipefail
action=${1:-}
dir=${2:-}
[[ ($action == start || $action == stop) && -n $dir ]] || {
  echo "usage: $0 start|stop DIR" >&2
  exit 2
}
dir=$(realpath -m "$dir")

stop() {
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [[ -s $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  # Their pid files go when they have exited; wait a little so a next start finds ports free.
  for _ in $(seq 50); do
    pgrep -f -- "-f $dir/slurm.conf" >/dev/null || break
    sleep 0.1
  done
}

if [[ $action == stop ]]; then
  stop
  exit 0
fi

skip() { echo "local-cluster: cannot start a Slurm cluster here: $*" >&2; exit 77; }
((EUID == 0)) || skip "not root (slurmd must be able to start tasks as their users)"
for tool in munged slurmctld slurmd sinfo srun sbatch scontrol; do
  command -v "$tool" >/dev/null || skip "$tool missing: bash deploy/install-deps.sh --test installs slurm-wlm and munge"
done
[[ -r /etc/munge/munge.key ]] || skip "/etc/munge/munge.key missing (Debian's munge package creates it)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkdir -p "$dir/state" "$dir/spool"
host=$(hostname -s)
cpus=$(nproc)
# munged insists its key is owned by its user and not readable by others: a private copy.
install -m 600 /etc/munge/munge.key "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" ||
  skip "munged did not start: $(tail -n 3 "$dir/munged.log" 2>/dev/null)"
cat >"$dir/slurm.conf" <<CONF
ClusterName=phublocal
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups here (no systemd delegation): track processes by /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=$host CPUs=$cpus State=UNKNOWN
# More tasks than CPUs (phubd and workers on 2 CPUs): oversubscribe.
PartitionName=phub Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" || { stop; skip "slurmctld did not start: $(tail -n 3 "$dir/slurmctld.log")"; }
slurmd -f "$SLURM_CONF" || { stop; skip "slurmd did not start: $(tail -n 3 "$dir/slurmd.log")"; }
for _ in $(seq 150); do
  if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
    echo "local-cluster: node $host idle; export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
stop
skip "the node did not become idle within 30 s: $(tail -n 3 "$dir/slurmctld.log")"
