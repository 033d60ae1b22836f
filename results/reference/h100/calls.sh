#!/usr/bin/env bash
# The device calls that produced results/reference/h100/ (one NVIDIA H100, device tool, carry [".whl"]
# made by `bash benchmarks/device_wheels.sh`). Changes no GPU setting (power limit, clocks,
# persistence): the power-cap sweep stays simulated. One argument, the call:
#   bash results/reference/h100/calls.sh resnet   # config/gpu1.yaml + gpu1-repeats.yaml: ResNet-50, 4 cells x 3 repeats
#   bash results/reference/h100/calls.sh qwen     # config/gpu1.yaml + gpu1-qwen.yaml: Qwen3-1.7B, 4 cells x 3 repeats
#   bash results/reference/h100/calls.sh sensor   # benchmarks/nvml_sensor.py: the power sensor characterised
#   bash results/reference/h100/calls.sh sensor+qwen1  # both in one call: the sensor, then the Qwen half with 1 repeat
#   bash results/reference/h100/calls.sh pfi      # uncapped PFI-study kinds (compiled pretrain, dense and MoE)
# Each writes under $OUT (at most 8 files): the host probe, the logs, one archive of raw files.
set -uo pipefail
CALL=${1:?usage: calls.sh resnet|qwen|sensor|sensor+qwen1|pfi}
OUT=${OUT:?set OUT}
export PYTHONUNBUFFERED=1
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
probe > "$OUT/host.txt" 2>&1
case "$CALL" in
  resnet) bash benchmarks/h200_workflow.sh "$OUT" 540 config/gpu1.yaml config/gpu1-repeats.yaml ;;
  qwen) bash benchmarks/h200_workflow.sh "$OUT" 565 config/gpu1.yaml config/gpu1-qwen.yaml ;;
  sensor) PYTHONPATH=src python3 benchmarks/nvml_sensor.py --out "$OUT" --budget-s "${BUDGET:-170}" ;;
  pfi) PYTHONPATH=src python3 benchmarks/h200_pfi_uncapped.py --out "$OUT/pfi" --duration-s 60 --compile on \
         --only qwen3-30b-a3b-8l-pretrain,qwen3-1.7b-pretrain --budget-s 420 --overhead-s 120 \
         > "$OUT/run.log" 2>&1; rc=$?
       (cd "$OUT/pfi" && ls) ; exit $rc ;;
  sensor+qwen1)
    mkdir -p /tmp/sensor
    PYTHONPATH=src timeout 220 python3 benchmarks/nvml_sensor.py --out /tmp/sensor --budget-s "${BUDGET:-150}" \
      > /tmp/sensor/run.log 2>&1; echo "sensor rc=$?"; tail -25 /tmp/sensor/run.log
    tar -czf "$OUT/sensor.tgz" -C /tmp sensor
    bash benchmarks/h200_workflow.sh "$OUT" "${LIMIT:-330}" config/gpu1.yaml config/gpu1-qwen.yaml config/gpu1-qwen-r1.yaml ;;
  *) echo "unknown call: $CALL" >&2; exit 2 ;;
esac
