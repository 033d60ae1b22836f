#!/usr/bin/env bash
# config/gpu1.yaml through Snakemake on one GPU host without registry access (issue 19):
#   bash benchmarks/h200_workflow.sh OUT [TIMEOUT_S]
# Installs the carried wheels (.whl/: snakemake and its dependencies, made with `pip download`)
# into /tmp/site, runs the whole pipeline, then copies results/gpu1 to OUT/workflow, leaving
# out checkpoints and files over 40 MB (listed in OUT/left_out.txt), as one archive
# OUT/gpu1-workflow.tar.gz (the device tool returns a limited number of files). Changes no GPU setting.
set -uo pipefail
OUT=${1:?usage: h200_workflow.sh OUT [TIMEOUT_S]}
LIMIT=${2:-500}
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
python3 -m snakemake --unlock --profile profiles/local --configfile config/gpu1.yaml >/dev/null 2>&1
start=$(date +%s)
timeout --signal=INT "$LIMIT" python3 -m snakemake --profile profiles/local --configfile config/gpu1.yaml \
  --cores "$(nproc)" > "$OUT/snakemake.log" 2>&1
rc=$?
echo "snakemake rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/snakemake.log"
python3 -m snakemake --profile profiles/local --configfile config/gpu1.yaml --cores 1 -n > "$OUT/after-dryrun.log" 2>&1
tail -3 "$OUT/after-dryrun.log"
cd results/gpu1 || exit $rc
find . -type f \( -path '*/checkpoints/*' -o -path '*.dcp/*' -o -size +40M \) -printf '%p %s\n' > "$OUT/left_out.txt"
find . -type f ! -path '*/checkpoints/*' ! -path '*.dcp/*' -size -40M -print0 | tar --null -T - -czf "$OUT/gpu1-workflow.tar.gz"
ls -la "$OUT/gpu1-workflow.tar.gz"
exit $rc
