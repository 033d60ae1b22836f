"""Predict PFI from the uncapped run's telemetry (the paper's predictor and its ablation).

Features (from the curves' telemetry columns, uncapped run):
- `dram_copy_product` = dram_active x util_mem/100 (the paper's best single signal);
- `arithmetic_intensity` = tensor_active / dram_active (compute per byte moved, a proxy);
- both; and job metadata (log2 n_gpus, category one-hot).
Linear models (scikit-learn); in-sample R², leave-one-out R²/RMSE/Spearman, and leave-one-cluster-
out R² with cluster = the `cluster` column (architecture x task) or else the category.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.model_selection import LeaveOneGroupOut, LeaveOneOut, cross_val_predict

from ..errors import InputError
from .curves import dram_copy_product

FEATURE_SETS = {
    "dram_copy_product": ["dram_copy_product"],
    "arithmetic_intensity": ["arithmetic_intensity"],
    "both": ["dram_copy_product", "arithmetic_intensity"],
    "metadata": ["log2_gpus", "cat_*"],
    "dram_copy_product+metadata": ["dram_copy_product", "log2_gpus", "cat_*"],
}


def loo_predictions(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Leave-one-out predictions of y from a single feature x (linear)."""
    x = np.asarray(x, float).reshape(-1, 1)
    result: np.ndarray = cross_val_predict(LinearRegression(), x, np.asarray(y, float),
                                           cv=LeaveOneOut())
    return result


def job_features(curves: pd.DataFrame, pfi: pd.DataFrame) -> pd.DataFrame:
    """One row per job: PFI and the features, from the uncapped (highest-cap) row's telemetry."""
    need = {"dram_active", "util_mem", "tensor_active"}
    if not need <= set(curves.columns):
        raise InputError(f"the curves have no telemetry columns {sorted(need)}; the predictor "
                         "needs an uncapped run's telemetry")
    top = curves.sort_values("cap_w").groupby(["job", "gpu_model"]).tail(1)
    df = top.merge(pfi[["job", "gpu_model", "pfi"]], on=["job", "gpu_model"])
    df["dram_copy_product"] = dram_copy_product(df["dram_active"], df["util_mem"])
    df["arithmetic_intensity"] = df["tensor_active"] / df["dram_active"].clip(lower=1e-3)
    df["log2_gpus"] = np.log2(df["n_gpus"])
    cat = df["category"] if "category" in df.columns else pd.Series("all", index=df.index)
    df = pd.concat([df, pd.get_dummies(cat, prefix="cat", dtype=float)], axis=1)
    df["cluster"] = df["cluster"] if "cluster" in df.columns else cat
    return df.dropna(subset=["pfi"]).reset_index(drop=True)


def _columns(df: pd.DataFrame, spec: list[str]) -> list[str]:
    cols = []
    for s in spec:
        cols += [c for c in df.columns if c.startswith(s[:-1])] if s.endswith("*") else [s]
    return cols


def predictor_table(features: pd.DataFrame) -> pd.DataFrame:
    """The ablation: one row per feature set."""
    y = features["pfi"].to_numpy(float)
    rows = []
    for name, spec in FEATURE_SETS.items():
        cols = _columns(features, spec)
        x = features[cols].to_numpy(float)
        model = LinearRegression().fit(x, y)
        loo = cross_val_predict(LinearRegression(), x, y, cv=LeaveOneOut())
        groups = features["cluster"].to_numpy()
        if len(set(groups)) >= 3:
            loco = cross_val_predict(LinearRegression(), x, y, cv=LeaveOneGroupOut(), groups=groups)
            loco_r2 = r2_score(y, loco)
        else:
            loco_r2 = np.nan
        rows.append({"features": name, "n_jobs": len(y), "n_features": len(cols),
                     "r2_in_sample": r2_score(y, model.predict(x)), "r2_loo": r2_score(y, loo),
                     "rmse_loo": float(np.sqrt(mean_squared_error(y, loo))),
                     "spearman_loo": float(stats.spearmanr(y, loo)[0]), "r2_loco": loco_r2,
                     "n_clusters": len(set(groups)),
                     "coef": ";".join(f"{c}={v:.4g}"
                                      for c, v in zip(cols, model.coef_, strict=True)),
                     "intercept": float(model.intercept_)})
    return pd.DataFrame(rows)


def predictor_files(curves_path: str | Path, pfi_path: str | Path, out: str | Path) -> pd.DataFrame:
    from ..contracts import read_table, write_csv
    from .curves import load_curves

    curves = load_curves(curves_path)
    pfi = read_table(pfi_path, ["job", "gpu_model", "pfi"])
    neg = pfi["pfi"] < 0
    if neg.any():
        i = int(np.flatnonzero(neg.to_numpy())[0])
        raise InputError(f"{pfi_path}:{i + 2}: job {pfi['job'].iloc[i]} has PFI "
                         f"{pfi['pfi'].iloc[i]:g} < 0 (its power and throughput moved apart: a "
                         f"curve to check, not a training target); {int(neg.sum())} such job(s)")
    feats = job_features(curves, pfi)
    _enough_jobs(feats, pfi, pfi_path, curves_path)
    df = predictor_table(feats)
    if "source" in curves.columns:
        df["source"] = ",".join(sorted(curves["source"].astype(str).unique()))
    write_csv(df, out)
    write_csv(feats, Path(out).with_name(Path(out).stem + "_features.csv"))
    return df


MIN_JOBS = 3


def _enough_jobs(feats: pd.DataFrame, pfi: pd.DataFrame, pfi_path: str | Path,
                 curves_path: str | Path) -> None:
    """One line instead of scikit-learn's message: the regression needs `MIN_JOBS` jobs with a
    finite PFI (a job measured at one cap has none) and finite telemetry at their highest cap."""
    bad = feats[["dram_active", "util_mem", "tensor_active", "n_gpus"]].isna().any(axis=1)
    if bad.any():
        raise InputError(f"{curves_path}: job(s) {sorted(feats.loc[bad, 'job'].astype(str))} have "
                         "no telemetry (dram_active, util_mem, tensor_active, n_gpus) at their "
                         "highest cap; the predictor needs it for every job")
    if len(feats) < MIN_JOBS:
        n_nan = int(pfi["pfi"].isna().sum())
        raise InputError(f"{pfi_path}: {len(feats)} job(s) with a finite PFI in both files "
                         f"({n_nan} of {len(pfi)} PFI rows are NaN, e.g. a job measured at one "
                         f"cap); the predictor needs at least {MIN_JOBS} (leave-one-out "
                         "regression)")
