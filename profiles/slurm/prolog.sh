#!/bin/bash
# Slurm Prolog for real power caps (site admins; runs as root on every node of a job before it
# starts): remembers this node's GPU power limits under the job's id, in a root-owned folder that
# no user path names. profiles/slurm/epilog.sh puts them back when the job ends, however it ends
# (completed, failed, cancelled, killed at its time limit, node lost and requeued).
# Slurm runs it with no PATH and none of the user's environment: everything it needs comes from
# the one site file /etc/wattlife/slurm.env (shell assignments; README "On Slurm", admins):
#   WATTLIFE=/opt/wattlife/.venv/bin/wattlife   (absolute: the suite's command; required)
#   WATTLIFE_POWERCAP_BACKEND=nvml              (simulated: no hardware, for tests)
#   WATTLIFE_POWERCAP_DIR=/var/lib/wattlife/powercap  WATTLIFE_POWERCAP_LOG=<file, one line a job>
# slurm.conf:  Prolog=/opt/wattlife/prolog.sh  Epilog=/opt/wattlife/epilog.sh  (docs/USAGE.md)
#              PrologFlags=Alloc   (on every node of a job at its start, not at its first step)
# A failure exits non-zero: Slurm drains the node, with the reason in the log line.
set -uo pipefail
PATH=/usr/sbin:/usr/bin:/sbin:/bin
site=${WATTLIFE_SITE_ENV:-/etc/wattlife/slurm.env}  # (Slurm never sets it: for tests)
# shellcheck disable=SC1090
[ -r "$site" ] && { set -a; . "$site"; set +a; }
dir=${WATTLIFE_POWERCAP_DIR:-/var/lib/wattlife/powercap}
log=${WATTLIFE_POWERCAP_LOG:-$dir/hooks.log}
node=${SLURMD_NODENAME:-$(hostname -s)}
job=${SLURM_JOB_ID:-none}
say() { printf '%s prolog job=%s node=%s %s\n' "$(date -u +%FT%TZ)" "$job" "$node" "$*" >>"$log"; }
mkdir -p "$dir" "$(dirname "$log")" && chmod 700 "$dir" || exit 1
[ "$job" != none ] || { say "rc=1 no SLURM_JOB_ID (run by Slurm as its Prolog?)"; exit 1; }
cmd=${WATTLIFE:-}
if [ -z "$cmd" ] || [ ! -x "$cmd" ]; then
  say "rc=127 WATTLIFE='$cmd' is not an executable; set it (absolute path) in $site"; exit 127
fi
# the state is per node (several slurmd may share a host and this folder)
state="$dir/job-$job-$node.json"
out=$("$cmd" powercap save --backend "${WATTLIFE_POWERCAP_BACKEND:-nvml}" --state "$state" 2>&1)
rc=$?
say "rc=$rc backend=${WATTLIFE_POWERCAP_BACKEND:-nvml} state=$state: ${out//$'\n'/ }"
exit $rc
