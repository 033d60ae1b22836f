"""Execution stage at realistic scale on one GPU (issue 5), in one call.

    PYTHONPATH=src python3 benchmarks/execution_stage.py --out DIR

- ResNet-50, 224 px, batch 256, generated JPEGs from disk, 12 loader workers, storage local
  (stage_copy), checkpointing on and off; plus the GPU-only ceiling on synthetic on-GPU tensors;
- Qwen3-1.7B architecture (random init, locally trained tokenizer, the model's vocabulary sized
  to it), sequence 2048, batch 8, bf16, fused AdamW, torch.compile (`--qwen-compile`),
  checkpointing on and off.
Each cell runs under `wattlife run` (NVML) and is attributed; its files land in
--out/cells/<cell>/ (phases.csv, events.csv, meta.json, trace.csv.gz, work/summary.json, the
layout `wattlife aggregate` and `make figures-from-cache` read) and one summary JSON in --out.
Throughputs: `throughput` on the `step` basis (training steps only), `throughput_wall` on the
`wall` basis (evaluation and checkpoint pauses included). Changes no GPU setting.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
from outdir import out_dir

PY = sys.executable
DRY = os.environ.get("WL_DRY") == "1"  # CPU rehearsal: tiny sizes, simulated GPU
HERE = Path(__file__).resolve().parent


def cell(work: Path, name: str, cfg: dict[str, Any], wl: str, storage: str, ckpt: bool, out: Path,
         prelude: str = "") -> dict[str, Any]:
    """One cell under `wattlife run`, attributed; `prelude`: Python run first in the cell's
    process (a benchmark's setting of a module constant)."""
    d = work / name
    code = (prelude + "import json,sys; from wattlife.config import settings; "
            "from wattlife.workloads import train_cell; "
            f"sys.exit(train_cell(settings(json.loads({json.dumps(json.dumps(cfg))})), {wl!r}, "
            f"{storage!r}, {ckpt!r}, {str(d / 'work')!r}))")
    t = time.time()
    r = subprocess.run([PY, "-m", "wattlife.cli", "run", "--trace", str(d / "trace.csv"),
                        "--events", str(d / "events.csv"), "--gpu", "sim" if DRY else "nvml",
                        "--idle-s", "2",
                        "--run-id", name, "--", PY, "-c", code], capture_output=True, text=True)
    shutil.rmtree(work / "local" / "checkpoints", ignore_errors=True)  # disk
    if r.returncode:
        return {"cell": name, "error": r.stderr[-3000:]}
    c = out / "cells" / name
    (c / "work").mkdir(parents=True, exist_ok=True)
    subprocess.run([PY, "-m", "wattlife.cli", "attribute", "--trace", str(d / "trace.csv"),
                    "--events", str(d / "events.csv"), "-o", str(c / "phases.csv"),
                    "--idle-split"], check=True, capture_output=True)
    s = json.loads((d / "work" / "summary.json").read_text())
    # the raw inputs too, so the tables can be re-attributed without the GPU
    pd.read_csv(d / "trace.csv").to_csv(c / "trace.csv.gz", index=False)
    for f in ("events.csv", "meta.json", "work/summary.json"):
        shutil.copy(d / f, c / f)
    from wattlife.analysis.shares import training_shares

    ph = pd.read_csv(c / "phases.csv")
    ph = ph[ph["phase"] != "deconvolution_residual"]
    e = ph.groupby("device_kind")["energy_j"].sum()
    gpu = ph[ph["device_kind"] == "gpu"].set_index("phase")
    t_all = gpu["time_s"].sum()
    # shares over the steady training phases; compile and warm-up are their own rows
    return {"cell": name, "wall_s": time.time() - t, "throughput": s["throughput"],
            "unit": s["throughput_unit"], "basis": s.get("throughput_basis"),
            "step_clock": s.get("step_clock"),
            "throughput_wall": s.get("throughput_wall"), "mfu": s.get("mfu"),
            "mfu_causal": s.get("mfu_causal"),
            "mfu_wall": s.get("mfu_wall"), "compile": s.get("compile"), "steps": s["steps"],
            "unattributed_s": float(gpu["time_s"].get("unattributed", 0.0)),
            "unattributed_share_of_time": float(gpu["time_s"].get("unattributed", 0.0) / t_all),
            "gpu_share_of_energy": float(e.get("gpu", 0) / e.sum()),
            "cpu_source": ",".join(sorted(set(ph.loc[ph["device_kind"] == "cpu", "source"]))),
            **training_shares(ph),
            "skipped": s.get("skipped_items"), "checkpoints": len(s.get("checkpoints", []))}


def n(big: Any, small: Any) -> Any:
    """`small` in a dry run (no GPU), else `big`."""
    return small if DRY else big


def resnet_part(a: argparse.Namespace, work: Path, shared: Path, dev: str, res: dict[str, Any],
                save: Any, out: Path) -> None:
    """JPEGs generated, then the ResNet-50 cells (checkpointing on, and off unless --quick)."""
    def q(full: Any, quick: Any) -> Any:
        return quick if a.quick else full
    ckpts = (True,) if a.quick else (True, False)
    t = time.time()
    subprocess.run([PY, "-m", "wattlife.cli", "gen-images", str(shared / "imagenet-gen"),
                    "--classes", "10", "--train-per-class", str(n(q(1100, 500), 8)),
                    "--val-per-class",
                    str(n(60, 2)), "--size", str(n(256, 64)), "--workers", "14"],
                   check=True, capture_output=True)
    res["jpeg_generation_s"] = time.time() - t
    cfg = {"storage": {"shared": str(shared), "local": str(work / "local")},
           "workloads": {"r50": {"kind": "image_classification", "dataset": "imagenet-gen",
                                 "model": "resnet50", "device": dev, "precision": "bf16",
                                 "image_size": n(224, 32), "batch_size": n(256, 4),
                                 "steps": n(q(100, 50), 4), "workers": n(12, 1),
                                 "prefetch": 4, "val_every": n(q(50, 25), 2), "val_steps": 2,
                                 "ckpt_every": n(q(50, 25), 2), "lr": 0.1}}}
    for ck in ckpts:
        res[f"resnet50_local_ckpt{'on' if ck else 'off'}"] = cell(
            work, f"resnet50-local-ckpt{'on' if ck else 'off'}", cfg, "r50", "local", ck, out)
        save()


def qwen_part(a: argparse.Namespace, work: Path, shared: Path, dev: str, res: dict[str, Any],
              save: Any, out: Path) -> None:
    """A text corpus generated, then the Qwen3-1.7B cells (as `resnet_part`)."""
    def q(full: Any, quick: Any) -> Any:
        return quick if a.quick else full
    ckpts = (True,) if a.quick else (True, False)
    from wattlife.workloads.datagen import make_text_corpus

    t = time.time()
    make_text_corpus(shared / "wikitext-gen", n_words=n(q(1_600_000, 1_000_000), 20_000))
    res["text_generation_s"] = time.time() - t
    cfg = {"storage": {"shared": str(shared), "local": str(work / "local")},
           "workloads": {"q": {"kind": "causal_lm", "dataset": "wikitext-gen",
                               "model_config": n("qwen3-1.7b", "qwen3-tiny"), "device": dev,
                               "precision": "bf16", "seq_len": n(2048, 64),
                               "batch_size": n(8, 2), "steps": n(q(50, 30), 4),
                               "val_every": n(q(25, 15), 2), "val_steps": 1,
                               "ckpt_every": n(q(50, 30), 4),
                               "tokenizer_vocab": n(8192, 512), "lr": 3e-4,
                               "compile": a.qwen_compile == "on" and not DRY}}}
    for ck in ckpts:
        res[f"qwen3_1.7b_local_ckpt{'on' if ck else 'off'}"] = cell(
            work, f"qwen3-1.7b-local-ckpt{'on' if ck else 'off'}", cfg, "q", "local", ck, out)
        save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="synthetic,resnet,qwen")
    ap.add_argument("--quick", action="store_true",
                    help="checkpointing on only, fewer steps (when little device time is left)")
    ap.add_argument("--qwen-compile", choices=["on", "off"], default="on",
                    help="torch.compile the Qwen3 model (default on)")
    a = ap.parse_args()
    out = out_dir(a.out)
    work = Path("/tmp/wl-exec")
    shared = work / "shared"
    res: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def save() -> None:
        (out / "execution_summary.json").write_text(json.dumps(res, indent=1, default=str))

    parts = a.only.split(",")
    dev = "cpu" if DRY else "cuda"
    if "synthetic" in parts and not DRY:
        r = subprocess.run([PY, str(HERE / "train_loop.py"), "--batch", "256", "--steps", "60",
                            "--warmup", "20"], capture_output=True, text=True)
        res["resnet50_synthetic_gpu_only"] = json.loads(r.stdout.strip().splitlines()[-1]) \
            if r.returncode == 0 else r.stderr[-2000:]
        save()
    if "resnet" in parts:
        resnet_part(a, work, shared, dev, res, save, out)
    if "qwen" in parts:
        qwen_part(a, work, shared, dev, res, save, out)
    print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
