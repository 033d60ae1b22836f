"""The job library of an allocation (`analysis.allocation`): every job's curve as padded arrays
(power ascending, throughput in the objective's units), the segments of its upper concave
envelope, the per-strategy weights, and the sampling of workloads from it (uniform, by task as
the production mix, or by category)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from .curves import dram_copy_product, monotone_flag
from .pfi import pfi_table

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
