"""Power-cap curves: steady-state extraction and readers of external sweep data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import CURVES_COLUMNS


def steady_state(values: np.ndarray, rule: str = "top10", warmup_frac: float = 0.2) -> float:
    """Steady-state value of per-step samples of one run.

    `top10` (the paper's rule): drop the warm-up, then the mean of the top 10% of the samples;
    `median` / `mean` of the samples after the warm-up. Callers pass training-phase samples only
    (no validation or checkpoint steps)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return float("nan")
    v = v[int(len(v) * warmup_frac):] if len(v) > 5 else v
    if rule == "top10":
        k = max(1, int(np.ceil(len(v) * 0.1)))
        return float(np.mean(np.sort(v)[-k:]))
    if rule == "median":
        return float(np.median(v))
    if rule == "mean":
        return float(np.mean(v))
    raise ValueError(f"steady-state rule must be top10, median or mean, got {rule!r}")


def read_emerald_sweep(path: str | Path, gpu_model: str = "A100") -> pd.DataFrame:
    """The Emerald AI A100 sweep CSV (see results/reference/a100-emerald) as a curves table."""
    d = pd.read_csv(path)
    need = ["Workload", "GPU power cap", "throughput", "total GPU power", "power per GPU"]
    missing = [c for c in need if c not in d.columns]
    if missing:
        raise ValueError(f"{path}: not an Emerald sweep file, missing columns {missing}")
    n_gpus = (d["total GPU power"] / d["power per GPU"]).round().astype(int)
    cat = d["Workload"].str.split("_").str[0].map({"ft": "finetune", "pt": "pretrain",
                                                  "infer": "inference"}).fillna("other")
    out = pd.DataFrame({"job": d["Workload"], "gpu_model": gpu_model, "n_gpus": n_gpus,
                        "cap_w": d["GPU power cap"].astype(float),
                        "throughput": d["throughput"].astype(float),
                        "throughput_unit": "job units/s", "power_w": d["total GPU power"],
                        "category": cat, "source": "measured"})
    return out[CURVES_COLUMNS + ["category", "source"]]


def load_curves(path: str | Path) -> pd.DataFrame:
    """A curves table in the contract, or an Emerald sweep file (recognised by its columns)."""
    head = pd.read_csv(path, nrows=0).columns
    if "Workload" in head and "GPU power cap" in head:
        return read_emerald_sweep(path)
    from ..contracts import read_curves

    return read_curves(path)
