"""Uncapped runs of the PFI study's job kinds on one GPU (issue 11), in one call.

    PYTHONPATH=src python3 benchmarks/pfi_uncapped.py --out DIR [--duration-s 60] \
        [--compile on]

A dense model (Qwen3-1.7B) and an MoE model (Qwen3-30B-A3B reduced to 8 layers: 128 experts,
top-8, ~5.6 B parameters), each with task `pretrain` and `lora` (rank 32), sequence 2048, batch 8,
bf16, random init, the experts on transformers' `grouped_mm` backend (the workload's CUDA
default), `torch.compile` per `--compile`, under `wattlife run` (NVML with GPM telemetry) with
the study's protocol: a fixed run length, one evaluation and one checkpoint at set times, the
trace partitioned into warm-up / start-up / steady training (`analysis.trace_segments`: the steady
steps from the events, after compilation and warm-up, outside evaluation and checkpoint), the
aggregates over training only. Writes `pfi_uncapped.csv` (one row per run: tokens/s on the
`step` basis and the `wall` one, the step basis recomputed from the events, TFLOPS, MFU with
attention full and causal, the training window's power and telemetry, the study's top-10 %
aggregate, the DRAM-copy product, the mean power over the steady steps themselves and the
window's ratio to it, the telemetry detector's window (no events) and the former window — from the
first reading with utilisation >= 50 % — for comparison) and a tarball of every run's trace,
events, meta, phases, segments and summary. The output folder is made first (a folder that
cannot be written stops the script before any GPU work). Each run's checkpoint is deleted after
it (disk). Changes no GPU setting.

    PYTHONPATH=src python3 benchmarks/pfi_uncapped.py --rederive TARBALL CSV

(no GPU) re-derives a committed call's files with today's code (issue 46): each run's phases.csv
in TARBALL re-attributed (`--idle-split`: `compile` and `warmup` rows of their own), its
segments.csv and CSV's window columns recomputed (`window_columns`); trace, events, meta and
summary unchanged, TARBALL repacked in its member order.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from outdir import out_dir

PY = sys.executable
DRY = os.environ.get("WL_DRY") == "1"  # CPU rehearsal: tiny models, simulated GPU

CELLS: dict[str, dict[str, Any]] = {
    "qwen3-1.7b-pretrain": {"model_config": "qwen3-1.7b", "task": "pretrain"},
    "qwen3-1.7b-lora": {"model_config": "qwen3-1.7b", "task": "lora"},
    "qwen3-30b-a3b-8l-pretrain": {"model_config": "qwen3-30b-a3b", "task": "pretrain",
                                  "model_overrides": {"num_hidden_layers": 8}},
    "qwen3-30b-a3b-8l-lora": {"model_config": "qwen3-30b-a3b", "task": "lora",
                              "model_overrides": {"num_hidden_layers": 8}},
}


def util50_window_power(tr: pd.DataFrame) -> float:
    """Mean power of the former training window: first to last reading with utilisation >= 50 %
    after the memory rise (the rule issue 26 replaced; kept here for the comparison only)."""
    from wattlife.attribution import device_series, interval_energy

    g = tr[tr["device"] == "gpu0"]
    mem = g[g["metric"] == "mem_used_b"].sort_values("t_ns")
    t_mem = int(mem["t_ns"].iat[(mem["value"] >= mem["value"].iat[0] + (1 << 30)).argmax()]) \
        if len(mem) else int(g["t_ns"].min())
    u = g[(g["metric"] == "util_gpu") & (g["t_ns"] >= t_mem) & (g["value"] >= 50)]
    s = next((x for x in device_series(tr) if x.device == "gpu0"), None)
    if u.empty or s is None:
        return float("nan")
    e, dt = interval_energy(s, int(u["t_ns"].min()), int(u["t_ns"].max()))
    return e / dt if dt > 0 else float("nan")


def window_columns(tr: pd.DataFrame, ev: pd.DataFrame, d: Path) -> dict[str, Any]:
    """The training window from the events (written as segments.csv), its aggregates, the steady
    steps' own mean power, the telemetry detector's window and the former util >= 50 % window."""
    from wattlife.analysis.performance import step_throughput_from_events
    from wattlife.analysis.trace_segments import (
        partition_trace,
        post_warmup_power,
        training_aggregates,
    )

    seg = partition_trace(tr, ev)
    seg.to_csv(d / "segments.csv", index=False)
    row: dict[str, Any] = {"events_step_tokens_per_s": step_throughput_from_events(ev)}
    agg = training_aggregates(tr, seg)
    if len(agg):
        a = agg.iloc[0].to_dict()
        row.update({f"train_{k}": v for k, v in a.items() if k not in ("host", "device")})
    st = post_warmup_power(tr, ev)
    if len(st):
        row.update(st.iloc[0].drop(["host", "device"]).to_dict())
    det = training_aggregates(tr, partition_trace(tr))
    if len(det):
        row["detector_mean_power_w"] = det["mean_power_w"].iat[0]
        row["detector_training_s"] = det["training_s"].iat[0]
    row["util50_mean_power_w"] = util50_window_power(tr)
    p = row.get("steady_mean_power_w")
    for k in ("train_mean_power_w", "detector_mean_power_w", "util50_mean_power_w"):
        if p and row.get(k) is not None:
            row[k.replace("mean_power_w", "over_steady")] = row[k] / p
    return row


def run_cell(work: Path, name: str, over: dict[str, Any], duration: float,
             compile_: bool) -> dict[str, Any]:
    from wattlife.contracts import read_events, read_trace

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
    code = ("import json,sys; from wattlife.config import settings; "
            "from wattlife.workloads import train_cell; "
            f"sys.exit(train_cell(settings(json.loads({json.dumps(json.dumps(cfg))})), "
            "'q', 'shared', True, "
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
    row = {"run": name, "model": w["model_config"], "task": w["task"], "compile": s.get("compile"),
           "experts_impl": s.get("experts_impl"), "wall_s": time.time() - t, "steps": s["steps"],
           "tokens_per_s": s["throughput"], "basis": s.get("throughput_basis"),
           "tokens_per_s_wall": s.get("throughput_wall"), "tflops_per_gpu": s.get("tflops_per_gpu"),
           "mfu": s.get("mfu"), "mfu_causal": s.get("mfu_causal"), "mfu_wall": s.get("mfu_wall"),
           "step_clock": s.get("step_clock"), "vocab_size": s.get("vocab_size"),
           "lora_target_modules": " ".join(s.get("lora_target_modules") or []),
           "lora_target_parameters": " ".join(s.get("lora_target_parameters") or []),
           "parameters": s["parameters"], "trained_parameters": s["trained_parameters"],
           "active_parameters": s["active_parameters"], "flops_per_token": s["flops_per_token"],
           "checkpoints": len(s.get("checkpoints", []))}
    try:
        row.update(window_columns(tr, read_events(d / "events.csv"), d))
    except Exception as exc:  # the run's files are kept; say what failed
        row["window_error"] = f"{type(exc).__name__}: {exc}"
    return row


def rederive(tarball: Path, csv: Path) -> pd.DataFrame:
    """`--rederive` (module docstring): the CSV's rows of the runs in `tarball` get the window
    columns today's code gives from their trace and events (`train_method` says which window);
    the tarball's phases.csv and segments.csv are re-derived, its raw files kept as they are."""
    from wattlife.attribution import attribute_files
    from wattlife.contracts import read_events, read_trace

    table = pd.read_csv(csv)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(tarball) as tar:
        members = [m.name for m in tar.getmembers() if m.isfile()]
        tar.extractall(tmp, filter="data")
        for run in sorted({m.split("/")[0] for m in members}):
            d = Path(tmp) / run
            if (d / "phases.csv").exists():
                attribute_files(d / "trace.csv", d / "events.csv", d / "phases.new.csv",
                                idle_split=True)
                (d / "phases.new.csv").replace(d / "phases.csv")
            cols = window_columns(read_trace(d / "trace.csv"), read_events(d / "events.csv"), d)
            for k, v in cols.items():
                if k not in table:
                    table[k] = pd.Series(dtype=type(v) if isinstance(v, str) else float)
                table.loc[table["run"] == run, k] = v
        with tarfile.open(tarball, "w:gz") as out:
            for m in members:
                out.add(Path(tmp) / m, arcname=m)
    table.to_csv(csv, index=False)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder of the runs (required unless --rederive)")
    ap.add_argument("--rederive", nargs=2, metavar=("TARBALL", "CSV"),
                    help="no GPU: re-derive a committed call's phases, segments and window "
                         "columns with today's code (module docstring)")
    ap.add_argument("--duration-s", type=float, default=60.0,
                    help="each run's length, default 60 (compiled: counted from the end of the "
                         "first, compiling step)")
    ap.add_argument("--compile", choices=["on", "off"], default="on",
                    help="torch.compile the model (default on)")
    ap.add_argument("--only", default=",".join(CELLS))
    ap.add_argument("--budget-s", type=float, default=0,
                    help="skip the runs that would end after this many seconds "
                         "(default 0: no limit)")
    ap.add_argument("--overhead-s", type=float, default=45.0,
                    help="a run's time beyond --duration-s, for --budget-s: start-up, compilation "
                         "(the schedule's clock starts after a compiled model's first step), "
                         "checkpoint, exit (default 45)")
    a = ap.parse_args()
    if a.rederive:
        rederive(Path(a.rederive[0]), Path(a.rederive[1]))
        return
    if not a.out:
        ap.error("--out is required (or --rederive TARBALL CSV)")
    out, work = out_dir(a.out), Path("/tmp/wl-pfi")
    from wattlife.workloads.datagen import make_text_corpus

    make_text_corpus(work / "shared" / "wikitext-gen", n_words=20_000 if DRY else 1_000_000)
    rows = []
    t0 = time.monotonic()
    for name in a.only.split(","):
        if a.budget_s and time.monotonic() - t0 > a.budget_s - a.duration_s - a.overhead_s:
            rows.append({"run": name, "error": f"not run: the {a.budget_s:.0f} s budget was spent"})
            pd.DataFrame(rows).to_csv(out / "pfi_uncapped.csv", index=False)  # say so in the table
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
    cols = ["run", "compile", "tokens_per_s", "events_step_tokens_per_s", "tokens_per_s_wall",
            "mfu", "mfu_causal", "train_mean_power_w", "steady_mean_power_w",
            "train_over_steady", "detector_over_steady", "util50_mean_power_w",
            "train_top10_power_w"]
    print(pd.DataFrame(rows).reindex(columns=cols).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
