#!/bin/bash
# One device call of benchmarks/decode_rates.py (issue 30), from the repository root with .whl/
# carried (bash benchmarks/device_wheels.sh): installs the carried wheels, prints the GPU and the
# library versions, runs the GPU-marked tests of TESTS (pytest files, optional; their output in
# $OUT/tests.log; a failure stops the call before the benchmark), with HOST_PROBE=1
# benchmarks/raw_batch_transfer.py (the CPU side alone: a raw batch's hand-over, the helpers'
# transform's ms an image, their batches' hand-over and pin-memory copy; $OUT/host_probe.log, at
# most 60 s), then the benchmark's CELLS in
# REPEATS rounds (with LADDER=steps: then each step added to the best `gpu` cell so far; with
# CONFIRM=K: then K rounds of the best `gpu` cell beside CONFIRM_WITH) under BUDGET seconds (the benchmark starts no cell that would end later than 15 s
# before it: --budget-s; `timeout` stops it at BUDGET; with DEADLINE=S instead, BUDGET is what is
# left of S seconds from this script's start, minus 10 for the copies), and copies its tables,
# run.log and every cell's raw files (gpu-decode.tgz) to $OUT. The results folders' run.sh set
# these, e.g.
#   CELLS=cpu,gpu-graphs REPEATS=2 BUDGET=420 TESTS=tests/test_cuda_graphs.py \
#     bash benchmarks/decode_rates.sh
set -o pipefail
: "${CELLS:?CELLS: the cells of the benchmark, comma-separated}" "${REPEATS:=1}" "${BUDGET:=300}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchvision', torchvision.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
if [ -n "${TESTS:-}" ]; then
  # shellcheck disable=SC2086  # TESTS: several files
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS > "$OUT/tests.log" 2>&1
  rc=$?; echo "tests rc=$rc"; tail -3 "$OUT/tests.log"
  [ $rc -eq 0 ] || { tail -40 "$OUT/tests.log"; exit 1; }
fi
if [ "${HOST_PROBE:-0}" = 1 ]; then  # the host's CPU side alone: hand-over, helpers' ms an image
  timeout 60 python3 benchmarks/raw_batch_transfer.py --work /tmp/wl-raw --images 768 \
    --batches 4 --fill-s 3 > "$OUT/host_probe.log" 2>&1
  echo "host probe rc=$?"; cat "$OUT/host_probe.log"
fi
[ -n "${DEADLINE:-}" ] && BUDGET=$((DEADLINE - SECONDS - 10))
echo "benchmark budget ${BUDGET} s"
timeout "$BUDGET" python3 benchmarks/decode_rates.py --out /tmp/gd --cells "$CELLS" \
  --repeats "$REPEATS" --ladder "${LADDER:-}" --confirm "${CONFIRM:-0}" \
  --confirm-with "${CONFIRM_WITH:-}" \
  --budget-s $((BUDGET - 15)) > /tmp/gd.log 2>&1
echo "rc=$?"
cp /tmp/gd.log "$OUT/run.log"
for f in gpu_decode.csv gpu_decode_summary.csv summary.json decoder_probe.json; do
  [ -f /tmp/gd/$f ] && cp /tmp/gd/$f "$OUT/"
done
tar czf "$OUT/gpu-decode.tgz" -C /tmp gd
tail -c 5000 /tmp/gd.log
