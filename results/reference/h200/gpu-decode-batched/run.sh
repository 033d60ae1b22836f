#!/bin/bash
# issue 30: decode cpu vs gpu (batched augment) vs synthetic, ResNet-50 bf16 batch 128, one device
# call from the repository root with .whl/ carried (bash benchmarks/device_wheels.sh: nvImageCodec,
# nvJPEG, jsonschema):
#   bash results/reference/h200/gpu-decode-batched/run.sh    (device tool: carry [".whl"])
# The call itself: benchmarks/decode_rates.sh (no tests first).
CELLS=${CELLS:-cpu,gpu,gpu-per-image,gpu-no-helpers,gpu-readers-6} REPEATS=${REPEATS:-1} \
  BUDGET=${BUDGET:-300} TESTS= exec bash benchmarks/decode_rates.sh
