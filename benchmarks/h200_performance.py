"""results/reference/h200/performance.csv from the committed H200 runs' summaries (no GPU).

    PYTHONPATH=src python3 benchmarks/h200_performance.py [--ref results/reference/h200]

One row per run and throughput basis (`step`: training steps only; `wall`: the training loop's
wall time, evaluation / checkpoint pauses and compilation included), with MFU on the same basis.
Runs summarised before the step clock left pauses out report their summary's throughput as
`wall` and a `step` figure recomputed from their `step` events (wattlife.analysis.performance).
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
    # earlier references (vocabulary 151,936, eager experts, no compile)
    ("execution qwen3-1.7b-local-ckpton", "qwen3-1.7b",
     "execution/cells/qwen3-1.7b-local-ckpton/work/summary.json", None),
    ("execution qwen3-1.7b-local-ckptoff", "qwen3-1.7b",
     "execution/cells/qwen3-1.7b-local-ckptoff/work/summary.json", None),
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


def load(ref: Path, path: str, member: str | None) -> tuple[dict, pd.DataFrame]:
    """The run's summary and its events."""
    if member is None:
        p = ref / path
        return json.loads(p.read_text()), pd.read_csv(p.parent.parent / "events.csv")
    with tarfile.open(ref / path) as tar:
        ev = pd.read_csv(tar.extractfile(member.replace("summary.json", "events.csv")))
        return json.loads(tar.extractfile(member).read()), ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="results/reference/h200", help="default results/reference/h200")
    a = ap.parse_args()
    ref = Path(a.ref)
    df = performance_table([(run, model, *load(ref, p, m)) for run, model, p, m in RUNS])
    df.to_csv(ref / "performance.csv", index=False, float_format="%.6g")
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
