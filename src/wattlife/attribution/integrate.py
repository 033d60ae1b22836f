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
from .exact_sum import ExactSums, exact_sum
from .exclusive_windows import ExclusiveWindows, own_rows
from .series import DeviceSeries
from .tree import PhaseTree, exclusive, sums_by_name
from .tree_windows import TreeWindow


def integrate(series: DeviceSeries, tree: PhaseTree) -> pd.DataFrame:
    """Per-interval exclusive energy/time by integration, aggregated per phase name."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    start = np.clip(tree.start, t0, t1)
    end = np.clip(tree.end, t0, t1)
    e_incl = series.energy_at(end) - series.energy_at(start)
    t_incl = (end - start) / 1e9
    e_ex = exclusive(tree, e_incl)
    t_ex = exclusive(tree, t_incl)
    top = tree.parent < 0
    g = sums_by_name(tree, sort=False, energy_j=e_ex, time_s=t_ex,
                     count=np.ones(len(e_ex), np.int64)).reset_index()
    return _table(series, g, exact_sum(e_incl[top]), exact_sum(t_incl[top]))


def integrate_windows(series: DeviceSeries, windows: Iterable[TreeWindow]) -> pd.DataFrame:
    """`integrate` of a rank's tree given a window at a time (`tree_windows`), bit for bit: each
    phase's inclusive E(end) - E(start) taken in the window of its start, its exclusive energy
    and time once it closes (`ExclusiveWindows`), summed per name correctly rounded
    (`exact_sum`: in any order the same bits), names in order of first appearance."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    ex = ExclusiveWindows(2)
    by_name, top, counts = ExactSums(2), ExactSums(2), np.zeros(0, np.int64)
    for w in windows:
        start, end, at_top = own_rows(w, ex.carried())
        a, b = np.clip(start, t0, t1), np.clip(end, t0, t1)
        incl = np.column_stack([series.energy_at(b) - series.energy_at(a), (b - a) / 1e9])
        top.add(np.zeros(int(at_top.sum()), np.int64), incl[at_top, 0], incl[at_top, 1])
        closed = ex.feed(w, incl)
        counts = np.concatenate([counts, np.zeros(len(ex.names) - len(counts), np.int64)])
        counts += np.bincount(closed.own_code, minlength=len(ex.names))
        excl = closed.incl - closed.kids
        by_name.add(closed.code, excl[:, 0], excl[:, 1])
    energy, time = by_name.totals(len(ex.names))
    g = pd.DataFrame({"energy_j": energy, "time_s": time, "count": counts},
                     index=ex.name_index()).reset_index()  # as `sums_by_name`'s
    top_e, top_t = top.totals(1)
    return _table(series, g, float(top_e[0]), float(top_t[0]))


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
