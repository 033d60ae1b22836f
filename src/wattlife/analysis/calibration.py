"""Calibrate the simulated GPU's shared parameters on measured power-cap sweeps.

For each measured point the realised power fraction P_i/P_max fixes the model's relative clock f
(P(f)/P(1) is monotone in f); the model then predicts T(f)/T(1). Least squares over every point of
every job fits the shared alpha (voltage-frequency exponent), gamma (SM activity while stalled on
memory), the static and memory power shares, and one memory-bound share m per job.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..devices.simgpu import SimGpuModel

_F = np.linspace(0.05, 1.0, 400)


def _predict(model: SimGpuModel, m: float, p_rel: np.ndarray) -> np.ndarray:
    p = model.power(_F, m)
    t = 1.0 / model.step_time(_F, m)
    return np.interp(p_rel, p / p[-1], t / t[-1])


def normalised_points(curves: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (job, gpu), g in curves.dropna(subset=["power_w", "throughput"]).groupby(["job", "gpu_model"]):
        top = g.loc[g["cap_w"].idxmax()]
        rows.append(pd.DataFrame({"job": job, "p_rel": g["power_w"] / top["power_w"],
                                  "t_rel": g["throughput"] / top["throughput"]}))
    return pd.concat(rows, ignore_index=True)


def calibrate(curves: pd.DataFrame, tdp_w: float) -> tuple[SimGpuModel, pd.DataFrame, dict]:
    """Fit the shared parameters and per-job memory shares; returns (model, per-job m, fit)."""
    pts = normalised_points(curves)
    jobs = sorted(pts["job"].unique())
    base = SimGpuModel(name="calibrated (sim)", tdp_w=tdp_w)

    def build(x: np.ndarray) -> SimGpuModel:
        return replace(base, alpha=x[0], gamma=x[1], p_static=x[2] * tdp_w, p_mem=x[3] * tdp_w)

    def resid(x: np.ndarray) -> np.ndarray:
        model = build(x)
        out = []
        for j, job in enumerate(jobs):
            g = pts[pts["job"] == job]
            out.append(_predict(model, x[4 + j], g["p_rel"].to_numpy()) - g["t_rel"].to_numpy())
        return np.concatenate(out)

    x0 = np.concatenate([[1.6, 0.6, 0.14, 0.2], np.full(len(jobs), 0.3)])
    lo = np.concatenate([[0.5, 0.0, 0.02, 0.0], np.zeros(len(jobs))])
    hi = np.concatenate([[4.0, 1.0, 0.5, 0.5], np.full(len(jobs), 0.95)])
    fit = least_squares(resid, x0, bounds=(lo, hi))
    model = build(fit.x)
    per_job = pd.DataFrame({"job": jobs, "mem_share": fit.x[4:]})
    r = fit.fun
    return model, per_job, {"rmse_t_rel": float(np.sqrt(np.mean(r**2))),
                            "max_abs_t_rel": float(np.max(np.abs(r))), "n_points": int(len(r)),
                            "alpha": model.alpha, "gamma": model.gamma,
                            "static_share": fit.x[2], "mem_power_share": fit.x[3]}
