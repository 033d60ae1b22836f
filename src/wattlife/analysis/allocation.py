"""How a cluster should split a global power cut across jobs (docs/FORMULAS.md,
"Allocation").

N workloads of M jobs are sampled from measured (or simulated) power-throughput curves. For a cut
c the jobs together must draw at most (1 - c) * sum P_max. Strategies:
- `equal`: job i's cut proportional to P_max,i;
- `pfi_measured`: cut proportional to (P_max,i / T_max,i) * PFI_i with the measured PFI (the
  study's Eq. 2);
- `pfi_predicted`: the same with PFI predicted from telemetry (leave-one-out linear model on the
  DRAM copy product), only when the curves carry telemetry;
- `power_per_throughput`: cut proportional to P_max,i / T_max,i (PFI-aware with every PFI set
  to 1; `absolute` objective only, it is `equal` otherwise): isolates what PFI adds to Eq. 2;
- `category`: cut proportional to P_max,i * median PFI of the job's category;
- `moe_ft_weighted`: the study's "MoE FT-weighted" heuristic, equal weight with the cut of MoE
  fine-tuning jobs doubled (only when a category is `moe_ft`);
- `telemetry`: cut proportional to P_max,i * (dram_active * util_mem) of the uncapped run;
- `oracle`: the split maximising total throughput given every job's curve.
Every weighted cut is clipped to the job's measured power range and the rest re-spread
(water-filling), so each strategy meets the budget exactly when it can. Heuristics are evaluated
on the piecewise-linear interpolation of the measured points (as the study does).

The oracle (default, `exact=False`) solves the problem on each curve's upper concave envelope: a
job may sit anywhere on a chord between two measured caps by alternating between them (a time
average), which is the LP  max sum_jk lam_jk T_jk  s.t.  sum_k lam_jk = 1, sum_jk lam_jk P_jk <= B.
Greedy by marginal throughput per watt over the envelope segments solves that LP exactly (the
tests check it against scipy's linprog), vectorised over workloads: one argsort per cut. Its
value is an upper bound of every interpolated allocation, so the oracle is never worse than any
strategy. At most one job per workload ends strictly inside an envelope segment that bridges a
non-concave dip (the only place time-sharing differs from interpolation); the summary counts those
workloads (`n_timeshared`). `exact=True` solves those workloads instead as a mixed-integer
program without time-sharing (piecewise-linear curves with segment binaries, HiGHS through scipy;
slow on noisy curves).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .allocation_library import (
    PRODUCTION_MIXES,
    JobLibrary,
    build_library,
    eval_curves,
    parse_mix,
    sample_workloads,
)
from .allocation_oracle import oracle

__all__ = ["PRODUCTION_MIXES", "STRATEGIES", "JobLibrary", "eval_curves", "allocate_files",
           "build_library", "oracle", "parse_mix", "sample_workloads", "simulate_allocation",
           "weighted_cut"]

STRATEGIES = ["equal", "pfi_measured", "pfi_predicted", "power_per_throughput", "category",
              "moe_ft_weighted", "telemetry", "oracle"]


def weighted_cut(weights: np.ndarray, room: np.ndarray, total_cut: np.ndarray,
                 iters: int = 80) -> np.ndarray:
    """cut_i = clip(lam * w_i, 0, room_i) with sum_i cut_i = total_cut per row (water-filling).

    weights, room: (N, M); total_cut: (N,). Rows that cannot meet the cut give every job its
    room."""
    w = np.maximum(weights, 1e-12)
    lo = np.zeros(len(total_cut))
    hi = np.max(room / w, axis=1)
    for _ in range(iters):
        mid = (lo + hi) / 2
        s = np.minimum(mid[:, None] * w, room).sum(1)
        over = s > total_cut
        hi = np.where(over, mid, hi)
        lo = np.where(over, lo, mid)
    result: np.ndarray = np.minimum(hi[:, None] * w, room)
    return result


def _strategies_to_run(strategies: list[str] | None, lib: JobLibrary
                       ) -> tuple[list[str], list[str]]:
    """(wanted, usable): the asked strategies with `equal` and `oracle` added, and those of them
    the library can weight (finite weights for every job)."""
    wanted = strategies or STRATEGIES
    bad = set(wanted) - set(STRATEGIES)
    if bad:
        raise InputError(f"unknown strategies {sorted(bad)}; choose from {STRATEGIES}")
    if "equal" not in wanted:
        wanted = ["equal"] + list(wanted)
    if "oracle" not in wanted:
        wanted = list(wanted) + ["oracle"]
    usable = [s for s in wanted if s == "oracle" or
              (s in lib.weights and np.isfinite(lib.weights[s]).all())]
    return wanted, usable


def _run_cuts(lib: JobLibrary, idx: np.ndarray, cuts: list[float], usable: list[str],
              mix: str, exact: bool, progress: bool) -> pd.DataFrame:
    """One row per workload x cut x strategy: its total throughput, power and budget."""
    from tqdm import tqdm

    n_workloads, n_jobs = idx.shape
    pmax, pmin = lib.pmax[idx], lib.pmin[idx]
    room = pmax - pmin
    total_pmax = pmax.sum(1)
    out = []
    bar = tqdm(total=len(cuts) * len(usable), desc=f"allocation ({mix})", unit="run",
               disable=not progress, leave=False)
    for c in cuts:
        budget = (1 - c) * total_pmax
        cut_total = c * total_pmax
        feasible = cut_total <= room.sum(1) + 1e-9
        for s in usable:
            n_ts = 0
            if s == "oracle":
                power, thr, n_ts = oracle(lib, idx, budget, exact=exact)
            else:
                power = pmax - weighted_cut(lib.weights[s][idx], room, cut_total)
                thr = eval_curves(lib, idx, power).sum(1)
            bar.update()
            out.append(pd.DataFrame({"workload": np.arange(n_workloads), "cut": c, "strategy": s,
                                     "total_throughput": thr, "throughput_per_job": thr / n_jobs,
                                     "power_w": power.sum(1), "budget_w": budget,
                                     "feasible": feasible, "n_timeshared": n_ts}))
    bar.close()
    return pd.concat(out, ignore_index=True)


def _relative_to_oracle(rows: pd.DataFrame, objective: str) -> None:
    """Add each row's throughput over the oracle's and its share of the equal->oracle gap."""
    ref = rows[rows["strategy"] == "oracle"].set_index(["workload", "cut"])["total_throughput"]
    eq = rows[rows["strategy"] == "equal"].set_index(["workload", "cut"])["total_throughput"]
    key = pd.MultiIndex.from_frame(rows[["workload", "cut"]])
    t, t_or, t_eq = (rows["total_throughput"].to_numpy(), ref.reindex(key).to_numpy(),
                     eq.reindex(key).to_numpy())
    rows["rel_to_oracle"] = t / t_or
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["gap_recovered"] = np.where(t_or - t_eq > 1e-12, (t - t_eq) / (t_or - t_eq), np.nan)
    rows["objective"] = objective


def _summary(rows: pd.DataFrame, objective: str, mix: str, exact: bool) -> pd.DataFrame:
    """Per cut x strategy: mean throughput per job, mean share of the oracle, and the share of
    the equal->oracle gap of the means."""
    summ = rows.groupby(["cut", "strategy"], as_index=False).agg(
        throughput_per_job=("throughput_per_job", "mean"), rel_to_oracle=("rel_to_oracle", "mean"),
        n_timeshared=("n_timeshared", "first"))
    eqm = summ[summ["strategy"] == "equal"].set_index("cut")["throughput_per_job"]
    orm = summ[summ["strategy"] == "oracle"].set_index("cut")["throughput_per_job"]
    gap = (orm - eqm).reindex(summ["cut"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = summ["throughput_per_job"].to_numpy() - eqm.reindex(summ["cut"]).to_numpy()
        summ["gap_recovered"] = np.where(gap > 1e-12, gain / gap, np.nan)
    summ["worse_than_equal"] = summ["gap_recovered"] < -1e-9
    summ["objective"] = objective
    summ["mix"] = mix
    summ["oracle"] = "milp (no time-sharing)" if exact else "concave envelope (time-sharing)"
    return summ


def simulate_allocation(curves: pd.DataFrame, cuts: list[float], n_workloads: int = 500,
                        n_jobs: int = 100, seed: int = 0, strategies: list[str] | None = None,
                        mix: str = "random", pfi: pd.DataFrame | None = None,
                        objective: str = "relative", exact: bool = False,
                        progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Returns (per workload x cut x strategy rows, summary per cut x strategy).

    objective: `relative` (each job's throughput over its uncapped throughput, so every job
    counts alike) or `absolute` (the curves' own units, e.g. tokens/s, as the study does)."""
    lib = build_library(curves, pfi, objective)
    rng = np.random.default_rng(seed)
    idx = sample_workloads(lib, n_workloads, n_jobs, mix, rng)
    wanted, usable = _strategies_to_run(strategies, lib)
    rows = _run_cuts(lib, idx, cuts, usable, mix, exact, progress)
    _relative_to_oracle(rows, objective)
    summ = _summary(rows, objective, mix, exact)
    summ["n_workloads"], summ["n_jobs"] = n_workloads, n_jobs
    summ["skipped"] = ",".join(s for s in wanted if s not in usable)
    # a non-monotone curve makes every number derived from the library suspect: every row says so
    rows["flags"] = summ["flags"] = "; ".join(f"{j}: {f}" for j, f in zip(lib.jobs, lib.flags,
                                                                            strict=True) if f)
    return rows, summ


def allocate_files(curves_path: str | Path, out: str | Path, cuts: list[float],
                   n_workloads: int, n_jobs: int, seed: int, strategies: list[str] | None,
                   mix: str, pfi_path: str | Path | None = None, objective: str = "relative",
                   exact: bool = False) -> pd.DataFrame:
    """`wattlife allocate`: the allocation of a curves file, its rows to `out` and its summary
    beside them (`<out>_summary.csv`); returns the summary."""
    from .curves import load_curves

    curves = load_curves(curves_path)
    pfi = pd.read_csv(pfi_path) if pfi_path else None
    rows, summ = simulate_allocation(curves, cuts, n_workloads, n_jobs, seed, strategies, mix, pfi,
                                     objective, exact)
    if "source" in curves.columns:
        src = ",".join(sorted(curves["source"].astype(str).unique()))
        rows["curves_source"] = summ["curves_source"] = src
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out, index=False)
    summ.to_csv(out.with_name(out.stem + "_summary.csv"), index=False)
    return summ
