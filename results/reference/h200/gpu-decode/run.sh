#!/bin/bash
# issue 30 (i30d): decode cpu vs gpu vs synthetic, ResNet-50 bf16 batch 128, one call
set -o pipefail
cd "$(dirname "$0")"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchvision', torchvision.__version__, torch.cuda.get_device_name())"
python3 -c "from nvidia import nvimgcodec as n; d=n.Decoder(); print('nvimgcodec', n.__version__, 'decoder ok')" 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|note:" | tail -3
timeout ${BUDGET:-280} python3 benchmarks/h200_gpu_decode.py --out /tmp/gd ${ARGS} > /tmp/gd.log 2>&1
echo "rc=$?"
cp /tmp/gd.log "$OUT/run.log"
for f in gpu_decode.csv summary.json decoder_probe.json; do [ -f /tmp/gd/$f ] && cp /tmp/gd/$f "$OUT/"; done
tar czf "$OUT/gpu-decode.tgz" -C /tmp gd
tail -c 5000 /tmp/gd.log
