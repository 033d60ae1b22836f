"""Integration: per-phase energy from a device's cumulative energy E(t).

A phase interval's inclusive energy is E(end) - E(start) (one vectorised `interp` over all
intervals); energy goes to the innermost phase (its exclusive energy = inclusive minus its
children's inclusive energy); what no top-level phase covers is `unattributed`. So, exactly,
sum(phases) + unattributed = E(last reading) - E(first reading). The one integration of the
package: `interval_energy` serves callers that need the energy of plain time windows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contracts import UNATTRIBUTED
from .series import DeviceSeries
from .tree import PhaseTree, exclusive


def integrate(series: DeviceSeries, tree: PhaseTree) -> pd.DataFrame:
    """Per-interval exclusive energy/time by integration, aggregated per phase name."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    start = np.clip(tree.start, t0, t1)
    end = np.clip(tree.end, t0, t1)
    e_incl = series.energy_at(end) - series.energy_at(start)
    t_incl = (end - start) / 1e9
    e_ex = exclusive(tree, e_incl)
    t_ex = exclusive(tree, t_incl)
    total_e = float(series.energy_j[-1] - series.energy_j[0])
    top = tree.parent < 0
    df = pd.DataFrame({"phase": tree.name, "energy_j": e_ex, "time_s": t_ex, "n": 1})
    g = df.groupby("phase", sort=False).agg(energy_j=("energy_j", "sum"), time_s=("time_s", "sum"),
                                            count=("n", "sum")).reset_index()
    un = pd.DataFrame({"phase": [UNATTRIBUTED], "energy_j": [total_e - e_incl[top].sum()],
                       "time_s": [(t1 - t0) / 1e9 - t_incl[top].sum()], "count": [0]})
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
