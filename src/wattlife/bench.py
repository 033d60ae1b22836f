"""The package's own speed benchmarks, CPU only (`wattlife bench markers|attribution|allocate|all`).

Targets (docs/MEASUREMENTS.md and the issues): one marker <= 20 us host-side; attribution of
10 M trace rows x 1 M phase intervals <= 30 s and <= 4 GB; allocation of 500 workloads x 100
jobs x 9 cuts on noisy curves <= 60 s on 2 cores. `--scale` runs a fraction of the full size
(the tests use a small one). Measurements of real GPUs are scripts in `benchmarks/` (not part of
the package; see benchmarks/README.md).
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from .contracts import BACKWARD, FORWARD, OPTIMIZER, STEP


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def bench_markers(n: int = 200_000) -> dict[str, float]:
    from . import markers

    out = {}
    markers.reset()
    t = time.perf_counter()
    for _ in range(n):
        with markers.phase(FORWARD):
            pass
    out["noop_us_per_phase"] = (time.perf_counter() - t) / n * 1e6
    with tempfile.TemporaryDirectory() as d:
        markers.configure(Path(d) / "events.csv")
        t = time.perf_counter()
        for _ in range(n):
            with markers.phase(FORWARD):
                pass
        out["recording_us_per_phase"] = (time.perf_counter() - t) / n * 1e6
        markers.reset()
    return out


def bench_attribution(n_rows: int = 10_000_000, n_intervals: int = 1_000_000) -> dict[str, float]:
    """Synthetic GPU trace at 20 ms readings with n_intervals phases nested under steps."""
    from .attribution import attribute_energy

    rng = np.random.default_rng(0)
    t0 = 1_700_000_000_000_000_000
    period = 20_000_000
    t = t0 + np.arange(n_rows, dtype=np.int64) * period
    trace = pd.DataFrame({"t_ns": t, "host": "h", "device": "gpu0", "metric": "power_w",
                          "value": rng.uniform(100, 700, n_rows), "source": "sim"})
    span = n_rows * period
    n_steps = n_intervals // 4
    step_len = span // n_steps
    starts = t0 + np.arange(n_steps, dtype=np.int64) * step_len
    q = step_len // 3
    names = np.array([STEP, FORWARD, BACKWARD, OPTIMIZER])
    s = np.stack([starts, starts, starts + q, starts + 2 * q], 1).ravel()
    last = starts + step_len - 1000
    e = np.stack([last, starts + q, starts + 2 * q, last], 1).ravel()
    events = pd.DataFrame({"run_id": "bench", "host": "h", "rank": 0,
                           "phase": np.tile(names, n_steps), "start_ns": s, "end_ns": e,
                           "step": np.repeat(np.arange(n_steps), 4), "items": np.nan})
    out: dict[str, float] = {"trace_rows": n_rows, "intervals": len(events)}
    for label, method, response in (("integrate", "integrate", None),
                                    ("deconvolve", "deconvolve", None),
                                    ("deconvolve_estimated_response", "deconvolve", "estimate")):
        t1 = time.perf_counter()
        attribute_energy(trace, events, method=method, window_s=0.02, n_boot=100,
                         response=response)
        out[f"{label}_s"] = time.perf_counter() - t1
    out["peak_rss_gb"] = _peak_rss_gb()
    return out


def bench_allocate(n_workloads: int = 500, n_jobs: int = 100, n_cuts: int = 9) -> dict[str, float]:
    """The study's size on noisy curves: the 25 study jobs calibrated to their published PFIs
    with 1 % within-run noise (non-concave curves, the oracle's hard case), 500 workloads x 100
    jobs x 9 cuts, every strategy; and the same on the public A100 sweeps."""
    from .analysis.allocation import simulate_allocation
    from .analysis.calibration import calibrated_study_curves
    from .analysis.curves import read_emerald_sweep
    from .config import resource_path

    ref = resource_path("reference", "a100-emerald", "dvfs_sweep.csv")
    cuts = list(np.linspace(0, 0.4, n_cuts))
    out: dict[str, float] = {"workloads": n_workloads, "jobs": n_jobs, "cuts": n_cuts}
    noisy = calibrated_study_curves(noise=0.01, seed=1)
    t = time.perf_counter()
    _, summ = simulate_allocation(noisy, cuts, n_workloads, n_jobs, progress=False)
    out["study25_noisy_seconds"] = time.perf_counter() - t
    out["study25_noisy_timeshared_workloads_max"] = int(summ["n_timeshared"].max())
    t = time.perf_counter()
    simulate_allocation(read_emerald_sweep(ref), cuts, n_workloads, n_jobs, progress=False)
    out["a100_seconds"] = time.perf_counter() - t
    return out


def main(what: str, scale: float = 1.0) -> int:
    runs = {"markers": lambda: bench_markers(max(1000, int(200_000 * scale))),
            "attribution": lambda: bench_attribution(max(10_000, int(10_000_000 * scale)),
                                                     max(1000, int(1_000_000 * scale))),
            "allocate": lambda: bench_allocate(max(2, int(500 * scale)), 100, 9)}
    for name in (runs if what == "all" else [what]):
        res = runs[name]()
        print(f"{name}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in res.items()), flush=True)
    return 0
