#!/bin/bash
# issue 26: the two LoRA uncapped PFI kinds with torch.compile, 60 s of training each (the schedule's
# clock starts after the compiling first step); runs that would outlast the budget are skipped.
set -o pipefail
cd "$(dirname "$0")"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 -c "import wattlife.config" || exit 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
timeout 570 python3 benchmarks/h200_pfi_uncapped.py --out "$OUT" --duration-s 60 --compile on \
  --only qwen3-30b-a3b-8l-lora,qwen3-1.7b-lora \
  --budget-s 560 --overhead-s 120 > "$OUT/run.log" 2>&1
echo "rc=$?"
python3 - <<'PY'
import os, pandas as pd
df = pd.read_csv(os.path.join(os.environ["OUT"], "pfi_uncapped.csv"))
cols = [c for c in ["run", "compile", "wall_s", "steps", "tokens_per_s", "events_step_tokens_per_s",
        "mfu", "mfu_causal", "train_mean_power_w", "steady_mean_power_w", "train_over_steady",
        "detector_mean_power_w", "detector_over_steady", "util50_mean_power_w",
        "train_top10_power_w", "train_windows", "steady_steps", "error", "window_error"] if c in df]
pd.set_option("display.width", 250)
print(df[cols].to_string(index=False))
PY
tail -c 1500 "$OUT/run.log"
