"""Step throughput of this batch against the first H100 batch (../workflow-repeats), per cell:
each run's GPU `step` throughput from the tables' phases.csv, the difference of means with a
Welch t95 interval (`wattlife.analysis.repeats.welch_interval`).

    tar -xzf results/reference/h100/workflow-repeats-2/gpu1-workflow.tar.gz -C /tmp/h100r2
    PYTHONPATH=src python results/reference/h100/workflow-repeats-2/compare.py /tmp/h100r2
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from wattlife.analysis.repeats import welch_interval

FIRST = Path(__file__).resolve().parent.parent / "workflow-repeats" / "tables" / "phases.csv"


def step_throughput(path: Path) -> pd.DataFrame:
    """One row per run: its cell and its GPU step throughput (images/s, all ranks)."""
    d = pd.read_csv(path)
    d = d[(d["phase"] == "step") & (d["device_kind"] == "gpu")].drop_duplicates("run_id")
    return d[["storage", "checkpoint", "repeat", "throughput"]]


def main() -> None:
    first = step_throughput(FIRST)
    second = step_throughput(Path(sys.argv[1]) / "tables" / "phases.csv")
    print("storage,checkpoint,n_first,n_second,first,second,difference,lo,hi")
    for (storage, ckpt), g in first.groupby(["storage", "checkpoint"]):
        other = second[(second["storage"] == storage) & (second["checkpoint"] == ckpt)]
        out = welch_interval(other["throughput"].to_numpy(), g["throughput"].to_numpy())
        print(storage, ckpt, len(g), len(other), round(g["throughput"].mean()),
              round(other["throughput"].mean()), *(round(float(v)) for v in out[:3]), sep=",")


if __name__ == "__main__":
    main()
