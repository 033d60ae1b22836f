#!/usr/bin/env bash
# The device calls of results/reference/h100/ (one NVIDIA H100, device tool, carry [".whl"] made by
# `bash benchmarks/device_wheels.sh`), on benchmarks/gpu_lib.sh (the carried wheels installed,
# PYTHONPATH, a `wattlife` command). Changes no GPU setting (power limit, clocks, persistence):
# the power-cap sweep stays simulated. One argument, the call:
#   bash results/reference/h100/calls.sh resnet        # gpu1.yaml + gpu1-repeats.yaml: ResNet-50, 4 cells x 3 repeats (~400 s)
#   bash results/reference/h100/calls.sh qwen          # gpu1.yaml + gpu1-qwen.yaml: Qwen3-1.7B, 4 cells x 3 repeats (~570 s)
#   bash results/reference/h100/calls.sh sensor        # benchmarks/nvml_sensor.py (BUDGET s, default 170)
#   bash results/reference/h100/calls.sh sensor+qwen1  # the sensor, then the Qwen half with 1 repeat
#   bash results/reference/h100/calls.sh pfi           # uncapped PFI-study kinds, compiled pretrain (dense, MoE)
#   bash results/reference/h100/calls.sh pfi-lora      # the same for the two LoRA kinds
# Each writes under $OUT (at most 8 files): host.txt (the host, its whole-node power sources), the
# logs, one archive of raw files. The same script serves the H200 (nvidia-h200).
set -uo pipefail
CALL=${1:?usage: calls.sh resnet|qwen|sensor|sensor+qwen1|pfi|pfi-lora}
OUT=${OUT:?set OUT}
# shellcheck source=benchmarks/gpu_lib.sh
. benchmarks/gpu_lib.sh
wl_setup || exit 1
probe() {  # what this host is, and which whole-node power sources it exposes (issue 45)
  nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit,power.max_limit,clocks.max.sm,memory.total \
    --format=csv
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'
  for p in /sys/cray/pm_counters /sys/class/powercap/intel-rapl:0/energy_uj /dev/ipmi0 /dev/ipmi/0 /dev/ipmidev/0; do
    if [ -e "$p" ]; then echo "node source present: $p"; else echo "node source absent: $p"; fi
  done
  command -v ipmitool >/dev/null && echo "ipmitool: $(command -v ipmitool)" || echo "ipmitool: not installed"
  command -v sstat >/dev/null && echo "sstat: present" || echo "sstat: not installed (no Slurm)"
  nproc; free -g | head -2
}
sensor() {  # $1: the folder; the script's tables, summary and raw archive, its log beside them
  mkdir -p "$1"
  timeout $(( ${BUDGET:-170} + 60 )) python3 benchmarks/nvml_sensor.py --out "$1" --budget-s "${BUDGET:-170}" \
    > "$1/run.log" 2>&1
  echo "sensor rc=$?"; tail -25 "$1/run.log"
}
pfi() {  # $1: the kinds
  python3 benchmarks/pfi_uncapped.py --out /tmp/pfi --duration-s 60 --compile on --only "$1" \
    --budget-s 420 --overhead-s 120 > "$OUT/run.log" 2>&1
  local rc=$?; tar -czf "$OUT/pfi.tgz" -C /tmp pfi; return $rc
}
probe > "$OUT/host.txt" 2>&1
case "$CALL" in
  resnet) bash benchmarks/workflow_run.sh "$OUT" 540 config/gpu1.yaml config/gpu1-repeats.yaml ;;
  qwen) bash benchmarks/workflow_run.sh "$OUT" 565 config/gpu1.yaml config/gpu1-qwen.yaml ;;
  sensor) sensor "$OUT" ;;
  sensor+qwen1)
    sensor /tmp/sensor; tar -czf "$OUT/sensor.tgz" -C /tmp sensor
    bash benchmarks/workflow_run.sh "$OUT" "${LIMIT:-330}" config/gpu1.yaml config/gpu1-qwen.yaml \
      config/gpu1-qwen-r1.yaml ;;
  pfi) pfi qwen3-30b-a3b-8l-pretrain,qwen3-1.7b-pretrain ;;
  pfi-lora) pfi qwen3-30b-a3b-8l-lora,qwen3-1.7b-lora ;;
  *) echo "unknown call: $CALL" >&2; exit 2 ;;
esac
