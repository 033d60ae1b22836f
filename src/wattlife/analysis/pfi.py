"""Power Flexibility Index (docs/FORMULAS.md, "Power Flexibility Index").

PFI = (1/N) sum_i (1 - P_i/P_max) / (1 - T_i/T_max) over the N capped points with T_i != T_max,
(T_max, P_max) being the uncapped run (the highest cap of the grid). Two readings, both in every
PFI table:
- `pfi_eq1`: Eq. 1 as the study publishes it (`pfi_value(..., min_delta=0)`): only points with
  T_i = T_max are skipped. The published PFIs are this; the calibration to them targets it.
- `pfi` (the suite's noise rule, `min_delta` = MIN_DELTA = 1 %): with measured (noisy) points a
  point whose power AND throughput are both within 1 % of the uncapped run is one where the cap
  did not bind (the job drew less than the cap anyway), so it is excluded like T_i = T_max;
  otherwise its ratio is noise over noise. The allocation's `pfi_measured` weights use it.
A row whose curve is non-monotone carries `monotone` False and the point in `flags`.
Alternatives:
- `pfi_area`: sum_i (1 - P_i/P_max) / sum_i (1 - T_i/T_max) (ratio of mean cuts; robust to a
  point whose throughput barely moves);
- `pfi_elastic`: 1 / epsilon of a constant-elasticity fit log T = a + epsilon log P.
Interval: Monte Carlo resampling of T and P from their standard errors (`throughput_sd`,
`power_sd` columns: the standard error of each steady-state value, `curves.steady_state_se`);
without them the interval is left empty (never invented).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ..config import Settings, resource_path
from ..contracts import PFI_COLUMNS, write_table
from ..errors import ContractError, InputError

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


def _grid_missing(g: pd.DataFrame, grid: list[float], option: str, job: str, gpu: str) -> None:
    """A cap of `option`'s grid without a valid point of the job: a ValueError naming it (a PFI
    on fewer caps than asked for would pass as the grid's)."""
    have = np.round(g["cap_w"].to_numpy(float), 3)
    missing = [c for c in grid if round(float(c), 3) not in have]
    if missing:
        raise InputError(f"{option} {','.join(f'{c:g}' for c in grid)}: job {job} ({gpu}) has no "
                         f"valid point at {','.join(f'{c:g}' for c in missing)} W (its caps: "
                         f"{','.join(f'{c:g}' for c in sorted(set(have)))}); give caps it has")


def pfi_table(curves: pd.DataFrame, grid: list[float] | None = None, n_mc: int = 2000,
              seed: int = 0, grid_option: str | None = None) -> pd.DataFrame:
    """One row per (job, gpu_model): PFI under the noise rule (`pfi`, with its interval) and
    under Eq. 1 as published (`pfi_eq1`), the alternatives and the grid used (and `monotone` /
    `flags`, when the curves carry validate_curves' flags). With `grid_option` (the option that
    gave `grid`), a cap of the grid a job lacks is an error naming it, not dropped."""
    rng = np.random.default_rng(seed)
    rows = []
    for (job, gpu), g in curves.groupby(["job", "gpu_model"], sort=True):
        # validate_curves' per-job flag, taken before any cap is left out: a PFI of a curve that
        # falls as the cap rises is suspect, and its row says so
        mono = bool(g["monotone"].all()) if "monotone" in g.columns else None
        flag = str(g["flags"].astype(object).fillna("").iloc[0]) if "flags" in g.columns else None
        g = g.dropna(subset=["throughput", "power_w"])
        if "status" in g.columns:
            g = g[g["status"].fillna("ok") == "ok"]
        if grid:
            if grid_option:
                _grid_missing(g, grid, grid_option, job, gpu)
            g = g[np.isin(g["cap_w"].round(3), np.round(grid, 3))]
        g = g.sort_values("cap_w")
        caps = g["cap_w"].to_numpy(float)
        t = g["throughput"].to_numpy(float)
        p = g["power_w"].to_numpy(float)
        row = {"job": job, "gpu_model": gpu,
               "grid": ",".join(f"{c:g}" for c in caps)}
        if mono is not None:
            row["monotone"] = mono
        if flag is not None:
            row["flags"] = flag
        if len(caps) < 2:
            row.update(pfi=np.nan, pfi_eq1=np.nan, pfi_lo=np.nan, pfi_hi=np.nan, n_caps=0)
            rows.append(row)
            continue
        row["pfi"] = pfi_value(p, t, caps)
        row["pfi_eq1"] = pfi_value(p, t, caps, min_delta=0.0)
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
    sub = pfi_table(curves, grid=subgrid, n_mc=0, grid_option="--subgrid")[
        ["job", "gpu_model", "pfi", "grid"]]
    out = full.merge(sub, on=["job", "gpu_model"], suffixes=("", "_subgrid"))
    out["delta"] = out["pfi_subgrid"] - out["pfi"]
    return out


