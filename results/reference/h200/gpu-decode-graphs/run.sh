#!/bin/bash
# issue 30: decode cpu / gpu, eager and with CUDA graphs (`cuda_graphs: true`), against synthetic
# data eager and with graphs, ResNet-50 bf16 batch 128, in rounds; one device call from the
# repository root with .whl/ carried (bash benchmarks/device_wheels.sh: nvImageCodec, nvJPEG,
# pytest):
#   REPEATS=2 bash results/reference/h200/gpu-decode-graphs/run.sh    (device tool: carry [".whl"])
# First the GPU-marked tests of the CUDA-graph, decode and augment paths (their output in
# tests.log; call-1, at 3390912, ran those of the first two files). The call itself:
# benchmarks/decode_rates.sh.
CELLS=${CELLS:-cpu,gpu,gpu-graphs,gpu-no-helpers-graphs} REPEATS=${REPEATS:-2} \
  BUDGET=${BUDGET:-420} \
  TESTS=${TESTS-tests/workloads/test_cuda_graphs.py tests/workloads/test_gpu_decode.py tests/workloads/test_gpu_augment.py} \
  exec bash benchmarks/decode_rates.sh
