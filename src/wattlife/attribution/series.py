"""One device's readings as a cumulative-energy series (the input of every estimator).

Each device's cumulative energy E(t) comes from its power readings, each taken as the average over
the interval since the previous reading (what NVML's window-averaged samples, RAPL deltas and the
utilisation-based estimate all are), or from its energy counter where it has no power readings.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from ..contracts import ENERGY_J, POWER_LIMIT_W, POWER_W, is_attributed, kind_of


def reading_power(t_ns: np.ndarray, energy_j: np.ndarray, power_w: np.ndarray | None
                  ) -> np.ndarray:
    """Each reading's power (W): the power reading where the device has them, else the energy
    counter's mean power since the reading before (NaN for the first and at a repeated time)."""
    if power_w is not None:
        return np.asarray(power_w, float)
    dt = np.diff(t_ns) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.concatenate([[np.nan], np.where(dt > 0, np.diff(energy_j) / dt, np.nan)])


def spans_at(t_ns: np.ndarray, power_w: np.ndarray, at_ns: np.ndarray, reach_ns: int
             ) -> np.ndarray:
    """The range of `power_w` over the 2 x `reach_ns` before the last reading at or before each
    at + reach, 0 where that reading is more than `reach_ns` before the instant (or none is)."""
    q = np.asarray(at_ns, np.int64) + reach_ns
    if len(t_ns) == 0:
        return np.zeros(len(q))
    roll = pd.Series(power_w, index=pd.to_datetime(t_ns)).rolling(pd.Timedelta(2 * reach_ns, "ns"))
    span = (roll.max() - roll.min()).to_numpy()
    k = np.searchsorted(t_ns, q, side="right") - 1
    ok = (k >= 0) & (t_ns[np.maximum(k, 0)] >= q - 2 * reach_ns)
    got = span[np.maximum(k, 0)]
    return np.where(ok & np.isfinite(got), got, 0.0)


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
            return self.p_max()
        dt = np.diff(self.t_ns) / 1e9
        ok = dt > 0
        return float(np.max(np.diff(self.energy_j)[ok] / dt[ok])) if ok.any() else np.inf

    def rel(self, t_ns: np.ndarray) -> np.ndarray:
        """Seconds-scale float times relative to the first reading (epoch ns in float64 would
        lose precision: 2**-52 * 1.7e18 ns is hundreds of ns)."""
        result: np.ndarray = (np.asarray(t_ns, dtype=np.int64) - self.t_ns[0]).astype(np.float64)
        return result

    def energy_at(self, t_ns: np.ndarray) -> np.ndarray:
        result: np.ndarray = np.interp(self.rel(t_ns), self.rel(self.t_ns), self.energy_j)
        return result

    def searchsorted(self, x: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
        """`np.searchsorted` of the readings' times (a series on disk: a window at a time)."""
        found: np.ndarray = np.searchsorted(self.t_ns, x, side=side)
        return found

    def energy_of(self, k: np.ndarray) -> np.ndarray:
        """E at the readings of indices `k`."""
        return np.asarray(self.energy_j[k], float)

    @property
    def spacing_s(self) -> float:
        return self.median_dt / 1e9 if len(self.t_ns) > 1 else float("nan")

    @property
    def median_dt(self) -> float:
        """The median spacing of the readings, ns."""
        return float(np.median(np.diff(self.t_ns)))

    def gap_points(self, threshold_ns: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(i, t_i, t_i+1, E_i, E_i+1) of every spacing above `threshold_ns`."""
        t, e = self.t_ns, self.energy_j
        idx = np.flatnonzero(np.diff(t) > threshold_ns)
        return idx, t[idx], t[idx + 1], e[idx], e[idx + 1]

    def power_spans(self, at_ns: np.ndarray, reach_ns: int) -> np.ndarray:
        """Per instant, the range (max - min, W) of the power readings within `reach_ns` of it:
        what the readings show of a step there (0 with no reading there; `settle`)."""
        return spans_at(self.t_ns, reading_power(self.t_ns, self.energy_j, self.power_w), at_ns,
                        reach_ns)

    # whole passes over the power readings: one call each, so that a series whose readings
    # stay on disk (`windowed.WindowedSeries`) gives the same numbers window by window
    def p_min(self) -> float:
        """The lowest power reading."""
        return float(np.min(self.power_w))  # type: ignore[arg-type]  # power series only

    def p_max(self) -> float:
        """The highest power reading."""
        return float(np.max(self.power_w))  # type: ignore[arg-type]  # power series only

    def p_mean(self, start: int = 0) -> float:
        """The mean of the power readings from reading `start` on."""
        return float(np.mean(self.power_w[start:]))  # type: ignore[index]

    def power_std(self) -> float:
        """The standard deviation of the power readings (of the mean power between readings
        for an energy counter): integration's boundary error."""
        if self.power_w is not None:
            return float(np.std(self.power_w))
        return float(np.std(np.diff(self.energy_j) / (np.diff(self.t_ns) / 1e9)))


class SpilledSeries(Sequence[DeviceSeries], ABC):
    """The devices' series of a trace read in chunks (`chunked.SpilledTrace`), loaded one at a
    time, with the devices that have too few readings (`short`, as `too_few_readings`)."""

    @property
    @abstractmethod
    def n_readings(self) -> int:
        """Readings of all series, counted without loading them."""

    @abstractmethod
    def short(self) -> pd.DataFrame:
        """host, device, count, source of the devices with fewer than 2 readings."""


def source_mode(codes: np.ndarray, names: list[str]) -> str:
    """The most frequent source of a series' rows (`codes` into `names`), the first by name of
    equally frequent ones (what pandas' `mode().iat[0]` gives)."""
    return mode_of_counts(np.bincount(codes, minlength=len(names)), names)


def mode_of_counts(counts: np.ndarray, names: list[str]) -> str:
    """`source_mode` of rows already counted per source (`counts[i]`: rows of `names[i]`)."""
    best = np.flatnonzero(counts == counts.max())
    return min(names[i] for i in best)


def _by_time(t: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """`t` and `cols` sorted by `t` (stable); as they are where already in order (a sampler
    writes each device's readings in time order): the same arrays, without the copies a sort
    makes (a device's day: 4.3 M readings, 35 MB a column; issue 43)."""
    if len(t) < 2 or bool(np.all(t[1:] >= t[:-1])):
        return (t, *cols)
    order = np.argsort(t, kind="stable")
    return tuple(x[order] for x in (t, *cols))


def _cumulative(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """E at each reading: 0, then the running sum of p_k x (t_k - t_k-1) / 1e9, in place (the
    same operations, in the same order, as `concatenate([[0], cumsum(p[1:] * diff(t) / 1e9)])`:
    the same values, bit for bit, with one temporary, not four)."""
    x = p[1:] * np.diff(t)
    np.divide(x, 1e9, out=x)
    e = np.empty(len(t))
    e[:1] = 0.0
    np.cumsum(x, out=e[1:])
    return e


def power_series(host: str, dev: str, t: np.ndarray, p: np.ndarray, src: np.ndarray,
                 names: list[str], limit: float) -> DeviceSeries:
    """A device's series from its power readings (>= 2, in file order; `src` codes into `names`):
    sorted by time (stable), the last of equal timestamps kept."""
    t, p, src = _by_time(t, p, src)
    keep = np.append(t[1:] != t[:-1], True)
    if not keep.all():
        t, p, src = t[keep], p[keep], src[keep]
    del keep
    e = _cumulative(t, p)
    # a burst may exceed the limit (the H200's 20 ms readings reach ~1.3x it): the highest
    # reading says how far this device went
    bound = max(limit, float(p.max())) if np.isfinite(limit) else np.inf
    floor = max(float(p[1:].min()), 0.0)  # p[0] has no window (not integrated)
    return DeviceSeries(host, dev, t, e, p, source_mode(src, names), bound, floor)


def energy_series(host: str, dev: str, t: np.ndarray, e: np.ndarray, src: np.ndarray,
                  names: list[str]) -> DeviceSeries:
    """A device's series from its energy counter (>= 2 readings, in file order)."""
    t, e, src = _by_time(t, e, src)
    dt = np.diff(t) / 1e9
    ok = dt > 0
    floor = max(float(np.min(np.diff(e)[ok] / dt[ok])), 0.0) if ok.any() else 0.0
    return DeviceSeries(host, dev, t, e - e[0], None, source_mode(src, names), floor_w=floor)


def _arrays(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    codes, names = pd.factorize(rows["source"])
    return (rows["t_ns"].to_numpy(np.int64), rows["value"].to_numpy(np.float64), codes,
            [str(x) for x in names])


def series_metric(device: str, counts: dict[str, int]) -> str | None:
    """The metric a device's series is made of: the first its kind reads
    (`contracts.kinds.DeviceKind.reads`: power, else the energy counter) with >= 2 readings in
    `counts` (metric -> readings); None when none has."""
    kind = kind_of(device)
    return next((m for m in (kind.reads if kind else ()) if counts.get(m, 0) >= 2), None)


def attributed_rows(trace: pd.DataFrame) -> pd.DataFrame:
    """The power and energy readings of the devices attribution takes (attributed kinds)."""
    devs = trace["device"]
    keep = devs.isin([d for d in devs.unique() if is_attributed(str(d))])
    return trace[keep & trace["metric"].isin([POWER_W, ENERGY_J])]


def device_series(trace: pd.DataFrame) -> list[DeviceSeries]:
    """Cumulative-energy series of every device of an attributed kind in a trace."""
    out = []
    sel = attributed_rows(trace)
    limits = trace[trace["metric"] == POWER_LIMIT_W].groupby(["host", "device"])["value"].max()
    for (host, dev), g in sel.groupby(["host", "device"], sort=True):
        by_metric = {str(m): rows for m, rows in g.groupby("metric", sort=False)}
        m = series_metric(str(dev), {k: len(v) for k, v in by_metric.items()})
        if m == POWER_W:
            limit = float(limits.get((host, dev), np.inf))
            out.append(power_series(host, dev, *_arrays(by_metric[m]), limit))
        elif m == ENERGY_J:
            out.append(energy_series(host, dev, *_arrays(by_metric[m])))
    return out


def too_few_readings(trace: pd.DataFrame, series: Sequence[DeviceSeries]) -> pd.DataFrame:
    """The devices of attributed kinds in `trace` that `device_series` could not make a series of
    (fewer than 2 readings of each metric its kind reads): host, device, count, source."""
    sel = attributed_rows(trace)
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
