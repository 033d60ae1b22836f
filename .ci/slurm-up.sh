#!/usr/bin/env bash
# Start a real single-node Slurm (Debian's slurm-wlm) for the Slurm-profile tests.
# Idempotent; prints `slurm up` when `srun` works. Needs root (CI and the build machines are root).
set -euo pipefail
if ! command -v slurmctld >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq slurm-wlm munge >/dev/null
fi
host=$(hostname -s)
mem=$(( $(free -m | awk '/Mem:/ {print $2}') * 8 / 10 ))
mkdir -p /etc/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/slurm
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x -r S,R,D munged >/dev/null || runuser -u munge -- /usr/sbin/munged --force
# two placeholder GPUs for the GRES of GPU rules (this machine has none): char devices like
# /dev/null where mknod is allowed, plain files otherwise (no cgroup confines devices here)
for i in 0 1; do
  [ -e /dev/wattlife-gpu$i ] || mknod /dev/wattlife-gpu$i c 1 3 2>/dev/null || touch /dev/wattlife-gpu$i
done
cat > /etc/slurm/gres.conf <<CONF
NodeName=${host} Name=gpu File=/dev/wattlife-gpu[0-1]
CONF
old=$(cat /etc/slurm/slurm.conf 2>/dev/null || true)
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=wattlife
SlurmctldHost=${host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
TaskPluginParam=Cores
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
MinJobAge=3600
ReturnToService=2
NodeName=${host} CPUs=$(nproc) RealMemory=${mem} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
rm -f /etc/slurm/cgroup.conf  # 22.05 has no 'disabled'; linuxproc + task/affinity need no cgroups
# task/affinity binds every task to the CPUs its step was given (as GPU clusters do): a step of one
# CPU inside a whole-node job shows up as one CPU in sched_getaffinity. A changed slurm.conf (an
# older copy of this script ran): stop the daemons through the controller, then start them again.
if [ -n "$old" ] && [ "$old" != "$(cat /etc/slurm/slurm.conf)" ] && timeout 5 scontrol ping 2>/dev/null | grep -q UP; then
  scontrol shutdown >/dev/null 2>&1 || true
  for _ in $(seq 20); do timeout 5 scontrol ping 2>/dev/null | grep -q UP || break; sleep 1; done
  sleep 2
fi
# (a daemon's first fork can linger as a zombie of the same name: ask the daemons, not pgrep)
timeout 5 scontrol ping 2>/dev/null | grep -q UP || slurmctld
pgrep -x -r S,R,D slurmd >/dev/null || slurmd
for _ in $(seq 20); do
  if timeout 5 srun -N1 -n1 true 2>/dev/null; then echo "slurm up"; exit 0; fi
  sleep 1
  scontrol update nodename="${host}" state=resume 2>/dev/null || true
done
echo "slurm did not come up" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
