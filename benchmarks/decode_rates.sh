#!/bin/bash
# One device call of benchmarks/decode_rates.py (issue 30), from the repository root with .whl/
# carried (bash benchmarks/device_wheels.sh), on gpu_lib.sh: installs the carried wheels, writes
# $OUT/gpu.csv and prints the library versions, runs the GPU-marked tests of TESTS (pytest files,
# optional; their output in $OUT/tests.log; a failure stops the call before the benchmark), with
# HOST_PROBE=1 benchmarks/raw_batch_transfer.py (the CPU side alone: a raw batch's hand-over, the
# helpers' transform's ms an image, their batches' hand-over and pin-memory copy;
# gd/host_probe.log in the archive, at most 60 s), then the benchmark's CELLS in REPEATS rounds
# (with LADDER=steps: then each step added to the best `gpu` cell so far; with CONFIRM=K: then K
# rounds of the best `gpu` cell beside CONFIRM_WITH) under BUDGET seconds (the benchmark starts no
# cell that would end later than 15 s before it: --budget-s; `timeout` stops it at BUDGET; with
# DEADLINE=S instead, BUDGET is what is left of S seconds from this script's start, minus 10 for
# the packing), and packs its tables, run.log and every cell's raw files (gpu-decode.tgz, members
# gd/...) into $OUT (wl_pack: at most 8 files). The results folders' run.sh set these, e.g.
#   CELLS=cpu,gpu-graphs REPEATS=2 BUDGET=420 TESTS=tests/workloads/test_cuda_graphs.py \
#     bash benchmarks/decode_rates.sh
set -o pipefail
: "${CELLS:?CELLS: the cells of the benchmark, comma-separated}" "${REPEATS:=1}" "${BUDGET:=300}"
# shellcheck source=benchmarks/gpu_lib.sh
. "$(dirname "$0")/gpu_lib.sh"
wl_setup || exit 1
wl_gpu_info "$OUT"
python3 -c "import torchvision; print('torchvision', torchvision.__version__)"
# shellcheck disable=SC2086  # TESTS: several files
wl_tests "$OUT" ${TESTS:-} || exit 1
rm -rf /tmp/gd-call && mkdir -p /tmp/gd-call/gd
if [ "${HOST_PROBE:-0}" = 1 ]; then  # the host's CPU side alone: hand-over, helpers' ms an image
  timeout 60 python3 benchmarks/raw_batch_transfer.py --work /tmp/wl-raw --images 768 \
    --batches 4 --fill-s 3 > /tmp/gd-call/gd/host_probe.log 2>&1
  echo "host probe rc=$?"; cat /tmp/gd-call/gd/host_probe.log
fi
[ -n "${DEADLINE:-}" ] && BUDGET=$(wl_budget "$DEADLINE")
echo "benchmark budget ${BUDGET} s"
timeout "$BUDGET" python3 benchmarks/decode_rates.py --out /tmp/gd-call/gd --cells "$CELLS" \
  --repeats "$REPEATS" --ladder "${LADDER:-}" --confirm "${CONFIRM:-0}" \
  --confirm-with "${CONFIRM_WITH:-}" \
  --budget-s $((BUDGET - 15)) > "$OUT/run.log" 2>&1
echo "rc=$?"
wl_pack "$OUT" /tmp/gd-call gpu-decode.tgz gd/gpu_decode.csv gd/gpu_decode_summary.csv \
  gd/summary.json gd/decoder_probe.json
tail -c 5000 "$OUT/run.log"
