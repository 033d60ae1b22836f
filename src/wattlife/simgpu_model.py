"""The simulated GPU's physical model: how a job's throughput and a GPU's power respond to a cap.

Pure (no hardware, no files, no package imports): the one definition of the simulated GPU that
the simulated sensor backend (`devices.simgpu`), the simulated power-cap backend
(`devices.powercap`), the simulated sweep (`sweeps.simulated`) and the calibration
(`analysis.calibration`) share. Every number it produces is labelled `sim` by its callers; it
never stands in for a measurement.

Model (per GPU; f = SM clock as a fraction of its maximum, 0 < f_min <= f <= 1):
- a step of the job mixes compute-bound time, which scales with 1/f, and memory-bound time, which
  does not (the memory clock holds when the power limit lowers the SM clock):
      step_time(f) = (1 - m) / f + m          (m: memory-bound share of the uncapped step)
      throughput(f) = 1 / step_time(f)        (relative to uncapped)
- power is static + memory + SM dynamic power. SM power scales with f**alpha (alpha folds the
  voltage-frequency curve) and with SM activity: full while compute-bound, `gamma` of it while
  stalled on memory; memory power with the memory-bound share of the time:
      busy(f)  = ((1 - m) / f) / step_time(f)            (compute-bound share of the time)
      P(f)     = p_static + p_mem * (1 - busy) + p_sm * f**alpha * (busy + gamma * (1 - busy))
- a power cap c picks the highest f whose P(f) <= c (the driver lowers clocks until it fits);
  below P(f_min) the cap cannot be met and the GPU runs at f_min.
The defaults of alpha, gamma and the static/memory power shares come from
`wattlife calibrate-sim results/reference/a100-emerald/dvfs_sweep.csv --tdp 400` (fit to the 48
measured A100 points: RMSE 0.85 % of uncapped throughput, worst point 2.7 %; see
results/reference/a100-emerald/sim_calibration.json), scaled to a 700 W part. With them a job's
PFI on the 200-700 W grid runs from 1.0 (m = 0) to 3.2 (m = 0.85); the paper's H200 range,
1.10-2.67, is m ~ 0.3-0.78.

Per-job calibration to a published PFI (the power-elasticity study's Table 6, and Table 9's 4-cap
PFI for its 8-GPU groups) lives in `wattlife.analysis.calibration` (`calibrate_to_pfi`,
`calibrate_job`, `calibrated_study_curves`): it picks m, and optionally `p_mem`, so that this
model's curve has the published PFI on the job's own cap grid. Its curves are labelled
`simulated/calibrated`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SimGpuModel:
    """Physical parameters of one simulated GPU type (defaults: an H200-class 700 W part)."""

    name: str = "Simulated H200 (sim)"
    tdp_w: float = 700.0
    min_cap_w: float = 200.0
    idle_w: float = 120.0
    p_static: float = 103.0  # 14.7 % of TDP (A100 fit)
    p_mem: float = 0.0  # the A100 fit puts no power on memory-bound time beyond gamma's SM share
    alpha: float = 1.27
    gamma: float = 0.38
    f_min: float = 0.25
    sm_clock_max_mhz: float = 1980.0
    mem_clock_mhz: float = 3201.0

    @property
    def cap_range_w(self) -> tuple[float, float]:
        """The power limits this GPU accepts, [min_cap_w, tdp_w] (its default limit is the TDP)."""
        return self.min_cap_w, self.tdp_w

    @property
    def p_sm(self) -> float:
        """SM power at full clock while compute-bound, chosen so that a fully compute-bound job
        at f = 1 draws exactly the TDP."""
        return self.tdp_w - self.p_static

    def step_time(self, f: np.ndarray, m: float) -> np.ndarray:
        return (1.0 - m) / f + m

    def power(self, f: np.ndarray | float, m: float, activity: float = 1.0) -> np.ndarray:
        """Board power at relative SM clock f for a job with memory-bound share m.

        `activity` (0..1) scales everything above idle: the fraction of time the job keeps the
        GPU busy at all (1 in a steady training step)."""
        f = np.asarray(f, dtype=float)
        busy = ((1.0 - m) / f) / self.step_time(f, m)
        loaded = (self.p_static + self.p_mem * (1 - busy)
                  + self.p_sm * f**self.alpha * (busy + self.gamma * (1 - busy)))
        return self.idle_w + activity * (loaded - self.idle_w)

    def clock_under_cap(self, cap_w: float, m: float) -> float:
        """Highest relative SM clock whose power fits under the cap (f_min if none does)."""
        grid = np.linspace(self.f_min, 1.0, 2001)
        ok = self.power(grid, m) <= cap_w + 1e-9
        return float(grid[ok].max()) if ok.any() else self.f_min

    def at_cap(self, cap_w: float, m: float) -> dict[str, float]:
        """Steady state of a job (memory-bound share m) under a per-GPU cap."""
        f = self.clock_under_cap(min(cap_w, self.tdp_w), m)
        return {"f": f, "throughput_rel": float(1.0 / self.step_time(np.array(f), m)),
                "power_w": float(self.power(f, m)), "sm_clock_mhz": f * self.sm_clock_max_mhz}


@dataclass
class SimJob:
    """A simulated training job: its memory-bound share, size and uncapped throughput."""

    name: str
    mem_share: float
    n_gpus: int = 8
    throughput_max: float = 1000.0
    throughput_unit: str = "tokens/s"
    category: str = "sim"
    noise: float = 0.005
    extra: dict[str, Any] = field(default_factory=dict)

    def telemetry(self) -> dict[str, float]:
        """Uncapped-run telemetry implied by the model: memory-bound jobs keep DRAM busy and
        spend time in copies; compute-bound jobs keep the tensor cores busy."""
        m = self.mem_share
        return {"dram_active": 0.15 + 0.7 * m, "util_mem": 20 + 70 * m,
                "tensor_active": 0.85 * (1 - m), "sm_active": 0.95 - 0.3 * m}
