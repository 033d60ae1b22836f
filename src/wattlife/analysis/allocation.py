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

The job library (`JobLibrary`, `build_library`): every job's curve as padded arrays (power
ascending, throughput in the objective's units), the segments of its upper concave envelope, the
per-strategy weights, and the sampling of workloads from it (uniform, by task as the production
mix, or by category); `oracle` works on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import Bounds, LinearConstraint, milp

from ..errors import InputError
from .curves import dram_copy_product, monotone_flag
from .pfi import pfi_table

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


# The production mix (the study's Sec. 6: jobs sampled "according to the pretraining/fine-tuning
# ratio" of Hu et al., "Characterization of Large Language Model Development in the Datacenter",
# NSDI '24, on the Acme trace). Hu et al. give pretraining as 3.2 % (Kalos) and 0.9 % (Seren) of all
# jobs, holding 94.0 % and 69.5 % of GPU time; evaluation jobs are most of the rest and are not
# training jobs the study swept. Here pretraining gets Kalos's 3.2 % of the sampled jobs and every
# other sampled job is fine-tuning (ASSUMED: the count share of SFT jobs is only in Hu et al.'s
# Fig. 4, not in its text, so all non-pretraining jobs stand for fine-tuning). `production-seren`
# uses Seren's 0.9 %.
PRODUCTION_MIXES = {"production": {"pretrain": 0.032, "finetune": 0.968},
                    "production-kalos": {"pretrain": 0.032, "finetune": 0.968},
                    "production-seren": {"pretrain": 0.009, "finetune": 0.991}}


@dataclass
class JobLibrary:
    """Padded per-job curves: P[j, k] ascending, T[j, k] (objective units), hull segments."""

    jobs: list[str]
    category: np.ndarray
    task: np.ndarray  # pretrain / finetune where known (the production mix samples on it)
    P: np.ndarray
    T: np.ndarray
    pmax: np.ndarray
    tmax: np.ndarray
    pmin: np.ndarray
    hull_dp: np.ndarray  # (J, S) power length of each hull segment (0 for padding)
    hull_slope: np.ndarray  # (J, S)
    hull_bridged: np.ndarray  # (J, S) True where the hull skips a real point
    hull_p0: np.ndarray  # (J, S) start power of each hull segment
    weights: dict[str, np.ndarray]
    flags: list[str]  # per job: '' or `curves.monotone_flag`'s words for a non-monotone curve


def _upper_hull(p: np.ndarray, t: np.ndarray) -> list[int]:
    """Indices of the upper concave hull of points sorted by p (monotone chain)."""
    h: list[int] = []
    for i in range(len(p)):
        while len(h) >= 2:
            a, b = h[-2], h[-1]
            if (t[b] - t[a]) * (p[i] - p[a]) <= (t[i] - t[a]) * (p[b] - p[a]):
                h.pop()
            else:
                break
        h.append(i)
    return h


def _job_curves(curves: pd.DataFrame, objective: str) -> tuple[list[Any], ...]:
    """Per job with two or more usable points: (names, categories, tasks, powers, throughputs,
    uncapped telemetry, monotone flags), powers ascending."""
    jobs, cats, tasks, Ps, Ts, tele, flags = [], [], [], [], [], [], []
    for (job, gpu), g in curves.groupby(["job", "gpu_model"], sort=True):
        g = g.dropna(subset=["power_w", "throughput"]).sort_values("power_w")
        if "status" in g.columns:
            g = g[g["status"].fillna("ok") == "ok"]
        if len(g) < 2:
            continue
        jobs.append(job if curves["gpu_model"].nunique() == 1 else f"{job}@{gpu}")
        flags.append(monotone_flag(g.sort_values("cap_w")))
        cats.append(g["category"].iloc[0] if "category" in g.columns else "all")
        tasks.append(_task_of(g))
        p = g["power_w"].to_numpy(float)
        t = g["throughput"].to_numpy(float)
        ref = int(np.argmax(g["cap_w"].to_numpy(float)))
        Ps.append(p)
        Ts.append(t / t[ref] if objective == "relative" else t)
        top = g.loc[g["cap_w"].idxmax()]  # telemetry of the uncapped run
        tele.append(float(dram_copy_product(top["dram_active"], top["util_mem"]))
                    if {"dram_active", "util_mem"} <= set(g.columns) else np.nan)
    return jobs, cats, tasks, Ps, Ts, tele, flags


