#!/bin/bash
# issue 30: decode cpu / gpu, eager and with CUDA graphs (`cuda_graphs: true`), against synthetic
# data eager and with graphs, ResNet-50 bf16 batch 128, in rounds; one device call from the
# repository root with .whl/ carried (bash benchmarks/device_wheels.sh: nvImageCodec, nvJPEG,
# pytest):
#   REPEATS=2 bash results/reference/h200/gpu-decode-graphs/run.sh    (device tool: carry [".whl"])
# First the GPU-marked tests of the CUDA-graph, decode and augment paths (their output in
# tests.log; call-1, at 3390912, ran those of the first two files).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchvision', torchvision.__version__, torch.cuda.get_device_name())"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_graphs.py \
  tests/test_gpu_decode.py tests/test_gpu_augment.py > "$OUT/tests.log" 2>&1
rc=$?; echo "tests rc=$rc"; tail -3 "$OUT/tests.log"
# a failing GPU test stops the call here, before the benchmark spends its time on failing cells
[ $rc -eq 0 ] || { tail -40 "$OUT/tests.log"; exit 1; }
timeout ${BUDGET:-420} python3 benchmarks/h200_gpu_decode.py --out /tmp/gd \
  --cells ${CELLS:-cpu,gpu,gpu-graphs,gpu-no-helpers-graphs} \
  --repeats ${REPEATS:-2} > /tmp/gd.log 2>&1
echo "rc=$?"
cp /tmp/gd.log "$OUT/run.log"
for f in gpu_decode.csv gpu_decode_summary.csv summary.json decoder_probe.json; do [ -f /tmp/gd/$f ] && cp /tmp/gd/$f "$OUT/"; done
tar czf "$OUT/gpu-decode.tgz" -C /tmp gd
tail -c 5000 /tmp/gd.log