def compare_gpus(pfi: pd.DataFrame, gpu_a: str, gpu_b: str) -> dict[str, float]:
    """Spearman rank correlation of PFI between two GPU models over their common jobs."""
    a = pfi[pfi["gpu_model"] == gpu_a].set_index("job")["pfi"]
    b = pfi[pfi["gpu_model"] == gpu_b].set_index("job")["pfi"]
    common = a.index.intersection(b.index)
    if len(common) < 3:
        raise InputError(f"need >= 3 jobs measured on both {gpu_a} and {gpu_b}, have {len(common)}")
    rho, p = stats.spearmanr(a[common], b[common])
    return {"spearman_rho": float(rho), "p_value": float(p), "n_jobs": int(len(common))}


def study_labels(s: Settings) -> pd.DataFrame:
    """job (a pfi_matrix cell name) -> paper_job, hardware, set, from the cells of the typed
    config `s` (a cell without `hardware` has `powercap.hardware`, without `set` main)."""
    hw = s.powercap.hardware
    cells = s.pfi_matrix.cells if s.pfi_matrix is not None else {}
    rows = [{"job": k, "paper_job": c.paper_job,
             "hardware": hw if c.hardware is None else c.hardware,
             "set": "main" if c.set is None else c.set}
            for k, c in cells.items()]
    return pd.DataFrame(rows, columns=["job", "paper_job", "hardware", "set"])


def pfi_files(curves_path: str | Path, out: str | Path, grid: list[float] | None = None,
              n_mc: int = 2000, seed: int = 0, labels: pd.DataFrame | None = None
              ) -> pd.DataFrame:
    """PFI table of a curves file; with the study's labels (a `paper_job` column in the curves,
    or `labels`, `study_labels` of a config's cells) the published values and the 4-cap sub-grid
    PFI go beside it."""
    from .curves import load_curves

    curves = load_curves(curves_path)
    if labels is not None and "paper_job" not in curves.columns:
        given = [c for c in ("hardware", "set") if c in curves.columns]
        curves = curves.merge(labels.drop(columns=given),
                              on="job", how="left")
    df = pfi_table(curves, grid=grid, n_mc=n_mc, seed=seed, grid_option="--grid")
    if "paper_job" in curves.columns and curves["paper_job"].notna().any():
        df = with_published(df, curves)
    write_table(df, out, PFI_COLUMNS)
    return df


def grid_sensitivity_files(curves_path: str | Path, out: str | Path, subgrid: list[float]
                           ) -> pd.DataFrame:
    """`wattlife pfi --subgrid`: PFI on the full grid and on `subgrid`, written to `out`."""
    from ..contracts import write_csv
    from .curves import load_curves

    sens = grid_sensitivity(load_curves(curves_path), subgrid)
    write_csv(sens, out)
    return sens


# --- the study's published values ---------------------------------------------------------------

STUDY_DIR = resource_path("reference", "pfi-study")
SUBGRID_4CAP = [200.0, 500.0, 600.0, 700.0]  # the study's coarse grid (Table 9)
# CSV setting column -> pfi_matrix cell key
STUDY_SETTINGS = {"seq_len": "seq_len", "batch_size": "batch_size", "ep": "expert_parallel",
                  "compile": "compile", "grad_ckpt": "activation_checkpointing"}


def read_study_jobs(path: str | Path | None = None) -> pd.DataFrame:
    """The study's 25 headline sweep groups (Table 6/9), one row each, `caps` as a float list."""
    p = Path(path) if path else STUDY_DIR / "pfi-study-jobs.csv"
    d = pd.read_csv(p)
    need = {"job_id", "task", "n_gpus", "cap_grid_w", "pfi", "pfi_ci_lo", "pfi_ci_hi", "pfi_4cap",
            "n_runs"}
    missing = need - set(d.columns)
    if missing:
        raise ContractError(f"{p}: not the study's job table, missing columns {sorted(missing)}")
    d["caps"] = d["cap_grid_w"].map(lambda s: [float(x) for x in str(s).split(";")])
    return d


