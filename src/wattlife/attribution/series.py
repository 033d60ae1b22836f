"""One device's readings as a cumulative-energy series (the input of every estimator).

Each device's cumulative energy E(t) comes from its power readings, each taken as the average over
the interval since the previous reading (what NVML's window-averaged samples, RAPL deltas and the
utilisation-based estimate all are), or from its energy counter where it has no power readings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contracts import ENERGY_J, POWER_LIMIT_W, POWER_W, device_kind

ATTRIBUTED_KINDS = ("gpu", "cpu", "dram")


@dataclass
class DeviceSeries:
    """One device's readings and cumulative energy E at the reading times."""

    host: str
    device: str
    t_ns: np.ndarray
    energy_j: np.ndarray
    power_w: np.ndarray | None  # window-average power readings, if the device has them
    source: str
    max_power_w: float = np.inf  # upper bound of a phase's mean power in deconvolution
    floor_w: float = 0.0  # the lowest power the device was seen drawing (lower bound of a phase's)

    @property
    def upper_w(self) -> float:
        """The highest mean power a phase can have: the power-limit bound where the trace has one,
        else the highest power the device was seen drawing."""
        if np.isfinite(self.max_power_w):
            return float(self.max_power_w)
        if self.power_w is not None:
            return float(np.max(self.power_w))
        dt = np.diff(self.t_ns) / 1e9
        ok = dt > 0
        return float(np.max(np.diff(self.energy_j)[ok] / dt[ok])) if ok.any() else np.inf

    def rel(self, t_ns: np.ndarray) -> np.ndarray:
        """Seconds-scale float times relative to the first reading (epoch ns in float64 would
        lose precision: 2**-52 * 1.7e18 ns is hundreds of ns)."""
        return (np.asarray(t_ns, dtype=np.int64) - self.t_ns[0]).astype(np.float64)

    def energy_at(self, t_ns: np.ndarray) -> np.ndarray:
        return np.interp(self.rel(t_ns), self.rel(self.t_ns), self.energy_j)

    @property
    def spacing_s(self) -> float:
        return float(np.median(np.diff(self.t_ns))) / 1e9 if len(self.t_ns) > 1 else float("nan")


def device_series(trace: pd.DataFrame) -> list[DeviceSeries]:
    """Cumulative-energy series of every GPU/CPU/DRAM device in a trace."""
    out = []
    kinds = trace["device"].map(device_kind)
    sel = trace[kinds.isin(ATTRIBUTED_KINDS) & trace["metric"].isin([POWER_W, ENERGY_J])]
    limits = trace[trace["metric"] == POWER_LIMIT_W].groupby(["host", "device"])["value"].max()
    for (host, dev), g in sel.groupby(["host", "device"], sort=True):
        limit = float(limits.get((host, dev), np.inf))
        power = g[g["metric"] == POWER_W]
        if len(power) >= 2:
            power = power.sort_values("t_ns", kind="stable").drop_duplicates("t_ns", keep="last")
            t = power["t_ns"].to_numpy(np.int64)
            p = power["value"].to_numpy(np.float64)
            e = np.concatenate([[0.0], np.cumsum(p[1:] * np.diff(t) / 1e9)])
            src = power["source"].mode().iat[0]
            # a burst may exceed the limit (the H200's 20 ms readings reach ~1.3x it): the highest
            # reading says how far this device went
            bound = max(limit, float(p.max())) if np.isfinite(limit) else np.inf
            floor = max(float(p[1:].min()), 0.0)  # p[0] has no window (not integrated)
            out.append(DeviceSeries(host, dev, t, e, p, src, bound, floor))
            continue
        energy = g[g["metric"] == ENERGY_J].sort_values("t_ns", kind="stable")
        if len(energy) >= 2:
            t = energy["t_ns"].to_numpy(np.int64)
            e = energy["value"].to_numpy(np.float64)
            dt = np.diff(t) / 1e9
            ok = dt > 0
            floor = max(float(np.min(np.diff(e)[ok] / dt[ok])), 0.0) if ok.any() else 0.0
            out.append(DeviceSeries(host, dev, t, e - e[0], None, energy["source"].mode().iat[0],
                                    floor_w=floor))
    return out


def too_few_readings(trace: pd.DataFrame, series: list[DeviceSeries]) -> pd.DataFrame:
    """The GPU/CPU/DRAM devices of `trace` that `device_series` could not make a series of (fewer
    than 2 power or energy readings): host, device, count (readings), source."""
    kinds = trace["device"].map(device_kind)
    sel = trace[kinds.isin(ATTRIBUTED_KINDS) & trace["metric"].isin([POWER_W, ENERGY_J])]
    have = {(x.host, x.device) for x in series}
    rows = [{"host": h, "device": d, "count": len(g), "source": g["source"].mode().iat[0]}
            for (h, d), g in sel.groupby(["host", "device"], sort=True) if (h, d) not in have]
    return pd.DataFrame(rows, columns=["host", "device", "count", "source"])


def idle_power(series: DeviceSeries, start_ns: int, end_ns: int) -> float:
    """Mean power of a device over [start, end] (the idle baseline window)."""
    dt = (end_ns - start_ns) / 1e9
    if dt <= 0:
        return float("nan")
    e = series.energy_at(np.array([start_ns, end_ns]))
    return float((e[1] - e[0]) / dt)
