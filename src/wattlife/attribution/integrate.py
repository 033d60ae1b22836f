"""Integration: per-phase energy from a device's cumulative energy E(t).

A phase interval's inclusive energy is E(end) - E(start) (one vectorised `interp` over all
intervals); energy goes to the innermost phase (its exclusive energy = inclusive minus its
children's inclusive energy); what no top-level phase covers is `unattributed`. So, exactly,
sum(phases) + unattributed = E(last reading) - E(first reading). The one integration of the
package: `interval_energy` serves callers that need the energy of plain time windows;
`integrate_windows` the same table from a rank's tree a window of events at a time (issue 43).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..contracts import UNATTRIBUTED
from .exact_sum import exact_sum
from .exclusive_windows import sums_over_windows
from .series import DeviceSeries
from .tree import PhaseTree, exclusive, sums_by_name
from .tree_windows import TreeWindow


def integrate(series: DeviceSeries, tree: PhaseTree) -> pd.DataFrame:
    """Per-interval exclusive energy/time by integration, aggregated per phase name."""
    e_incl, t_incl = _inclusive(series, tree.start, tree.end)
    e_ex = exclusive(tree, e_incl)
    t_ex = exclusive(tree, t_incl)
    top = tree.parent < 0
    g = sums_by_name(tree, sort=False, energy_j=e_ex, time_s=t_ex,
                     count=np.ones(len(e_ex), np.int64)).reset_index()
    return _table(series, g, exact_sum(e_incl[top]), exact_sum(t_incl[top]))


def integrate_windows(series: DeviceSeries, windows: Iterable[TreeWindow]) -> pd.DataFrame:
    """`integrate` of a rank's tree given a window at a time (`tree_windows`), bit for bit: each
    phase's inclusive E(end) - E(start) taken in the window of its start, made exclusive once it
    closes, summed per name correctly rounded (`exclusive_windows.sums_over_windows`)."""

    def values(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        incl = np.column_stack(_inclusive(series, start, end))
        return incl, incl

    sums = sums_over_windows(windows, values, ["energy_j", "time_s"])
    return _table(series, sums.by_name.reset_index(), float(sums.top[0]), float(sums.top[1]))


def _inclusive(series: DeviceSeries, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's inclusive energy E(end) - E(start) and time (s), clipped to the first
    and last reading: the one formula of the whole tree's path and the windows'."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    a, b = np.clip(start, t0, t1), np.clip(end, t0, t1)
    return series.energy_at(b) - series.energy_at(a), (b - a) / 1e9


def _table(series: DeviceSeries, g: pd.DataFrame, top_e: float, top_t: float) -> pd.DataFrame:
    """The phases table from the per-name sums `g` (phase, energy_j, time_s, count) and the
    top-level phases' energy and time: `unattributed` (the rest of the device's total) added,
    the 95 % interval from boundary timing."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    total_e = float(series.energy_j[-1] - series.energy_j[0])
    un = pd.DataFrame({"phase": [UNATTRIBUTED], "energy_j": [total_e - top_e],
                       "time_s": [(t1 - t0) / 1e9 - top_t], "count": [0]})
    g = pd.concat([g, un], ignore_index=True)
    # 95% interval from boundary timing: each boundary is known to the sensor's spacing, so it
    # moves energy by sigma_P * spacing / sqrt(12) (uniform timing error), independently.
    sigma_p = series.power_std()
    per_boundary = sigma_p * series.spacing_s / np.sqrt(12.0)
    boundaries = 2.0 * g["count"].clip(lower=1).to_numpy()
    half = 1.96 * per_boundary * np.sqrt(boundaries)
    # no phase draws less than the device's floor (its lowest reading). The upper end is left
    # alone: a reading at the device's highest value is not a bound on the phase's true power
    # (an estimate saturates, a sensor averages), and clamping it would give a zero-width interval.
    t_pos = g["time_s"].clip(lower=0.0).to_numpy()
    e = g["energy_j"].to_numpy()
    g["energy_lo_j"] = np.minimum(np.maximum(e - half, series.floor_w * t_pos), e)
    g["energy_hi_j"] = e + half
    g["identified"] = True
    g["method"] = "integrate"
    g["window_ms"] = np.nan
    return g


def interval_energy(series: DeviceSeries, start_ns: int, end_ns: int) -> tuple[float, float]:
    """Energy (J) and duration (s) between the first and the last of the device's readings inside
    [start_ns, end_ns] (E of the one cumulative series, no extrapolation past those readings);
    (nan, 0.0) with fewer than two readings there."""
    inside = np.flatnonzero((series.t_ns >= start_ns) & (series.t_ns <= end_ns))
    if len(inside) < 2:
        return float("nan"), 0.0
    i, j = inside[0], inside[-1]
    return (float(series.energy_j[j] - series.energy_j[i]),
            float(series.t_ns[j] - series.t_ns[i]) / 1e9)