def _padded(Ps: list[np.ndarray], Ts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(J, K) power and throughput, each job's last point repeated to the longest curve."""
    K = max(len(p) for p in Ps)
    J = len(Ps)
    P = np.zeros((J, K))
    T = np.zeros((J, K))
    for j, (p, t) in enumerate(zip(Ps, Ts, strict=True)):
        P[j, :len(p)], T[j, :len(t)] = p, t
        P[j, len(p):], T[j, len(t):] = p[-1], t[-1]
    return P, T


def _hull_segments(Ps: list[np.ndarray], Ts: list[np.ndarray], S: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(J, S) power length, slope, bridged flag and start power of each upper-hull segment."""
    J = len(Ps)
    dp = np.zeros((J, S))
    slope = np.zeros((J, S))
    bridged = np.zeros((J, S), bool)
    p0 = np.zeros((J, S))
    for j, (p, t) in enumerate(zip(Ps, Ts, strict=True)):
        h = _upper_hull(p, t)
        for s, (a, b) in enumerate(zip(h[:-1], h[1:], strict=True)):
            dp[j, s] = p[b] - p[a]
            slope[j, s] = (t[b] - t[a]) / (p[b] - p[a]) if p[b] > p[a] else 0.0
            bridged[j, s] = b - a > 1
            p0[j, s] = p[a]
    return dp, slope, bridged, p0


def _strategy_weights(curves: pd.DataFrame, pfi: pd.DataFrame, jobs: list[str],
                      cat_arr: np.ndarray, pmax: np.ndarray, tmax: np.ndarray, tele: list[Any],
                      objective: str) -> dict[str, np.ndarray]:
    """Each weighted strategy's per-job weight (the cut is proportional to it)."""
    pfi_keys = (pfi["job"] if curves["gpu_model"].nunique() == 1
                else pfi["job"] + "@" + pfi["gpu_model"])
    pfi_by_job = dict(zip(pfi_keys, pfi["pfi"], strict=True))
    pfi_m = np.array([pfi_by_job.get(j, np.nan) for j in jobs])
    cat_med = pd.Series(pfi_m).groupby(cat_arr).median()
    weights = {"equal": pmax.copy(), "pfi_measured": pmax / tmax * pfi_m,
               "category": pmax * pd.Series(cat_arr).map(cat_med).to_numpy(float)}
    if objective == "absolute":  # with relative throughput T_max = 1: the same as equal
        weights["power_per_throughput"] = pmax / tmax
    if (cat_arr == "moe_ft").any():
        weights["moe_ft_weighted"] = pmax * np.where(cat_arr == "moe_ft", 2.0, 1.0)
    tele_arr = np.array(tele)
    if np.isfinite(tele_arr).all():
        from .predictor import loo_predictions

        weights["telemetry"] = pmax * tele_arr
        weights["pfi_predicted"] = pmax / tmax * loo_predictions(tele_arr, pfi_m)
    return weights


def build_library(curves: pd.DataFrame, pfi: pd.DataFrame | None = None,
                  objective: str = "relative") -> JobLibrary:
    """Curves table -> padded arrays and per-strategy weights."""
    if objective not in ("relative", "absolute"):
        raise InputError(f"objective must be relative or absolute, got {objective!r}")
    if pfi is None:
        pfi = pfi_table(curves, n_mc=0)
    jobs, cats, tasks, Ps, Ts, tele, flags = _job_curves(curves, objective)
    if not jobs:
        raise InputError("no job in the curves has two or more usable points")
    P, T = _padded(Ps, Ts)
    pmax = np.array([p[-1] for p in Ps])  # highest power = uncapped point
    tmax = np.array([t[int(np.argmax(p))] for p, t in zip(Ps, Ts, strict=True)])
    pmin = np.array([p[0] for p in Ps])
    dp, slope, bridged, p0 = _hull_segments(Ps, Ts, P.shape[1] - 1)
    cat_arr = np.array(cats)
    weights = _strategy_weights(curves, pfi, jobs, cat_arr, pmax, tmax, tele, objective)
    return JobLibrary(jobs, cat_arr, np.array(tasks), P, T, pmax, tmax, pmin, dp, slope, bridged,
                      p0, weights, flags)


def _task_of(g: pd.DataFrame) -> str:
    """pretrain / finetune of one job's rows (a `task` column, else its category's name)."""
    for col in ("task", "category"):
        if col in g.columns:
            v = str(g[col].iloc[0]).lower()
            if (v in ("pretrain", "pt") or v.startswith("pt") or v.endswith("_pt")
                    or "pretrain" in v):
                return "pretrain"
            if v in ("lora", "finetune", "ft", "ft_lora", "sft") or v.startswith("ft") or \
                    v.endswith("_ft") or "finetune" in v or "lora" in v:
                return "finetune"
    return "other"


def eval_curves(lib: JobLibrary, idx: np.ndarray, power: np.ndarray) -> np.ndarray:
    """Throughput of jobs idx at power (same shape), piecewise-linear, clamped to the range."""
    P, T = lib.P[idx], lib.T[idx]  # (..., K)
    x = np.clip(power, P[..., 0], P[..., -1])[..., None]
    k = np.clip((P <= x).sum(-1) - 1, 0, P.shape[-1] - 2)[..., None]
    p0 = np.take_along_axis(P, k, -1)
    p1 = np.take_along_axis(P, k + 1, -1)
    t0 = np.take_along_axis(T, k, -1)
    t1 = np.take_along_axis(T, k + 1, -1)
    frac = np.where(p1 > p0, (x - p0) / np.where(p1 > p0, p1 - p0, 1.0), 0.0)
    result: np.ndarray = (t0 + frac * (t1 - t0))[..., 0]
    return result


def parse_mix(mix: str) -> tuple[str, dict[str, float]] | None:
    """'random' -> None; 'production[-kalos|-seren]' -> ('task', shares); 'a=0.3,b=0.7' ->
    ('category', shares); 'task:pretrain=0.1,finetune=0.9' -> ('task', shares)."""
    if mix == "random":
        return None
    if mix in PRODUCTION_MIXES:
        return "task", dict(PRODUCTION_MIXES[mix])
    col, _, spec = mix.rpartition(":") if mix.startswith("task:") else ("category", "", mix)
    wanted = {}
    for part in spec.split(","):
        k, eq, v = part.partition("=")
        try:
            wanted[k.strip()] = float(v)
        except ValueError:
            raise InputError(f"mix {mix!r}: expected 'random', one of {sorted(PRODUCTION_MIXES)}, "
                             "category weights like 'dense=0.5,moe_pt=0.2,moe_ft=0.3' or task "
                             "weights like 'task:pretrain=0.3,finetune=0.7'") from None
    return col, wanted


def sample_workloads(lib: JobLibrary, n: int, m: int, mix: str,
                     rng: np.random.Generator) -> np.ndarray:
    """(n, m) job indices: uniform ('random'), by task ('production': Hu et al.'s shares) or
    weighted by category ('pretrain=0.3,...'); uniform among the jobs of a class."""
    spec = parse_mix(mix)
    if spec is None:
        prob = None
    else:
        col, wanted = spec
        labels = lib.task if col == "task" else lib.category
        have = {str(x) for x in labels}  # numpy strings print as np.str_(...) otherwise
        unknown = {k for k, v in wanted.items() if v > 0} - have
        if unknown:
            raise InputError(f"mix {mix!r} names {col} {sorted(unknown)} that no job has "
                             f"(have {', '.join(sorted(have))})")
        per = pd.Series(labels).value_counts()
        prob = np.array([wanted.get(c, 0.0) / per[c] for c in labels])
        if prob.sum() <= 0:
            raise InputError(f"mix {mix!r} gives every job probability 0")
        prob /= prob.sum()
    return rng.choice(len(lib.jobs), size=(n, m), p=prob)


def oracle(lib: JobLibrary, idx: np.ndarray, budget: np.ndarray, exact: bool = False
           ) -> tuple[np.ndarray, np.ndarray, int]:
    """Best split of `budget` (n,) over the jobs idx (n, m): (power, total throughput, count).

    Default: the exact optimum on the concave envelopes (time-sharing between two measured caps
    allowed), vectorised; count = workloads where a job time-shares across a non-concave dip.
    exact=True: those workloads solved as a MILP without time-sharing; count = MILPs solved."""
    n, m = idx.shape
    avail = budget - lib.pmin[idx].sum(1)
    dp = lib.hull_dp[idx].reshape(n, -1)
    slope = lib.hull_slope[idx].reshape(n, -1)
    take_ok = (slope > 0) & (dp > 0)
    key = np.where(take_ok, -slope, np.inf)
    order = np.argsort(key, axis=1, kind="stable")
    dps = np.take_along_axis(np.where(take_ok, dp, 0.0), order, 1)
    cum = np.cumsum(dps, 1)
    before = cum - dps
    got = np.clip(avail[:, None] - before, 0.0, dps)  # power given to each sorted segment
    alloc = np.zeros_like(dp)
    np.put_along_axis(alloc, order, got, 1)
    S = lib.hull_dp.shape[1]
    power = lib.pmin[idx] + alloc.reshape(n, m, S).sum(-1)
    t_min = lib.T[idx, 0]  # the lowest-power point is always on the envelope
    thr = t_min.sum(1) + (alloc * slope).sum(1)
    partial = (alloc > 1e-9) & (alloc < dp - 1e-9)
    bridged = lib.hull_bridged[idx].reshape(n, -1)
    timeshared = (partial & bridged).any(1)
    if not exact:
        return power, thr, int(timeshared.sum())
    for r in np.flatnonzero(timeshared):
        power[r] = _oracle_milp(lib, idx[r], budget[r])
        # HiGHS meets the budget row to its feasibility tolerance (~1e-7 relative); take any
        # excess off the job with the most room above its minimum so the budget holds exactly
        excess = power[r].sum() - budget[r]
        if excess > 0:
            jj = int(np.argmax(power[r] - lib.pmin[idx[r]]))
            power[r, jj] -= excess
        thr[r] = eval_curves(lib, idx[r][None], power[r][None]).sum()
    return power, thr, int(timeshared.sum())


def _oracle_milp(lib: JobLibrary, jobs: np.ndarray, budget: float) -> np.ndarray:
    """One instance as a small MILP over job *types* (identical jobs are interchangeable).

    Fixing every job's active segment leaves an LP with one coupling constraint, whose basic
    optimum has at most one job strictly between breakpoints. So: integers n_jk = how many jobs of
    type j sit at breakpoint k, plus one fractional job (type binary f_j, segment binaries z_js,
    weights lam_jk). Exact, and small enough to be fast."""
    types, counts = np.unique(jobs, return_counts=True)
    P, T = lib.P[types], lib.T[types]
    J, K = P.shape
    S = K - 1
    # variable layout: n (J*K) | lam (J*K) | f (J) | z (J*S)
    o_n, o_l, o_f, o_z = 0, J * K, 2 * J * K, 2 * J * K + J
    nv = o_z + J * S
    c = np.zeros(nv)
    c[o_n:o_l] = -T.ravel()
    c[o_l:o_f] = -T.ravel()
    A, lo, hi = [], [], []

    def add(coefs: dict[int, float], lb: float, ub: float) -> None:
        r = np.zeros(nv)
        for i, v in coefs.items():
            r[i] = v
        A.append(r)
        lo.append(lb)
        hi.append(ub)

    for j in range(J):
        add({**{o_n + j * K + k: 1.0 for k in range(K)}, o_f + j: 1.0}, counts[j], counts[j])
        add({**{o_l + j * K + k: 1.0 for k in range(K)}, o_f + j: -1.0}, 0, 0)
        add({**{o_z + j * S + s_: 1.0 for s_ in range(S)}, o_f + j: -1.0}, 0, 0)
        for k in range(K):
            co = {o_l + j * K + k: 1.0}
            if k >= 1:
                co[o_z + j * S + k - 1] = -1.0
            if k < S:
                co[o_z + j * S + k] = -1.0
            add(co, -np.inf, 0)
    add({o_f + j: 1.0 for j in range(J)}, 0, 1)
    add({**{o_n + i: v for i, v in enumerate(P.ravel())},
         **{o_l + i: v for i, v in enumerate(P.ravel())}}, -np.inf, budget)
    ub = np.concatenate([np.repeat(counts, K).astype(float), np.ones(J * K + J + J * S)])
    integ = np.concatenate([np.ones(J * K), np.zeros(J * K), np.ones(J + J * S)])
    res = milp(c, constraints=LinearConstraint(np.array(A), lo, hi), integrality=integ,
               bounds=Bounds(0, ub),
               options={"mip_rel_gap": 1e-9, "disp": False, "presolve": False})
    if res.x is None:
        raise RuntimeError(f"oracle MILP failed: {res.message}")
    n = np.round(res.x[o_n:o_l]).reshape(J, K).astype(int)
    lam = res.x[o_l:o_f].reshape(J, K)
    f = np.round(res.x[o_f:o_z]).astype(int)
    # hand the per-type powers back to the jobs of the instance (order does not matter)
    power = np.empty(len(jobs))
    for j, t in enumerate(types):
        pos = np.flatnonzero(jobs == t)
        vals = np.repeat(P[j], n[j])
        if f[j]:
            vals = np.append(vals, (lam[j] * P[j]).sum())
        power[pos] = vals
    return power