def read_study_validation(path: str | Path | None = None) -> pd.DataFrame:
    """The study's held-out (Table 7) and H100-matched (Table 8) groups, one row each."""
    p = Path(path) if path else STUDY_DIR / "pfi-study-validation.csv"
    d = pd.read_csv(p)
    if not {"job_id", "role", "pfi_h200", "pfi_h100"} <= set(d.columns):
        raise ContractError(f"{p}: not the study's validation table (job_id, role, pfi_h200, "
                         f"pfi_h100)")
    return d


def published_pfi(jobs: pd.DataFrame | None = None, validation: pd.DataFrame | None = None
                  ) -> pd.DataFrame:
    """One row per (paper_job, hardware): the published PFI, its 95 % interval and 4-cap PFI."""
    j = read_study_jobs() if jobs is None else jobs
    v = read_study_validation() if validation is None else validation
    rows = [pd.DataFrame({"paper_job": j["job_id"], "hardware": "h200", "pfi_published": j["pfi"],
                          "pfi_published_lo": j["pfi_ci_lo"], "pfi_published_hi": j["pfi_ci_hi"],
                          "pfi_4cap_published": j["pfi_4cap"], "n_runs_published": j["n_runs"]})]
    val = v[v["role"] != "main_study_h100_match"]
    rows.append(pd.DataFrame({"paper_job": val["job_id"], "hardware": "h200",
                              "pfi_published": val["pfi_h200"],
                              "n_runs_published": val["n_runs_h200"]}))
    h = v[v["pfi_h100"].notna()]
    rows.append(pd.DataFrame({"paper_job": h["job_id"], "hardware": "h100",
                              "pfi_published": h["pfi_h100"],
                              "n_runs_published": h["n_runs_h100"]}))
    return pd.concat(rows, ignore_index=True)


def with_published(pfi: pd.DataFrame, curves: pd.DataFrame | None = None,
                   published: pd.DataFrame | None = None) -> pd.DataFrame:
    """The PFI table with the published value beside the measured one wherever `paper_job` is set.

    Adds pfi_published (+ its 95 % interval and run count), the measured PFI on the 4-cap
    sub-grid (200/500/600/700 W) for groups swept on the 6-cap grid, the published 4-cap PFI, and
    the differences. `paper_job` and `hardware` come from the PFI table (or the curves)."""
    out = pfi.copy()
    if curves is not None:
        for col in ("paper_job", "hardware"):
            if col in curves.columns and col not in out.columns:
                out = out.merge(curves.groupby(["job", "gpu_model"], as_index=False)[col].first(),
                                on=["job", "gpu_model"], how="left")
    if "paper_job" not in out.columns:
        return out
    if "hardware" not in out.columns:
        out["hardware"] = "h200"
    out["hardware"] = out["hardware"].fillna("h200")
    pub = published_pfi() if published is None else published
    out = out.merge(pub, on=["paper_job", "hardware"], how="left")
    if curves is not None:
        sub = pfi_table(curves, grid=SUBGRID_4CAP, n_mc=0)[["job", "gpu_model", "pfi", "pfi_eq1",
                                                            "grid"]]
        six = out["grid"].astype(str).str.count(",") >= 5
        sub = sub.rename(columns={"pfi": "pfi_4cap", "pfi_eq1": "pfi_4cap_eq1",
                                  "grid": "grid_4cap"})
        out = out.merge(sub, on=["job", "gpu_model"], how="left")
        out.loc[~six.to_numpy(), ["pfi_4cap", "pfi_4cap_eq1", "grid_4cap"]] = np.nan
    out["pfi_minus_published"] = out["pfi"] - out["pfi_published"]
    if "pfi_eq1" in out.columns:
        out["pfi_eq1_minus_published"] = out["pfi_eq1"] - out["pfi_published"]
    if "pfi_4cap" in out.columns:
        out["pfi_4cap_minus_published"] = out["pfi_4cap"] - out["pfi_4cap_published"]
        out["pfi_4cap_eq1_minus_published"] = out["pfi_4cap_eq1"] - out["pfi_4cap_published"]
    return out
