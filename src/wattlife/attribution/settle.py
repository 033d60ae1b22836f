"""The sensor's settling at phase boundaries: an `integrate` interval that holds it (issue 46).

A power sensor does not follow a step at once: its readings reach the new level some tens of
milliseconds late (a window average; a real ramp of the load's power looks the same). Under
`integrate`, which takes each reading as the mean since the one before, a part of every
boundary's power step lands on the wrong side of the boundary. On the H100
(`results/reference/h100/sensor/`) an isolated load phase of 200 ms-2 s comes out ~P x 20 ms
short, the energy landing in the phase after it; an interval from the reading spacing alone
excludes the truth for every phase under 5 s.

The point estimate is left as it is (no per-boundary step is known to correct it with: that is
what deconvolution estimates); the interval widens, per boundary of a phase's exclusive time, by
`displaced_ms` x the step there, the step read as the range of the readings within `reach_ms` of
the boundary. The errors are systematic (a phase's every occurrence sees the same kind of
step), so they add linearly, not in quadrature. `displaced_ms` is measured per GPU model by the
sensor study (`analysis.nvml_sensor.displaced_ms` over its step points): the most, over up and
down steps, of a step's energy the integrated readings place on the other side of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..contracts import UNATTRIBUTED, GpuIdentity
from .exact_sum import exact_sum
from .exclusive_windows import sums_over_windows
from .integrate import integrate, integrate_windows
from .series import DeviceSeries
from .tree import sums_by_name
from .tree_spill import AnyTree, SpilledTree, phase_count


@dataclass(frozen=True)
class SensorSettle:
    """One GPU model's settling, as its sensor study measured it."""

    model: str
    displaced_ms: float  # per boundary: the most of a step's energy (ms x step) put across it
    reach_ms: float  # readings within this of a boundary show its step (window + spacing)
    basis: str  # where the numbers come from


#: GPU models whose sensor was studied (`benchmarks/nvml_sensor.py`):
#: tests/attribution/test_settle.py recomputes each entry from the committed raw files.
KNOWN: dict[str, SensorSettle] = {
    "NVIDIA H100 80GB HBM3": SensorSettle(
        "NVIDIA H100 80GB HBM3", displaced_ms=24.1, reach_ms=73.7,
        basis="results/reference/h100/sensor (issue 46), 4 up and 4 down steps"),
}


def settle_for(model: str | None) -> SensorSettle | None:
    """The studied settling of a GPU model (its NVML name), None where none was studied."""
    return KNOWN.get(model) if model else None


def settle_by_device(gpus: list[GpuIdentity], gpu_model: str | None
                     ) -> dict[str, SensorSettle]:
    """{device: settling} for the GPUs of a run's meta.json (`RunMeta.gpu_identities`: device
    and model; the run's `gpu_model` where a GPU has no model), the studied models only."""
    out = {}
    for g in gpus:
        s = settle_for(g.model or gpu_model)
        if s is not None and g.device:
            out[g.device] = s
    return out


def boundary_steps(series: DeviceSeries, at_ns: np.ndarray, reach_ms: float) -> np.ndarray:
    """Per boundary, the range (max - min, W) of the device's power readings within `reach_ms`
    of it: what the readings show of the step there (0 with no reading there)."""
    return series.power_spans(np.asarray(at_ns, np.int64), int(reach_ms * 1e6))


def _own_steps(series: DeviceSeries, start: np.ndarray, end: np.ndarray,
               settle: SensorSettle) -> np.ndarray:
    """Each interval's energy (J) the settling can move across its own two boundaries."""
    n = len(start)
    steps = boundary_steps(series, np.concatenate([start, end]), settle.reach_ms)
    own: np.ndarray = (steps[:n] + steps[n:]) * settle.displaced_ms / 1e3
    return own


def settle_halfwidth(series: DeviceSeries, tree: AnyTree, settle: SensorSettle) -> pd.Series:
    """Per phase name (and `unattributed`), the energy (J) the sensor's settling can move across
    the boundaries of its exclusive time: each interval's own two boundaries and its children's,
    summed linearly (a spilled tree a window at a time, `sums_over_windows` adding the
    children's: the same bits)."""
    if isinstance(tree, SpilledTree):
        def values(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            own = _own_steps(series, start, end, settle)[:, None]
            return own, own

        sums = sums_over_windows(tree.windows(), values, ["j"], kids_sign=1.0)
        out = sums.by_name["j"]
        out[UNATTRIBUTED] = float(sums.top[0])
        return out
    own = _own_steps(series, tree.start, tree.end, settle)
    child = tree.parent >= 0
    exclusive = own + np.bincount(tree.parent[child], weights=own[child], minlength=len(own))
    out = sums_by_name(tree, sort=False, j=exclusive)["j"]
    out[UNATTRIBUTED] = exact_sum(own[~child])
    return out


def widen_for_settle(df: pd.DataFrame, series: DeviceSeries, tree: AnyTree,
                     settle: SensorSettle | None, floor_w: float) -> pd.DataFrame:
    """An `integrate` table with its intervals widened by `settle_halfwidth` (lower end kept at
    or above the device's floor x time), and the columns saying so: `settle_ms`, `settle_j`,
    `settle_basis` (NaN and the interval untouched where the GPU model's sensor was not
    studied)."""
    if settle is None or not phase_count(tree):
        return df.assign(settle_ms=np.nan, settle_j=np.nan, settle_basis=np.nan)
    add = df["phase"].map(settle_halfwidth(series, tree, settle)).fillna(0.0).to_numpy()
    e = df["energy_j"].to_numpy(float)
    t = df["time_s"].clip(lower=0.0).to_numpy(float)
    lo = np.minimum(np.maximum(df["energy_lo_j"].to_numpy(float) - add, floor_w * t), e)
    return df.assign(energy_lo_j=np.minimum(lo, df["energy_lo_j"]),
                     energy_hi_j=df["energy_hi_j"] + add, settle_ms=settle.displaced_ms,
                     settle_j=add, settle_basis=settle.basis)


def integrate_held(series: DeviceSeries, tree: AnyTree,
                   settles: Mapping[str, SensorSettle] | None) -> pd.DataFrame:
    """`integrate`, its intervals holding the settling of the device's GPU model where `settles`
    ({device: settling}, `settle_by_device` of meta.json) has it; with a map, the table carries
    `settle_ms`, `settle_j` and `settle_basis` (NaN where the model was not studied). A spilled
    tree is integrated a window at a time (`integrate_windows`: the same bits)."""
    df = (integrate_windows(series, tree.windows()) if isinstance(tree, SpilledTree)
          else integrate(series, tree))
    if settles is None:
        return df
    return widen_for_settle(df, series, tree, settles.get(series.device), series.floor_w)


def settle_columns(table: pd.DataFrame, settles: Mapping[str, SensorSettle] | None
                   ) -> pd.DataFrame:
    """A phases table with `settle_ms`, `settle_j` and `settle_basis` on every row (NaN where not
    applied: a deconvolved device, a short one) when attribution had a settling map; as it was
    without."""
    if settles is None:
        return table
    return table.assign(**{c: table.get(c, np.nan)
                           for c in ("settle_ms", "settle_j", "settle_basis")})
