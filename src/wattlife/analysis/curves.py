"""Power-cap curves: steady-state extraction and readers of external sweep data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..contracts import CURVES_COLUMNS
from ..errors import ContractError, InputError


def dram_copy_product(dram_active: Any, util_mem: Any) -> Any:
    """The PFI predictor's best single signal: DRAM bandwidth activity (fraction 0-1) x NVML
    memory-copy utilisation (percent 0-100) / 100. Scalars or arrays/Series alike."""
    return dram_active * util_mem / 100.0


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
    raise InputError(f"steady-state rule must be top10, median or mean, got {rule!r}")


def steady_state_se(values: np.ndarray, rule: str = "top10", warmup_frac: float = 0.2) -> float:
    """Standard error of `steady_state(values, rule, warmup_frac)`: what the curves'
    `throughput_sd` / `power_sd` columns hold and the PFI Monte Carlo draws from.

    sd / sqrt(n_eff) over the samples `steady_state` keeps after the warm-up (NaN dropped; sd with
    ddof 0), n_eff the number of samples its rule averages: max(0.1 n, 1) for `top10`, n for
    `mean`, 2n/pi for `median` (the median's asymptotic variance under normal noise)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return float("nan")
    v = v[int(len(v) * warmup_frac):] if len(v) > 5 else v
    n = len(v)
    n_eff = {"top10": max(n * 0.1, 1.0), "mean": float(n), "median": 2 * n / np.pi}.get(rule)
    if n_eff is None:
        raise InputError(f"steady-state rule must be top10, median or mean, got {rule!r}")
    return float(np.std(v) / np.sqrt(n_eff))


def read_emerald_sweep(path: str | Path, gpu_model: str = "A100") -> pd.DataFrame:
    """The Emerald AI A100 sweep CSV (see results/reference/a100-emerald) as a curves table."""
    d = pd.read_csv(path)
    need = ["Workload", "GPU power cap", "throughput", "total GPU power", "power per GPU"]
    missing = [c for c in need if c not in d.columns]
    if missing:
        raise ContractError(f"{path}: not an Emerald sweep file, missing columns {missing}")
    n_gpus = (d["total GPU power"] / d["power per GPU"]).round().astype(int)
    cat = d["Workload"].str.split("_").str[0].map({"ft": "finetune", "pt": "pretrain",
                                                  "infer": "inference"}).fillna("other")
    out = pd.DataFrame({"job": d["Workload"], "gpu_model": gpu_model, "n_gpus": n_gpus,
                        "cap_w": d["GPU power cap"].astype(float),
                        "throughput": d["throughput"].astype(float),
                        "throughput_unit": "job units/s", "power_w": d["total GPU power"],
                        "category": cat, "source": "measured"})
    return out[CURVES_COLUMNS + ["category", "source"]]


MONOTONE_TOL = 0.01  # a drop of more than 1% of the job's highest value marks a curve non-monotone


def monotone_flag(g: pd.DataFrame) -> str:
    """'' for a curve (one job's rows, ascending cap) whose throughput and power never fall by
    more than `MONOTONE_TOL` of their maximum as the cap rises; else the flag naming the job's
    first such point, e.g. 'non-monotone: throughput falls 45 % at 300 W'."""
    caps = g["cap_w"].to_numpy(float)
    for col in ("throughput", "power_w"):
        v = g[col].to_numpy(float)
        drop = np.maximum.accumulate(v) - v
        bad = drop > MONOTONE_TOL * max(v.max(), 1e-300)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            word = "power" if col == "power_w" else col
            return (f"non-monotone: {word} falls {drop[k] / max(v.max(), 1e-300):.0%} at "
                    f"{caps[k]:g} W")
    return ""


def validate_curves(df: pd.DataFrame, where: str = "curves", first_line: int | None = 2
                    ) -> pd.DataFrame:
    """Check a curves table before PFI, allocation or prediction use it; return it with a
    `monotone` column.

    Errors (ContractError naming file, line, job): a non-numeric or non-finite cap, throughput or
    power; a cap or power <= 0; a negative throughput; a cap listed twice for one job (and GPU
    model); throughput <= 0 at any measured cap (PFI divides by the top one's; a run that did no
    work is a failed point, which a status says). A curve whose throughput or power falls by more
    than `MONOTONE_TOL` of its maximum as the cap rises is kept but flagged (`monotone` False, and
    a `flags` column naming the job's first such point, `monotone_flag`) with a warning: PFI and
    allocation assume more power never means less work, and carry the flag into every row they
    derive from it."""
    from ..contracts import ContractError

    df = df.reset_index(drop=True)
    if not len(df):
        raise ContractError(f"{where}: header only, no data rows")
    pos = np.arange(len(df))  # each kept row's position in the file, for line numbers
    if "status" in df.columns:  # an assembled curve: failed or missing caps carry no numbers
        df, pos = _drop_unmeasured(df, pos, where)

    def line(i: int) -> str:
        if first_line is None:
            return f"{where} row {pos[i]}"
        return f"{where}:{pos[i] + first_line}"
    _check_numbers(df, line)
    key = ["job", "gpu_model"]
    _check_caps(df, line, key)
    _flag_monotone(df, key, where)
    return df


def _drop_unmeasured(df: pd.DataFrame, pos: np.ndarray, where: str
                     ) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows whose status is ok (and their positions in the file), with a warning listing the
    caps left out; an error when none is."""
    import warnings

    from ..contracts import ContractError

    st = df["status"].fillna("ok").astype(str)
    skip = st.ne("ok").to_numpy()
    if skip.any():
        left = df.loc[skip, ["job", "cap_w"]].assign(status=st[skip])
        listed = "; ".join(f"{j} {c:g} W ({s})"
                           for j, c, s in left.itertuples(index=False))
        warnings.warn(f"{where}: {int(skip.sum())} cap(s) not measured, left out: {listed}",
                      stacklevel=3)
        pos = pos[~skip]
        df = df.loc[~skip].reset_index(drop=True)
        if not len(df):
            raise ContractError(f"{where}: no measured cap (every row's status is not ok)")
    return df, pos


def _check_numbers(df: pd.DataFrame, line: Callable[[int], str]) -> None:
    """Cap, throughput and power as finite floats (in place) in their ranges, else an error
    naming the first bad row's line and job."""
    from ..contracts import ContractError

    for col in ("cap_w", "throughput", "power_w"):
        vals = pd.to_numeric(df[col], errors="coerce")
        bad = ~np.isfinite(vals.to_numpy(np.float64))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ContractError(f"{line(i)}: column {col} expects a finite number, got "
                                f"{df[col].iat[i]!r} (job {df['job'].iat[i]})")
        df[col] = vals.astype(float)
    checks = [("cap_w", df["cap_w"] <= 0, "a cap > 0 W"),
              ("power_w", df["power_w"] <= 0, "a power > 0 W (the job's realised GPU power)"),
              ("throughput", df["throughput"] < 0, "a throughput >= 0")]
    for col, bad, want in checks:
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ContractError(f"{line(i)}: column {col} expects {want}, got {df[col].iat[i]:g} "
                                f"(job {df['job'].iat[i]})")


def _check_caps(df: pd.DataFrame, line: Callable[[int], str], key: list[str]) -> None:
    """One row per cap of a job, and throughput > 0 at every cap, else an error naming the
    first bad row's line and job."""
    from ..contracts import ContractError

    dup = df.duplicated(key + ["cap_w"], keep="first")
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise ContractError(f"{line(i)}: job {df['job'].iat[i]} ({df['gpu_model'].iat[i]}) "
                            f"lists cap {df['cap_w'].iat[i]:g} W twice; expected one row per cap "
                            "(average repeats first)")
    top = df.groupby(key)["cap_w"].transform("max") == df["cap_w"]
    zero = df["throughput"] <= 0
    if zero.any():
        i = int(np.flatnonzero(zero.to_numpy())[0])
        if top.iat[i]:
            raise ContractError(f"{line(i)}: job {df['job'].iat[i]} has throughput "
                                f"{df['throughput'].iat[i]:g} at its top cap "
                                f"{df['cap_w'].iat[i]:g} W; expected > 0 (PFI and allocation "
                                "divide by it)")
        raise ContractError(f"{line(i)}: job {df['job'].iat[i]} has throughput "
                            f"{df['throughput'].iat[i]:g} at cap {df['cap_w'].iat[i]:g} W; "
                            "expected > 0 (a run that did no work is a failed point: give it "
                            "a status other than ok)")


def _flag_monotone(df: pd.DataFrame, key: list[str], where: str) -> None:
    """Add `monotone` and `flags` (in place): each job's `monotone_flag`, with a warning naming
    the non-monotone jobs."""
    import warnings

    order = df.sort_values(key + ["cap_w"], kind="stable")
    flags = order.groupby(key, sort=False)[["cap_w", "throughput", "power_w"]].apply(
        monotone_flag)
    df["monotone"] = [not flags.loc[(j, m)] for j, m in zip(df["job"], df["gpu_model"],
                                                            strict=True)]
    df["flags"] = [flags.loc[(j, m)] for j, m in zip(df["job"], df["gpu_model"], strict=True)]
    bad_jobs = sorted({f"{j} ({m})" for (j, m), f in flags.items() if f})
    if bad_jobs:
        warnings.warn(f"{where}: throughput or power falls as the cap rises (by more than "
                      f"{MONOTONE_TOL:.0%}) for {len(bad_jobs)} job(s): {', '.join(bad_jobs[:5])}"
                      f"{' ...' if len(bad_jobs) > 5 else ''}; column monotone is False for them",
                      stacklevel=3)


def load_curves(path: str | Path) -> pd.DataFrame:
    """A curves table in the contract, or an Emerald sweep file (recognised by its columns),
    validated (`validate_curves`)."""
    from ..contracts import ContractError, read_curves

    path = Path(path)
    if path.is_dir():
        raise ContractError(f"{path}: is a directory, expected a curves CSV file")
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    try:
        head = pd.read_csv(path, nrows=0).columns
    except pd.errors.EmptyDataError:
        raise ContractError(f"{path}: empty file (no header); expected columns "
                            f"{CURVES_COLUMNS}") from None
    if "Workload" in head and "GPU power cap" in head:
        df = read_emerald_sweep(path)
    else:
        df = read_curves(path)
    return validate_curves(df, str(path))
