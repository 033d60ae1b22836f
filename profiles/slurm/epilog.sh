#!/bin/bash
# Slurm Epilog for real power caps (site admins; see prolog.sh): puts back the GPU power limits
# the prolog saved for this job, and removes the record. A failed restore exits non-zero, so
# Slurm drains the node instead of giving it, capped, to the next user.
set -euo pipefail
dir=${WATTLIFE_POWERCAP_DIR:-/var/lib/wattlife/powercap}
exec "${WATTLIFE:-wattlife}" powercap restore --missing-ok \
     --state "$dir/job-${SLURM_JOB_ID:?Slurm sets SLURM_JOB_ID in an epilog}.json"
