#!/usr/bin/env bash
# config/gpu1.yaml through Snakemake on one GPU host without registry access (issue 19):
#   bash benchmarks/workflow_run.sh OUT [TIMEOUT_S [CONFIGFILE...]]
#   (issue 27's repeats: ... OUT 540 config/gpu1.yaml config/gpu1-repeats.yaml)
# Installs the carried wheels (.whl/: snakemake and its dependencies, made with `pip download`)
# into /tmp/site, runs the whole pipeline, then copies the run's results folder (the last config
# file's `results_dir`) to OUT, leaving out checkpoints, the random-byte artefacts served and
# uploaded over loopback and files over 40 MB (listed in OUT/left_out.txt), compressing traces,
# as one archive OUT/gpu1-workflow.tar.gz (the device tool returns at most 8 files of 16 MiB:
# with the served artefacts inside, the issue-27 run's archive was 50 MB and did not come back).
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
if ! python3 -c 'import snakemake' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  export PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
if ! command -v wattlife >/dev/null; then  # the package's console script, without installing it
  mkdir -p /tmp/wl-bin
  printf '#!/usr/bin/env python3\nimport sys\nfrom wattlife.cli import main\nsys.exit(main())\n' > /tmp/wl-bin/wattlife
  chmod +x /tmp/wl-bin/wattlife
  export PATH=/tmp/wl-bin:$PATH
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit --format=csv > "$OUT/gpu.csv"
python3 -m snakemake --unlock --profile profiles/local --configfile "${CONFIGS[@]}" >/dev/null 2>&1
start=$(date +%s)
timeout --signal=INT "$LIMIT" python3 -m snakemake --profile profiles/local --configfile "${CONFIGS[@]}" \
  --cores "$(nproc)" > "$OUT/snakemake.log" 2>&1
rc=$?
echo "snakemake rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/snakemake.log"
python3 -m snakemake --profile profiles/local --configfile "${CONFIGS[@]}" --cores 1 -n > "$OUT/after-dryrun.log" 2>&1
tail -3 "$OUT/after-dryrun.log"
cd "$RES" || exit $rc
find . -type f -name trace.csv -size +1M -exec gzip -9 {} +  # as the earlier references
SKIP=(-path '*/checkpoints/*' -o -path '*.dcp/*' -o -path './prepare/served/*.bin' -o -path './prepare/uploaded/*' -o -size +40M)
find . -type f \( "${SKIP[@]}" \) -printf '%p %s\n' > "$OUT/left_out.txt"
find . -type f ! \( "${SKIP[@]}" \) -print0 | tar --null -T - -czf "$OUT/gpu1-workflow.tar.gz"
ls -la "$OUT/gpu1-workflow.tar.gz"
exit $rc
