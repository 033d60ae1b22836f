#!/bin/bash
# issue 30: decode cpu vs gpu (batched augment) vs synthetic, ResNet-50 bf16 batch 128, one device
# call from the repository root with .whl/ carried (bash benchmarks/device_wheels.sh: nvImageCodec,
# nvJPEG, jsonschema):
#   bash results/reference/h200/gpu-decode-batched/run.sh    (device tool: carry [".whl"])
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchvision', torchvision.__version__, torch.cuda.get_device_name())"
timeout ${BUDGET:-300} python3 benchmarks/h200_gpu_decode.py --out /tmp/gd \
  --cells ${CELLS:-cpu,gpu,gpu-per-image,gpu-no-helpers,gpu-readers-6} \
  --repeats ${REPEATS:-1} > /tmp/gd.log 2>&1
echo "rc=$?"
cp /tmp/gd.log "$OUT/run.log"
for f in gpu_decode.csv gpu_decode_summary.csv summary.json decoder_probe.json; do [ -f /tmp/gd/$f ] && cp /tmp/gd/$f "$OUT/"; done
tar czf "$OUT/gpu-decode.tgz" -C /tmp gd
tail -c 5000 /tmp/gd.log
