#!/bin/bash
# Slurm Epilog for real power caps (site admins; see prolog.sh, which names the one site file both
# read): puts back the GPU power limits the prolog saved for this job on this node, and removes the
# record. Slurm runs it after every job, whatever its end (completed, failed, cancelled, time limit,
# or at the node's return after it was lost). A failed restore exits non-zero, so Slurm drains the
# node instead of giving it, capped, to the next user.
set -uo pipefail
PATH=/usr/sbin:/usr/bin:/sbin:/bin
site=${WATTLIFE_SITE_ENV:-/etc/wattlife/slurm.env}  # (Slurm never sets it: for tests)
# shellcheck disable=SC1090
[ -r "$site" ] && { set -a; . "$site"; set +a; }
dir=${WATTLIFE_POWERCAP_DIR:-/var/lib/wattlife/powercap}
log=${WATTLIFE_POWERCAP_LOG:-$dir/hooks.log}
node=${SLURMD_NODENAME:-$(hostname -s)}
job=${SLURM_JOB_ID:-none}
say() { printf '%s epilog job=%s node=%s %s\n' "$(date -u +%FT%TZ)" "$job" "$node" "$*" >>"$log"; }
mkdir -p "$(dirname "$log")" || exit 1
[ "$job" != none ] || { say "rc=1 no SLURM_JOB_ID (run by Slurm as its Epilog?)"; exit 1; }
cmd=${WATTLIFE:-}
if [ -z "$cmd" ] || [ ! -x "$cmd" ]; then
  say "rc=127 WATTLIFE='$cmd' is not an executable; set it (absolute path) in $site"; exit 127
fi
state="$dir/job-$job-$node.json"
out=$("$cmd" powercap restore --missing-ok --state "$state" 2>&1)
rc=$?
say "rc=$rc state=$state: ${out//$'\n'/ }"
exit $rc
