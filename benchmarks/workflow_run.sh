#!/usr/bin/env bash
# config/gpu1.yaml through Snakemake on one GPU host without registry access (issue 19):
#   bash benchmarks/workflow_run.sh OUT [TIMEOUT_S [CONFIGFILE...]]
#   (issue 27's repeats: ... OUT 540 config/gpu1.yaml config/gpu1-repeats.yaml)
# On gpu_lib.sh: installs the carried wheels (.whl/: snakemake and its dependencies, made with
# `pip download`), writes OUT/gpu.csv, runs the whole pipeline, then packs the run's results folder
# (the last config file's `results_dir`) into OUT (wl_pack), leaving out checkpoints, the
# random-byte artefacts served and uploaded over loopback and files over 40 MB (listed in
# OUT/left_out.txt when any), compressing traces, as one archive OUT/gpu1-workflow.tar.gz (the
# device tool returns at most 8 files of 16 MiB: with the served artefacts inside, the issue-27
# run's archive was 50 MB and did not come back).
# Changes no GPU setting.
set -uo pipefail
OUT=${1:?usage: workflow_run.sh OUT [TIMEOUT_S [CONFIGFILE...]]}
LIMIT=${2:-500}
shift $(( $# < 2 ? $# : 2 ))
CONFIGS=("${@:-config/gpu1.yaml}")
RES=$(python3 -c 'import sys, yaml
r = "results/gpu1"
for f in sys.argv[1:]:
    r = yaml.safe_load(open(f)).get("results_dir", r)
print(r)' "${CONFIGS[@]}")
# shellcheck source=benchmarks/gpu_lib.sh
. "$(dirname "$0")/gpu_lib.sh"
wl_setup || exit 1
wl_gpu_info "$OUT"
python3 -m snakemake --unlock --profile profiles/local --configfile "${CONFIGS[@]}" >/dev/null 2>&1
start=$(date +%s)
timeout --signal=INT "$LIMIT" python3 -m snakemake --profile profiles/local --configfile "${CONFIGS[@]}" \
  --cores "$(nproc)" > "$OUT/snakemake.log" 2>&1
rc=$?
echo "snakemake rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/snakemake.log"
python3 -m snakemake --profile profiles/local --configfile "${CONFIGS[@]}" --cores 1 -n > "$OUT/after-dryrun.log" 2>&1
tail -3 "$OUT/after-dryrun.log"
[ -d "$RES" ] || exit $rc
WL_SKIP=(-path '*/checkpoints/*' -o -path '*.dcp/*' -o -path './prepare/served/*.bin'
         -o -path './prepare/uploaded/*' -o -size +40M)  # find's paths from SRC, as ./...
wl_pack "$OUT" "$RES" gpu1-workflow.tar.gz
exit $rc
