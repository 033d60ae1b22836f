#!/usr/bin/env bash
# One device call of any benchmark (issue 46), from the repository root with .whl/ carried
# (bash benchmarks/device_wheels.sh):
#   [DEADLINE=570] [TESTS="tests/a.py ..."] [KEEP="f.csv ..."] [PACK=results.tgz] \
#     bash benchmarks/gpu_call.sh OUT 'COMMAND'
# The carried wheels installed, OUT/gpu.csv (the GPU as found; nothing is changed), the GPU-marked
# tests of TESTS first (OUT/tests.log; a failure stops the call), then COMMAND (bash, in the
# repository root) with WORK (an empty folder for its results) and BUDGET_S (the seconds it has:
# what is left of DEADLINE seconds from this script's start, less 15 for the packing) exported,
# stopped by `timeout` at BUDGET_S; its output in OUT/run.log. Then WORK packed as at most 8 files
# (gpu_lib.sh's wl_pack): the KEEP files (paths under WORK, at most 4) beside the archive
# OUT/PACK of everything in WORK. Exit status: COMMAND's (124: the deadline stopped it).
#   e.g. bash benchmarks/gpu_call.sh "$OUT" \
#          'python3 benchmarks/moe_profile.py --out "$WORK"'
set -o pipefail
OUT=${1:?usage: gpu_call.sh OUT COMMAND}
COMMAND=${2:?usage: gpu_call.sh OUT COMMAND}
# shellcheck source=benchmarks/gpu_lib.sh
. "$(dirname "$0")/gpu_lib.sh"
wl_setup || exit 1
wl_gpu_info "$OUT"
# shellcheck disable=SC2086  # TESTS: several files
wl_tests "$OUT" ${TESTS:-} || exit 1
WORK=$(mktemp -d /tmp/wl-work.XXXX)
BUDGET_S=$(wl_budget "${DEADLINE:-570}" 15)
export WORK BUDGET_S
echo "budget ${BUDGET_S} s: $COMMAND"
timeout "$BUDGET_S" bash -c "$COMMAND" > "$OUT/run.log" 2>&1
rc=$?
echo "rc=$rc"; tail -c 3000 "$OUT/run.log"
# shellcheck disable=SC2086  # KEEP: several paths
wl_pack "$OUT" "$WORK" "${PACK:-results.tgz}" ${KEEP:-}
exit $rc
