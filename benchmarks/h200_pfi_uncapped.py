"""Uncapped runs of the PFI study's job kinds on one GPU (issue 11), in one call.

    PYTHONPATH=src python3 benchmarks/h200_pfi_uncapped.py --out DIR [--duration-s 60] [--compile on]

A dense model (Qwen3-1.7B) and an MoE model (Qwen3-30B-A3B reduced to 8 layers: 128 experts,
top-8, ~5.6 B parameters), each with task `pretrain` and `lora` (rank 32), sequence 2048, batch 8,
bf16, random init, the experts on transformers' `grouped_mm` backend (the workload's CUDA
default), `torch.compile` per `--compile`, under `wattlife run` (NVML with GPM telemetry) with
the study's protocol: a fixed run length, one evaluation and one checkpoint at set times, the
trace partitioned into warm-up / start-up / training, aggregates over training only. Writes
`pfi_uncapped.csv` (one row per run: tokens/s on the `step` basis and the `wall` one, TFLOPS,
MFU, training-window power and telemetry, the DRAM-copy product) and a tarball of every run's
trace, events, meta, phases and summary. Each run's checkpoint is deleted after it (disk).
Changes no GPU setting.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd

PY = sys.executable
DRY = os.environ.get("WL_DRY") == "1"  # CPU rehearsal: tiny models, simulated GPU

CELLS = {
    "qwen3-1.7b-pretrain": {"model_config": "qwen3-1.7b", "task": "pretrain"},
    "qwen3-1.7b-lora": {"model_config": "qwen3-1.7b", "task": "lora"},
    "qwen3-30b-a3b-8l-pretrain": {"model_config": "qwen3-30b-a3b", "task": "pretrain",
                                  "model_overrides": {"num_hidden_layers": 8}},
    "qwen3-30b-a3b-8l-lora": {"model_config": "qwen3-30b-a3b", "task": "lora",
                              "model_overrides": {"num_hidden_layers": 8}},
}


def run_cell(work: Path, name: str, over: dict, duration: float, compile_: bool) -> dict:
    from wattlife.analysis.trace_segments import partition_trace, training_aggregates
    from wattlife.contracts import read_trace

    d = work / name
    w = {"kind": "causal_lm", "dataset": "wikitext-gen", "device": "cpu" if DRY else "cuda",
         "precision": "bf16", "seq_len": 64 if DRY else 2048, "batch_size": 2 if DRY else 8,
         "steps": 100_000, "duration_s": duration, "eval_at_s": duration * 0.5,
         "ckpt_at_s": duration * 0.75, "val_steps": 2, "tokenizer_vocab": 512 if DRY else 8192,
         "lora_rank": 32, "compile": compile_, **over}
    if DRY:
        w["model_config"] = "qwen3-moe-tiny" if "a3b" in name else "qwen3-tiny"
        w.pop("model_overrides", None)
        w["compile"] = False  # the CPU rehearsal skips inductor's C++ build
    cfg = {"storage": {"shared": str(work / "shared"), "local": str(work / "local")},
           "workloads": {"q": w}}
    code = ("import json,sys; from wattlife.workloads import train_from_config; "
            f"sys.exit(train_from_config(json.loads({json.dumps(json.dumps(cfg))}), 'q', 'shared', True, "
            f"{str(d / 'work')!r}))")
    t = time.time()
    r = subprocess.run([PY, "-m", "wattlife.cli", "run", "--trace", str(d / "trace.csv"),
                        "--events", str(d / "events.csv"), "--gpu", "sim" if DRY else "nvml",
                        "--idle-s", "2", "--run-id", name, "--", PY, "-c", code],
                       capture_output=True, text=True)
    shutil.rmtree(work / "shared" / "checkpoints", ignore_errors=True)
    if r.returncode:
        return {"run": name, "compile": compile_, "error": r.stderr[-3000:]}
    subprocess.run([PY, "-m", "wattlife.cli", "attribute", "--trace", str(d / "trace.csv"),
                    "--events", str(d / "events.csv"), "-o", str(d / "phases.csv"), "--idle-split"],
                   capture_output=True)
    s = json.loads((d / "work" / "summary.json").read_text())
    tr = read_trace(d / "trace.csv")
    seg = partition_trace(tr)
    seg.to_csv(d / "segments.csv", index=False)
    agg = training_aggregates(tr, seg)
    row = {"run": name, "model": w["model_config"], "task": w["task"], "compile": s.get("compile"),
           "experts_impl": s.get("experts_impl"), "wall_s": time.time() - t, "steps": s["steps"],
           "tokens_per_s": s["throughput"], "basis": s.get("throughput_basis"),
           "tokens_per_s_wall": s.get("throughput_wall"), "tflops_per_gpu": s.get("tflops_per_gpu"),
           "mfu": s.get("mfu"), "mfu_wall": s.get("mfu_wall"), "vocab_size": s.get("vocab_size"),
           "lora_target_modules": " ".join(s.get("lora_target_modules") or []),
           "lora_target_parameters": " ".join(s.get("lora_target_parameters") or []),
           "parameters": s["parameters"], "trained_parameters": s["trained_parameters"],
           "active_parameters": s["active_parameters"], "flops_per_token": s["flops_per_token"],
           "checkpoints": len(s.get("checkpoints", []))}
    if len(agg):
        a = agg.iloc[0].to_dict()
        row.update({f"train_{k}": v for k, v in a.items() if k not in ("host", "device")})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--duration-s", type=float, default=60.0,
                    help="each run's length (compilation included), default 60")
    ap.add_argument("--compile", choices=["on", "off"], default="on",
                    help="torch.compile the model (default on)")
    ap.add_argument("--only", default=",".join(CELLS))
    ap.add_argument("--budget-s", type=float, default=0,
                    help="skip the runs that would end after this many seconds (default 0: no limit)")
    a = ap.parse_args()
    out, work = Path(a.out), Path("/tmp/wl-pfi")
    from wattlife.workloads.datagen import make_text_corpus

    make_text_corpus(work / "shared" / "wikitext-gen", n_words=20_000 if DRY else 1_000_000)
    rows = []
    t0 = time.monotonic()
    for name in a.only.split(","):
        if a.budget_s and time.monotonic() - t0 > a.budget_s - a.duration_s - 45:
            rows.append({"run": name, "error": f"not run: the {a.budget_s:.0f} s budget was spent"})
            continue
        rows.append(run_cell(work, name, CELLS[name], a.duration_s, a.compile == "on"))
        if "error" in rows[-1] and a.compile == "on":  # say so, and measure it uncompiled
            print(json.dumps(rows[-1], default=str)[-1500:], flush=True)
            rows.append(run_cell(work, name, CELLS[name], a.duration_s, False))
        pd.DataFrame(rows).to_csv(out / "pfi_uncapped.csv", index=False)
        print(json.dumps(rows[-1], default=str), flush=True)
        with tarfile.open(out / "pfi_uncapped_runs.tar.gz", "w:gz") as tar:  # after every run
            for n in a.only.split(","):
                for f in ("trace.csv", "events.csv", "meta.json", "segments.csv", "phases.csv",
                          "work/summary.json"):
                    if (work / n / f).exists():
                        tar.add(work / n / f, arcname=f"{n}/{Path(f).name}")
    cols = ["run", "compile", "experts_impl", "tokens_per_s", "tokens_per_s_wall", "mfu",
            "train_mean_power_w", "train_dram_copy_product"]
    print(pd.DataFrame(rows).reindex(columns=cols).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
