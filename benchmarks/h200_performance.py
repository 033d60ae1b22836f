"""results/reference/h200/performance.csv rebuilt from the committed H200 runs' events (no GPU).

    PYTHONPATH=src python3 benchmarks/h200_performance.py [--ref results/reference/h200]

One row per run and throughput basis, each recomputed from the run's `step` events
(wattlife.analysis.performance): `step` = the steady steps' items over the sum of their
durations (GPU-timed where the events say `clock=cuda`; the first 3 steps left out), `wall` = all
steps' items over the training loop's span in the events (compilation, warm-up and pauses
included). MFU on the same basis with attention counted in full (`mfu`) and halved for causal
masking (`mfu_causal`); FLOPs per token and the peak from the run's summary, the attention FLOPs
from its summary or, for summaries written before they were recorded, from the model config.
The two Qwen3-1.7B cells of the first execution run (`execution/cells/qwen3-*`) were removed
from the reference (their start-up was recorded before the start-up phases existed).
"""

from __future__ import annotations

import argparse
import json
import tarfile
from pathlib import Path

import pandas as pd

from wattlife.analysis.performance import performance_table

# (run label, model, file: a summary.json, or a tarball and the member inside it)
RUNS = [
    ("pfi-uncapped/issue19 qwen3-30b-a3b-8l-pretrain", "qwen3-30b-a3b (8 layers)",
     "pfi-uncapped/issue19/pretrain_compiled_runs.tar.gz", "qwen3-30b-a3b-8l-pretrain/summary.json"),
    ("pfi-uncapped/issue19 qwen3-1.7b-pretrain", "qwen3-1.7b",
     "pfi-uncapped/issue19/pretrain_compiled_runs.tar.gz", "qwen3-1.7b-pretrain/summary.json"),
    ("pfi-uncapped/issue19 qwen3-1.7b-lora", "qwen3-1.7b",
     "pfi-uncapped/issue19/lora_dense_run.tar.gz", "qwen3-1.7b-lora/summary.json"),
    ("pfi-uncapped/issue19 qwen3-30b-a3b-8l-lora", "qwen3-30b-a3b (8 layers)",
     "pfi-uncapped/issue19/lora_moe_run.tar.gz", "qwen3-30b-a3b-8l-lora/summary.json"),
    # issue 26: compiled, 60 s of training after the compiling step (the LoRA kinds did not fit)
    *[(f"pfi-uncapped/issue26 {r}", m, "pfi-uncapped/issue26/pfi_uncapped_runs.tar.gz",
       f"{r}/summary.json") for r, m in (("qwen3-30b-a3b-8l-pretrain", "qwen3-30b-a3b (8 layers)"),
                                         ("qwen3-1.7b-pretrain", "qwen3-1.7b"))],
    ("execution/issue19 resnet50-local-ckpton", "resnet50",
     "execution/issue19/cells/resnet50-local-ckpton/work/summary.json", None),
    ("execution/issue19-compile qwen3-1.7b-local-ckpton", "qwen3-1.7b",
     "execution/issue19-compile/cells/qwen3-1.7b-local-ckpton/work/summary.json", None),
    # checkpoint on/off pairs (ResNet-50 100 steps; Qwen3-1.7B compiled, 50 steps)
    *[(f"execution/ckpt-pairs {m}-local-ckpt{c}", m,
       f"execution/ckpt-pairs/cells/{m}-local-ckpt{c}/work/summary.json", None)
      for m in ("resnet50", "qwen3-1.7b") for c in ("on", "off")],
    # config/gpu1.yaml through Snakemake (workflow/): sequence 1024, batch 4, no compile; 40 steps
    *[(f"workflow {w}/{st}/ckpt-{c}", "resnet50" if w == "resnet" else "qwen3-1.7b",
       f"workflow/runs/{w}/{st}/ckpt-{c}/r1/work/summary.json", None)
      for w in ("resnet", "qwen") for st in ("shared", "local") for c in ("on", "off")],
    # earlier references (eager experts, no compile)
    ("execution resnet50-local-ckpton", "resnet50",
     "execution/cells/resnet50-local-ckpton/work/summary.json", None),
    ("execution resnet50-local-ckptoff", "resnet50",
     "execution/cells/resnet50-local-ckptoff/work/summary.json", None),
    ("pfi-uncapped rerun qwen3-1.7b-pretrain", "qwen3-1.7b",
     "pfi-uncapped/qwen3-1.7b_runs.tar.gz", "qwen3-1.7b-pretrain/summary.json"),
    ("pfi-uncapped rerun qwen3-1.7b-lora", "qwen3-1.7b",
     "pfi-uncapped/qwen3-1.7b_runs.tar.gz", "qwen3-1.7b-lora/summary.json"),
    ("pfi-uncapped qwen3-30b-a3b-8l-lora", "qwen3-30b-a3b (8 layers)",
     "pfi-uncapped/qwen3-30b-a3b-8l-lora_run.tar.gz", "qwen3-30b-a3b-8l-lora/summary.json"),
]


def attention_flops(summary: dict, model: str) -> float | None:
    """Attention FLOPs per token of a causal LM run (the workload's own formula on the shipped
    model config, with the 8-layer override of the reduced MoE); None for other runs."""
    if "seq_len" not in summary:
        return None
    from types import SimpleNamespace

    from wattlife.config import resource_path
    from wattlife.workloads.causal_lm import attention_flops_per_token

    name = model.split(" (")[0]
    cfg = json.loads(resource_path("models", f"{name}.json").read_text())
    if "8 layers" in model:
        cfg["num_hidden_layers"] = 8
        cfg.pop("layer_types", None)
    return attention_flops_per_token(SimpleNamespace(**cfg), int(summary["seq_len"]))


def load(ref: Path, path: str, member: str | None, model: str = ""
         ) -> tuple[dict, pd.DataFrame, float | None]:
    """The run's summary, its events and its attention FLOPs per token."""
    if member is None:
        p = ref / path
        s, ev = json.loads(p.read_text()), pd.read_csv(p.parent.parent / "events.csv")
    else:
        with tarfile.open(ref / path) as tar:
            ev = pd.read_csv(tar.extractfile(member.replace("summary.json", "events.csv")))
            s = json.loads(tar.extractfile(member).read())
    return s, ev, attention_flops(s, model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="results/reference/h200", help="default results/reference/h200")
    a = ap.parse_args()
    ref = Path(a.ref)
    df = performance_table([(run, model, *load(ref, p, m, model)) for run, model, p, m in RUNS])
    df.to_csv(ref / "performance.csv", index=False, float_format="%.6g")
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
