"""The simulated power-cap sweep: simulated jobs in, a curves table out (pure; no hardware).

Each job (`SimJob`) runs on the simulated GPU model (`wattlife.simgpu_model.SimGpuModel`): per
cap of its grid, per-step throughput and power samples with within-run noise and a warm-up ramp,
reduced to a steady-state curve point. The demo and the tests sweep realistic jobs on a CPU
machine this way; every row says `source=sim`. A cap outside the model's range
(`SimGpuModel.cap_range_w`), or one the GPU refuses for the job (below the lowest power it
reaches, `CapRefused`), is recorded as a failed point and the sweep goes on.

The power limit is a ceiling: the noise on the per-step power (the job's demand fluctuation,
relative sd `SimJob.noise`) is clipped at the cap by the limiter, so every sample, and with it the
steady-state power per GPU, is at most the cap (no allowance for noise). Throughput noise is left
as it is.
`sweep_jobs` is the file-level entry (`wattlife sweep`): the typed `powercap` section in (the
CLI reads the config), curves CSV out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..analysis.curves import steady_state, steady_state_se
from ..config import PowerCapSettings, schema_default
from ..contracts import CURVES_COLUMNS, CURVES_TELEMETRY_COLUMNS, write_table
from ..devices.powercap import cap_backend
from ..errors import InputError
from ..simgpu_model import CapRefused, SimGpuModel, SimJob


def simulate_window(model: SimGpuModel, job: SimJob, cap_w: float, n_steps: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Per-step throughput and aggregate power of `job` under a per-GPU cap (simulated)."""
    st = model.at_cap(cap_w, job.mem_share)
    ramp = 1 - 0.5 * np.exp(-np.arange(n_steps) / max(n_steps * 0.05, 1))
    thr = job.throughput_max * st["throughput_rel"] * ramp * (1 + rng.normal(0, job.noise, n_steps))
    pwr = job.n_gpus * st["power_w"] * (1 + rng.normal(0, job.noise, n_steps))
    pwr = np.minimum(pwr, job.n_gpus * min(cap_w, model.tdp_w))  # the limit is a ceiling
    return thr, pwr, st


LARGE_JOB_GPUS = 16  # from this size a job sweeps `powercap.grid_large_w` (the paper's 4 caps)


def grid_for(job: SimJob, grid: list[float], large_grid: list[float] | None) -> list[float]:
    """The cap grid of one job: the 4-point grid for jobs of >= 16 GPUs when one is given."""
    return sorted(large_grid) if large_grid and job.n_gpus >= LARGE_JOB_GPUS else sorted(grid)


def sweep_simulated(jobs: list[SimJob], grid: list[float], model: SimGpuModel | None = None,
                    n_steps: int = schema_default("powercap", "window_steps"),
                    rule: str = schema_default("powercap", "steady_rule"),
                    warmup_frac: float = schema_default("powercap", "warmup_frac"),
                    seed: int = 0, large_grid: list[float] | None = None) -> pd.DataFrame:
    """Curves table (contract + telemetry + sd columns) for simulated jobs; a cap outside the
    model's range is a row with `status` failed and no numbers. `n_steps`, `rule`,
    `warmup_frac`: the schema's `powercap.window_steps`, `steady_rule`, `warmup_frac` unless
    given."""
    model = model or SimGpuModel()
    lo, hi = model.cap_range_w
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    todo = [(j, c) for j in jobs for c in grid_for(j, grid, large_grid)]
    for job, cap in tqdm(todo, desc="power-cap sweep (sim)", unit="cap", leave=False):
        row: dict[str, Any] = {"job": job.name, "gpu_model": model.name, "n_gpus": job.n_gpus,
                               "cap_w": cap, "throughput_unit": job.throughput_unit,
                               "category": job.category, "source": "sim"}
        if not lo <= cap <= hi:  # the words of the power-cap controller's range check
            row.update(throughput=np.nan, power_w=np.nan,
                       status=f"failed: cap {cap:g} W outside GPU 0's range [{lo:g}, {hi:g}] W")
            rows.append(row)
            continue
        try:
            thr, pwr, st = simulate_window(model, job, float(cap), n_steps, rng)
        except CapRefused as e:
            row.update(throughput=np.nan, power_w=np.nan, status=f"failed: {e}")
            rows.append(row)
            continue
        row.update(throughput=steady_state(thr, rule, warmup_frac),
                   power_w=steady_state(pwr, rule, warmup_frac),
                   throughput_sd=steady_state_se(thr, rule, warmup_frac),
                   power_sd=steady_state_se(pwr, rule, warmup_frac),
                   sm_clock_mhz=st["sm_clock_mhz"], status="ok")
        rows.append(row)
    df = pd.DataFrame(rows)
    tele = pd.DataFrame([{"job": j.name, **j.telemetry()} for j in jobs])
    top = df.groupby("job")["cap_w"].transform("max") == df["cap_w"]
    df = df.merge(tele, on="job", how="left")
    for col in CURVES_TELEMETRY_COLUMNS:
        df.loc[~top.to_numpy(), col] = np.nan  # telemetry is that of the uncapped run
    return df[CURVES_COLUMNS + [c for c in df.columns if c not in CURVES_COLUMNS]]


def simulated_jobs(powercap: PowerCapSettings) -> list[SimJob]:
    """The simulated jobs of `powercap.jobs` (name → SimJob settings)."""
    if not powercap.jobs:
        raise InputError("powercap.jobs: no jobs to sweep in the config")
    return [SimJob(name, **spec) for name, spec in powercap.jobs.items()]


def sweep_jobs(powercap: PowerCapSettings, out: str | Path, job: str | None = None
               ) -> pd.DataFrame:
    """`wattlife sweep`: the simulated jobs of `powercap.jobs` (or only `job`) swept on the
    section's grids, the curves written to `out`."""
    if not cap_backend(powercap.backend).simulated:
        raise InputError("sweep from config runs the simulated backend; real sweeps run through "
                         "the Snakemake rule `powercap_real` on a GPU node")
    jobs = simulated_jobs(powercap)
    if job:
        jobs = [j for j in jobs if j.name == job]
        if not jobs:
            raise InputError(f"powercap.jobs.{job}: no such job")
    df = sweep_simulated(jobs, list(powercap.grid_w), large_grid=list(powercap.grid_large_w),
                         n_steps=powercap.window_steps, rule=powercap.steady_rule,
                         warmup_frac=powercap.warmup_frac)
    write_table(df, out, CURVES_COLUMNS)
    return df
