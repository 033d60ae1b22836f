#!/bin/bash
# Slurm Prolog for real power caps (site admins; runs as root on every node of a job before it
# starts): remembers this node's GPU power limits under the job's id, in a root-owned folder that
# no user path names. profiles/slurm/epilog.sh puts them back when the job ends, however it ends
# (completed, failed, cancelled, killed at its time limit, node lost and requeued).
# slurm.conf:  Prolog=/opt/wattlife/profiles/slurm/prolog.sh  Epilog=/opt/wattlife/profiles/slurm/epilog.sh
# Set WATTLIFE in the scripts' environment (or edit here) to the wattlife command of the suite's
# environment; WATTLIFE_POWERCAP_DIR (default /var/lib/wattlife/powercap) and
# WATTLIFE_POWERCAP_BACKEND (default nvml; simulated for tests).
set -euo pipefail
dir=${WATTLIFE_POWERCAP_DIR:-/var/lib/wattlife/powercap}
mkdir -p "$dir" && chmod 700 "$dir"
exec "${WATTLIFE:-wattlife}" powercap save --backend "${WATTLIFE_POWERCAP_BACKEND:-nvml}" \
     --state "$dir/job-${SLURM_JOB_ID:?Slurm sets SLURM_JOB_ID in a prolog}.json"
