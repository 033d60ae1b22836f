"""Power Flexibility Index (DESIGN.md, "Power Flexibility Index").

PFI = (1/N) sum_i (1 - P_i/P_max) / (1 - T_i/T_max) over the N capped points with T_i != T_max,
(T_max, P_max) being the uncapped run (the highest cap of the grid). With measured (noisy) points
"T_i != T_max" is read as: a point whose power AND throughput are both within `min_delta`
(default 1 %) of the uncapped run is one where the cap did not bind (the job drew less than the
cap anyway), so it is excluded like T_i = T_max; otherwise its ratio is noise over noise.
`min_delta=0` gives the literal formula. Alternatives:
- `pfi_area`: sum_i (1 - P_i/P_max) / sum_i (1 - T_i/T_max) (ratio of mean cuts; robust to a
  point whose throughput barely moves);
- `pfi_elastic`: 1 / epsilon of a constant-elasticity fit log T = a + epsilon log P.
Interval: Monte Carlo resampling of T and P from their within-run noise (`throughput_sd`,
`power_sd` columns); without them the interval is left empty (never invented).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ..contracts import PFI_COLUMNS, write_table


MIN_DELTA = 0.01


def pfi_value(power: np.ndarray, throughput: np.ndarray, caps: np.ndarray,
              min_delta: float = MIN_DELTA) -> float:
    """Eq. 1 for one job's points (any order); the highest cap is the uncapped reference."""
    ref = int(np.argmax(caps))
    pm, tm = power[ref], throughput[ref]
    bound = (np.abs(1 - power / pm) >= min_delta) | (np.abs(1 - throughput / tm) >= min_delta)
    mask = (np.arange(len(caps)) != ref) & (throughput != tm) & bound
    if not mask.any():
        return float("nan")
    return float(np.mean((1 - power[mask] / pm) / (1 - throughput[mask] / tm)))


def pfi_area(power: np.ndarray, throughput: np.ndarray, caps: np.ndarray) -> float:
    ref = int(np.argmax(caps))
    mask = np.arange(len(caps)) != ref
    dt = np.sum(1 - throughput[mask] / throughput[ref])
    return float(np.sum(1 - power[mask] / power[ref]) / dt) if dt != 0 else float("nan")


def pfi_elastic(power: np.ndarray, throughput: np.ndarray) -> float:
    ok = (power > 0) & (throughput > 0)
    if ok.sum() < 2:
        return float("nan")
    eps = np.polyfit(np.log(power[ok]), np.log(throughput[ok]), 1)[0]
    return float(1.0 / eps) if eps != 0 else float("nan")


def pfi_table(curves: pd.DataFrame, grid: list[float] | None = None, n_mc: int = 2000,
              seed: int = 0) -> pd.DataFrame:
    """One row per (job, gpu_model): PFI, its interval, the alternatives and the grid used."""
    rng = np.random.default_rng(seed)
    rows = []
    for (job, gpu), g in curves.groupby(["job", "gpu_model"], sort=True):
        g = g.dropna(subset=["throughput", "power_w"])
        if "status" in g.columns:
            g = g[g["status"].fillna("ok") == "ok"]
        if grid:
            g = g[np.isin(g["cap_w"].round(3), np.round(grid, 3))]
        g = g.sort_values("cap_w")
        caps = g["cap_w"].to_numpy(float)
        t = g["throughput"].to_numpy(float)
        p = g["power_w"].to_numpy(float)
        row = {"job": job, "gpu_model": gpu,
               "grid": ",".join(f"{c:g}" for c in caps)}
        if len(caps) < 2:
            row.update(pfi=np.nan, pfi_lo=np.nan, pfi_hi=np.nan, n_caps=0)
            rows.append(row)
            continue
        row["pfi"] = pfi_value(p, t, caps)
        ref = int(np.argmax(caps))
        row["n_caps"] = int(np.sum(((np.abs(1 - p / p[ref]) >= MIN_DELTA) |
                                    (np.abs(1 - t / t[ref]) >= MIN_DELTA)) & (caps != caps[ref])))
        row["pfi_area"] = pfi_area(p, t, caps)
        row["pfi_elastic"] = pfi_elastic(p, t)
        if n_mc > 0 and {"throughput_sd", "power_sd"} <= set(g.columns) and \
                g["throughput_sd"].notna().all():
            ts = rng.normal(t, g["throughput_sd"].to_numpy(float), (n_mc, len(t)))
            ps = rng.normal(p, g["power_sd"].to_numpy(float), (n_mc, len(p)))
            draws = np.array([pfi_value(ps[i], ts[i], caps) for i in range(n_mc)])
            draws = draws[np.isfinite(draws)]
            row["pfi_lo"], row["pfi_hi"] = np.percentile(draws, [2.5, 97.5])
        else:
            row["pfi_lo"] = row["pfi_hi"] = np.nan
        for col in ("category", "source"):
            if col in g.columns:
                row[col] = g[col].iloc[0]
        rows.append(row)
    df = pd.DataFrame(rows)
    return df[PFI_COLUMNS + [c for c in df.columns if c not in PFI_COLUMNS]]


def grid_sensitivity(curves: pd.DataFrame, subgrid: list[float]) -> pd.DataFrame:
    """PFI on the full grid next to PFI on a sub-grid (the paper's 4-point grid, say)."""
    full = pfi_table(curves, n_mc=0)[["job", "gpu_model", "pfi"]]
    sub = pfi_table(curves, grid=subgrid, n_mc=0)[["job", "gpu_model", "pfi", "grid"]]
    out = full.merge(sub, on=["job", "gpu_model"], suffixes=("", "_subgrid"))
    out["delta"] = out["pfi_subgrid"] - out["pfi"]
    return out


def compare_gpus(pfi: pd.DataFrame, gpu_a: str, gpu_b: str) -> dict[str, float]:
    """Spearman rank correlation of PFI between two GPU models over their common jobs."""
    a = pfi[pfi["gpu_model"] == gpu_a].set_index("job")["pfi"]
    b = pfi[pfi["gpu_model"] == gpu_b].set_index("job")["pfi"]
    common = a.index.intersection(b.index)
    if len(common) < 3:
        raise ValueError(f"need >= 3 jobs measured on both {gpu_a} and {gpu_b}, have {len(common)}")
    rho, p = stats.spearmanr(a[common], b[common])
    return {"spearman_rho": float(rho), "p_value": float(p), "n_jobs": int(len(common))}


def pfi_files(curves_path: str | Path, out: str | Path, grid: list[float] | None = None,
              n_mc: int = 2000, seed: int = 0) -> pd.DataFrame:
    from .curves import load_curves

    df = pfi_table(load_curves(curves_path), grid=grid, n_mc=n_mc, seed=seed)
    write_table(df, out, PFI_COLUMNS)
    return df
