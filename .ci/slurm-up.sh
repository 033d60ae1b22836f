#!/usr/bin/env bash
# Start a real Slurm (Debian's slurm-wlm) for the Slurm-profile tests: three slurmd on this one host
# (`slurmd -N <node>`, each its own NodeName, port, spool and log), in one partition `debug` that
# mixes node sizes (wl1, wl2: 2 CPUs; wl3: 1 CPU and half the memory), wl2 with MemSpecLimit, and
# the suite's own Prolog=/Epilog= (profiles/slurm, simulated power-cap backend, PrologFlags=Alloc)
# reading the site file /etc/wattlife/slurm.env this script writes.
# Accounting storage: a MariaDB server of its own (datadir under /var/lib/wattlife-slurmdb, TCP on
# 127.0.0.1:17306 and a socket there) and slurmdbd (127.0.0.1:17819), so `sacct` has ended jobs
# and their ConsumedEnergy. If either cannot start, the cluster comes up without storage
# (accounting_storage/none) and /run/wattlife-slurmdb/failed says why (the ended-job test skips
# with it).
# Idempotent; prints `slurm up` when `srun` works on every node. Needs root (CI and the build
# machines are root). WATTLIFE=<command> names the suite's `wattlife` for the prolog / epilog
# (default: this checkout's .venv/bin/wattlife, which `make install` creates).
# `bash .ci/slurm-up.sh stop` stops what this script started: slurmctld and the slurmd, the
# pm_counters emulators, slurmdbd and MariaDB (each by its pid file).
#
# What this host really backs: its CPUs (2 on CI) are declared by each node, so the nodes'
# declared CPUs (2 + 2 + 1) oversubscribe the host's cores: every node's tasks bind (task/affinity)
# to CPU ids the host has (0-1), shared with the other nodes. Jobs never measure energy here (no
# GPU, CPU estimated), so this only costs time; tests run one job at a time where they time nothing.
# Declared memory: 80 % of the host's, split 2:2:1 (no cgroup enforces it; the scheduler counts it).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
db=/var/lib/wattlife-slurmdb     # MariaDB's datadir, the DB password (mode 600)
dbrun=/run/wattlife-slurmdb      # its socket and pid file; `failed`: why there is no storage
dbport=17306
dbdport=17819
stop_pid() {  # end the process of pid file $1 (TERM, then KILL after 20 s)
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}
if [ "${1:-}" = stop ]; then
  timeout 20 scontrol shutdown >/dev/null 2>&1 || true
  for f in /run/slurmd-wl*.pid /run/slurmctld.pid /run/wattlife-pm/*.pid /run/slurmdbd.pid \
           "$dbrun/mariadb.pid"; do
    [ -e "$f" ] && stop_pid "$f"
  done
  echo "slurm stopped"
  exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null \
    || ! command -v mariadbd >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq slurm-wlm munge >/dev/null
  # Debian's slurmdbd matches slurm-wlm (22.05); a failed install leaves the cluster without storage
  apt-get install -y -qq mariadb-server slurmdbd >/dev/null 2>&1 || true
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(free -m | awk '/Mem:/ {print $2}') * 8 / 10 / 5 ))  # one fifth of 80 %
nodes=(wl1 wl2 wl3)
mkdir -p /etc/munge /var/spool/slurmctld /var/log/slurm /run/munge /etc/slurm /etc/wattlife
for n in "${nodes[@]}"; do mkdir -p "/var/spool/slurmd/$n"; done
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x -r S,R,D munged >/dev/null || runuser -u munge -- /usr/sbin/munged --force
# placeholder GPUs for the GRES of GPU rules (this machine has none): char devices like /dev/null
# where mknod is allowed, plain files otherwise (no cgroup confines devices here)
for i in 0 1; do
  [ -e /dev/wattlife-gpu$i ] || mknod /dev/wattlife-gpu$i c 1 3 2>/dev/null || touch /dev/wattlife-gpu$i
done
cat > /etc/slurm/gres.conf <<CONF
NodeName=wl[1-2] Name=gpu File=/dev/wattlife-gpu[0-1]
NodeName=wl3 Name=gpu File=/dev/wattlife-gpu0
CONF
# the site file the shipped prolog / epilog read (no PATH, no user environment in a prolog):
# the suite's command, its source (this checkout) and the simulated power-cap backend
cat > /etc/wattlife/slurm.env <<CONF
WATTLIFE=${WATTLIFE:-$repo/.venv/bin/wattlife}
PYTHONPATH=$repo/src
WATTLIFE_POWERCAP_BACKEND=simulated
WATTLIFE_POWERCAP_DIR=/var/lib/wattlife/powercap
WATTLIFE_POWERCAP_LOG=/var/log/slurm/wattlife-powercap.log
CONF
# Accounting storage: MariaDB (its own datadir, loopback and a socket; not Debian's service) and
# slurmdbd (SlurmUser root, as slurm.conf's), each started once and waited for
dbsql() { mariadb --no-defaults --socket="$dbrun/mysqld.sock" -uroot "$@"; }
start_db() {
  mkdir -p "$db" "$dbrun" && chown mysql:mysql "$db" "$dbrun" && chmod 700 "$db"
  if [ ! -d "$db/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$db/data" --skip-test-db \
      --auth-root-authentication-method=socket >/var/log/slurm/mariadb-install.log 2>&1 \
      || { echo "mariadb-install-db failed (/var/log/slurm/mariadb-install.log)"; return 1; }
  fi
  if ! dbsql -e 'select 1' >/dev/null 2>&1; then
    nohup setsid mariadbd --no-defaults --user=mysql --datadir="$db/data" --port=$dbport \
      --bind-address=127.0.0.1 --socket="$dbrun/mysqld.sock" --pid-file="$dbrun/mariadb.pid" \
      --log-error=/var/log/slurm/mariadb.log </dev/null >/dev/null 2>&1 &
    for _ in $(seq 150); do dbsql -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
    dbsql -e 'select 1' >/dev/null 2>&1 || { echo "MariaDB did not start (/var/log/slurm/mariadb.log)"; return 1; }
  fi
  [ -s "$db/password" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$db/password")
  local pw
  pw=$(cat "$db/password")
  dbsql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pw';
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
    || { echo "MariaDB: the slurm user could not be created"; return 1; }
  (umask 077; cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbdport
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=$pw
StorageLoc=slurm_acct_db
CONF
)
  chown root:root /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf
  pid=$(cat /run/slurmdbd.pid 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then slurmdbd; fi
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$dbdport) 2>/dev/null && return 0; sleep 0.2; done
  echo "slurmdbd did not start (/var/log/slurm/slurmdbd.log)"
  return 1
}
rm -f "$dbrun/failed"
acct=accounting_storage/none
if command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; then
  if why=$(start_db 2>&1); then acct=accounting_storage/slurmdbd; fi
else
  why="slurmdbd or mariadb-server is not installed (apt-get install mariadb-server slurmdbd)"
fi
if [ "$acct" = accounting_storage/none ]; then
  mkdir -p "$dbrun" && echo "$why" > "$dbrun/failed"
  echo "warning: no accounting storage: $why; the cluster comes up without it" >&2
fi
small=$(( cpus > 1 ? cpus / 2 : 1 ))
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
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1,energy=1
AcctGatherEnergyType=acct_gather_energy/pm_counters
AcctGatherNodeFreq=1
AccountingStorageType=${acct}
AccountingStorageHost=localhost
AccountingStoragePort=${dbdport}
GresTypes=gpu
MinJobAge=3600
ReturnToService=2
KillWait=2
Prolog=${repo}/profiles/slurm/prolog.sh
Epilog=${repo}/profiles/slurm/epilog.sh
PrologFlags=Alloc
NodeName=wl1 NodeHostname=${host} NodeAddr=127.0.0.1 Port=17001 CPUs=${cpus} RealMemory=$((mem * 2)) Gres=gpu:2 State=UNKNOWN
NodeName=wl2 NodeHostname=${host} NodeAddr=127.0.0.1 Port=17002 CPUs=${cpus} RealMemory=$((mem * 2)) MemSpecLimit=$((mem / 2)) Gres=gpu:2 State=UNKNOWN
NodeName=wl3 NodeHostname=${host} NodeAddr=127.0.0.1 Port=17003 CPUs=${small} RealMemory=${mem} Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=wl[1-3] Default=YES MaxTime=INFINITE State=UP
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
# Node energy for Slurm's acct_gather_energy/pm_counters (sstat's ConsumedEnergy): this host has no
# /sys/cray/pm_counters (nor RAPL or a BMC), so each node's tree is written by an emulator
# (tests/node_emulators.py: a known power schedule, 150 / 350 W alternating each second) into
# /run/wattlife-pm/<node>/, and each slurmd runs in a mount namespace of its own where that folder
# is /sys/cray/pm_counters (a tmpfs over /sys with the host's /sys entries bound back in). The
# energy Slurm accounts here is the emulator's, never this host's.
pm_emulator() {
  local n=$1 dir=/run/wattlife-pm/$1 py
  py=$(dirname "${WATTLIFE:-$repo/.venv/bin/wattlife}")/python
  [ -x "$py" ] || py=python3
  pid=$(cat "$dir.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return; fi
  mkdir -p "$dir"
  PYTHONPATH="$repo/src" nohup "$py" "$repo/tests/node_emulators.py" pm_counters "$dir" \
    "$(PYTHONPATH="$repo/src" "$py" -c 'from wattlife.contracts.clock import now_ns; print(now_ns())')" \
    >/var/log/slurm/pm-emulator-$n.log 2>&1 &
  echo $! > "$dir.pid"
  for _ in $(seq 50); do [ -s "$dir/energy" ] && break; sleep 0.1; done
}
start_slurmd() {
  local n=$1
  pm_emulator "$n"
  mkdir -p /run/wattlife-hostsys
  unshare -m --propagation private sh -ec "
    mount --rbind /sys /run/wattlife-hostsys
    mount -t tmpfs -o mode=755 wattlife-sys /sys
    for e in /run/wattlife-hostsys/*; do b=\${e##*/}; mkdir -p /sys/\$b; mount --rbind \$e /sys/\$b; done
    mkdir -p /sys/cray/pm_counters
    mount --bind /run/wattlife-pm/$n /sys/cray/pm_counters
    exec slurmd -N $n"
}
# the cluster registered with slurmdbd (its root account and user come with it); refused: no storage
if [ "$acct" = accounting_storage/slurmdbd ] \
    && ! timeout 30 sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx wattlife \
    && ! why=$(timeout 30 sacctmgr -i add cluster wattlife 2>&1); then
  echo "sacctmgr add cluster: $why" > "$dbrun/failed"
  echo "warning: no accounting storage: sacctmgr add cluster: $why" >&2
  sed -i 's|^AccountingStorageType=.*|AccountingStorageType=accounting_storage/none|' /etc/slurm/slurm.conf
fi
# (a daemon's first fork can linger as a zombie of the same name: ask the daemons, not pgrep)
timeout 5 scontrol ping 2>/dev/null | grep -q UP || slurmctld
for n in "${nodes[@]}"; do
  pid=$(cat "/run/slurmd-$n.pid" 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then start_slurmd "$n"; fi
done
for _ in $(seq 30); do
  ok=1
  for n in "${nodes[@]}"; do timeout 10 srun -w "$n" -N1 -n1 true 2>/dev/null || { ok=0; break; }; done
  if [ $ok = 1 ]; then echo "slurm up"; exit 0; fi
  sleep 1
  scontrol update nodename="wl[1-3]" state=resume 2>/dev/null || true
done
echo "slurm did not come up" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd-wl*.log /var/log/slurm/wattlife-powercap.log >&2 || true
exit 1
