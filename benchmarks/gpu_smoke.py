"""Smoke check of the image workload on a GPU: a real cell under the sampler, then attribution.

    PYTHONPATH=src python3 benchmarks/gpu_smoke.py OUTDIR
"""

import json
import subprocess
import sys
from pathlib import Path

from outdir import out_dir

out = out_dir(sys.argv[1], "OUTDIR")
work = Path("/tmp/wl-smoke")
py = sys.executable
subprocess.run([py, "-m", "wattlife.cli", "gen-images", str(work / "shared" / "imgs"), "--classes",
                "10",
                "--train-per-class", "100", "--val-per-class", "10", "--size", "160"], check=True)
cfg = {"storage": {"shared": str(work / "shared"), "local": str(work / "local")},
       "workloads": {"r50": {"kind": "image_classification", "dataset": "imgs", "model": "resnet50",
                             "device": "cuda", "precision": "bf16", "image_size": 128,
                             "batch_size": 64, "steps": 60, "workers": 8, "val_every": 30,
                             "val_steps": 2, "ckpt_every": 30, "lr": 0.1}}}
code = ("import json,sys; from wattlife.config import settings; "
        "from wattlife.workloads import train_cell; "
        f"sys.exit(train_cell(settings(json.loads({json.dumps(json.dumps(cfg))})), "
        "'r50', 'local', True, "
        f"{str(work / 'cell' / 'work')!r}))")
rc = subprocess.run([py, "-m", "wattlife.cli", "run", "--trace", str(work / "cell/trace.csv"),
                     "--events", str(work / "cell/events.csv"), "--gpu", "nvml", "--idle-s", "2",
                     "--", py, "-c", code]).returncode
assert rc == 0, rc
subprocess.run([py, "-m", "wattlife.cli", "attribute", "--trace", str(work / "cell/trace.csv"),
                "--events", str(work / "cell/events.csv"), "-o", str(out / "smoke_phases.csv"),
                "--idle-split"], check=True)
print((work / "cell/work/summary.json").read_text())
meta = json.loads((work / "cell/meta.json").read_text())
print(json.dumps({k: meta[k] for k in ("gpu_model", "driver", "sensor_notes")}, indent=1))
print(json.dumps([s for s in meta["sampler"]["sensors"] if s["device"] == "gpu0"], indent=0)[:3000])
