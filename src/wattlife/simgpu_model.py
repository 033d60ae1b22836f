"""The simulated GPU's physical model: how a job's throughput and a GPU's power respond to a cap.

Pure (no hardware, no files, no package imports): the one definition of the simulated GPU that
the simulated sensor backend (`devices.simgpu`), the simulated power-cap backend
(`devices.powercap`), the simulated sweep (`sweeps.simulated`) and the calibration
(`analysis.calibration`) share. Every number it produces is labelled `sim` by its callers; it
never stands in for a measurement.

Model (per GPU; f = SM clock as a fraction of its maximum, g = memory clock as a fraction of
its maximum, 0 < f_min <= f <= 1, 0 < g_min <= g <= 1):
- a step of the job mixes compute-bound time, which scales with 1/f, and memory-bound time, which
  scales with 1/g (the memory clock holds, g = 1, unless the cap cannot be met at f_min):
      step_time(f, g) = (1 - m) / f + m / g      (m: memory-bound share of the uncapped step)
      throughput(f, g) = 1 / step_time(f, g)     (relative to uncapped)
- power is static + memory + SM dynamic power. SM power scales with f**alpha (alpha folds the
  voltage-frequency curve) and with SM activity: full while compute-bound, `gamma` of it while
  stalled on memory; memory power with the memory clock and the memory-bound share of the time:
      busy(f, g) = ((1 - m) / f) / step_time(f, g)        (compute-bound share of the time)
      P(f, g)    = p_static + p_mem * g * (1 - busy) + p_sm * f**alpha * (busy + gamma * (1 - busy))
- an enforced power limit is a ceiling on board power. A cap c picks the highest f whose
  P(f, 1) <= c (the driver lowers the SM clock until it fits); where even P(f_min, 1) > c the
  memory clock comes down next: the highest g >= g_min with P(f_min, g) <= c, at the throughput
  cost of the longer memory-bound time; where even P(f_min, g_min) > c the GPU refuses the cap
  (`CapRefused`; the simulated sweep records a failed point) -- the model never runs above it.
  P rises with g (memory power with the clock; at a lower g the SM also stalls longer).
  f_min = 345/1980 (the lowest SM clock H100/H200 parts list; ASSUMED for this part). g_min =
  0.25 is ASSUMED (no memory-clock throttling under a power cap is documented for HBM parts; it
  is the model's last resort before refusing, and the range the calibration to the published
  4-cap PFIs needs). With the default parameters (p_mem = 0) every m meets the
  200 W floor at g = 1 (P(f_min) <= 168 W).
The defaults of alpha, gamma and the static/memory power shares come from
`wattlife calibrate-sim results/reference/a100-emerald/dvfs_sweep.csv --tdp 400` (fit to the 48
measured A100 points: RMSE 0.85 % of uncapped throughput, worst point 2.7 %; see
results/reference/a100-emerald/sim_calibration.json), scaled to a 700 W part. With them a job's
PFI on the 200-700 W grid runs from 1.0 (m = 0) to about 3 (m = 0.85); the paper's H200 range,
1.10-2.67, is m ~ 0.25-0.78 (PFI under Eq. 1 as published).

Per-job calibration to a published PFI (the power-elasticity study's Table 6, and Table 9's 4-cap
PFI for its 8-GPU groups) lives in `wattlife.analysis.calibration` (`calibrate_to_pfi`,
`calibrate_job`, `calibrated_study_curves`): it picks m, and optionally `p_mem`, so that this
model's curve has the published PFI (Eq. 1 as published) on the job's own cap grid, or the
closest PFI a curve that obeys the cap reaches. Its curves are labelled
`simulated/calibrated`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InputError


class CapRefused(InputError):
    """The cap is below the lowest board power the simulated GPU reaches for this job."""


@dataclass(frozen=True)
class OperatingPoint:
    """Where the simulated GPU settles under a cap: SM and memory clock fractions, power, speed."""

    f: float
    g: float
    power_w: float
    throughput_rel: float


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
    f_min: float = 345.0 / 1980.0
    g_min: float = 0.25  # ASSUMED (see the module's docstring)
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

    def step_time(self, f: np.ndarray | float, m: float, g: np.ndarray | float = 1.0
                  ) -> np.ndarray:
        """Step time relative to the uncapped step at SM clock f and memory clock g."""
        return (1.0 - m) / np.asarray(f, dtype=float) + m / np.asarray(g, dtype=float)

    def power(self, f: np.ndarray | float, m: float, activity: float = 1.0,
              g: np.ndarray | float = 1.0) -> np.ndarray:
        """Board power at relative SM clock f (memory clock g) for a job with memory-bound
        share m.

        `activity` (0..1) scales everything above idle: the fraction of time the job keeps the
        GPU busy at all (1 in a steady training step)."""
        f = np.asarray(f, dtype=float)
        busy = ((1.0 - m) / f) / self.step_time(f, m, g)
        loaded = (self.p_static + self.p_mem * np.asarray(g, dtype=float) * (1 - busy)
                  + self.p_sm * f**self.alpha * (busy + self.gamma * (1 - busy)))
        result: np.ndarray = self.idle_w + activity * (loaded - self.idle_w)
        return result

    def lowest_power_w(self, m: float) -> float:
        """The lowest board power the GPU reaches for this job (f_min, g_min): caps below it
        are refused."""
        return float(self.power(self.f_min, m, g=self.g_min))

    def operating_point(self, cap_w: float, m: float) -> OperatingPoint:
        """Steady state of a job (memory-bound share m) under a per-GPU cap: the highest SM clock
        that fits at full memory clock; failing that, f_min and the highest memory clock that
        fits. Raises CapRefused where nothing fits (never a point above the cap)."""
        cap = min(cap_w, self.tdp_w) + 1e-9
        grid = np.linspace(self.f_min, 1.0, 2001)
        ok = self.power(grid, m) <= cap
        f, g = (float(grid[ok].max()), 1.0) if ok.any() else (self.f_min, np.nan)
        if not ok.any():
            gg = np.linspace(self.g_min, 1.0, 2001)
            okg = self.power(self.f_min, m, g=gg) <= cap
            if not okg.any():
                raise CapRefused(f"cap {cap_w:g} W is below the lowest power the simulated GPU "
                                 f"reaches for this job ({self.lowest_power_w(m):.1f} W at SM "
                                 f"clock {self.f_min:.3f} and memory clock {self.g_min:.2f} of "
                                 "maximum)")
            g = float(gg[okg].max())
        return OperatingPoint(f, g, float(self.power(f, m, g=g)),
                              float(1.0 / self.step_time(f, m, g)))

    def clock_under_cap(self, cap_w: float, m: float) -> float:
        """Highest relative SM clock whose power fits under the cap (`operating_point`'s f)."""
        return self.operating_point(cap_w, m).f

    def at_cap(self, cap_w: float, m: float) -> dict[str, float]:
        """Steady state of a job (memory-bound share m) under a per-GPU cap (CapRefused where
        the GPU cannot meet it)."""
        op = self.operating_point(cap_w, m)
        return {"f": op.f, "g": op.g, "throughput_rel": op.throughput_rel,
                "power_w": op.power_w, "sm_clock_mhz": op.f * self.sm_clock_max_mhz,
                "mem_clock_mhz": op.g * self.mem_clock_mhz}


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
