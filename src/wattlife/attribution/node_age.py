"""A node reading's age in the node rows' intervals (issue 45).

A node source refreshes at its own period (pm_counters ~10 Hz, a BMC ~1 Hz) and the sampler
stamps each reading with the time it read it, so the energy read up to a reading at sampler time
t is the node's true cumulative energy C at some instant of [t - age, t] (age <= the source's age
bound). Per boundary x of a phase's exclusive time, the readings then bound the truth, with E the
series' cumulative energy at its readings (never interpolated between them) and C nondecreasing
(power >= 0):

    E(last reading at or before x)  <=  C(x)  <=  E(first reading at or after x + age)

(past the last reading: E there + the highest power read x the time beyond it). Each piece
[x0, x1] of a phase's exclusive time (`tree.segments`) thus lies in

    lo = max(0, E(last <= x1) - E(first >= x0 + age)),  hi = E(first >= x1 + age) - E(last <= x0)

summed over the phase's pieces, each boundary early by its own lag; hi is at most its span's
E(first >= last x1 + age) - E(last <= first x0) (its pieces lie inside it; C nondecreasing), which
bounds a phase of many short pieces (a step's own time between its children). The node row's
interval is the hull of this one and the method's own (`widen_for_age`): never narrower than before.
docs/FORMULAS.md ("The rest of the node") gives the basis and its limits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contracts import UNATTRIBUTED
from .series import DeviceSeries
from .tree import PhaseTree, segments


def exclusive_pieces(tree: PhaseTree, t0: int, t1: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The maximal pieces [x0, x1] (ns, inside [t0, t1], positive length) of every phase's
    exclusive time and of the time no top-level phase covers, with their phase names
    (`UNATTRIBUTED` for the latter)."""
    b, label = segments(tree)
    times = np.clip(np.concatenate([[t0], np.asarray(b, np.int64), [t1]]), t0, t1)
    owner = np.concatenate([[-1], np.asarray(label, np.int64)])
    x0, x1 = times[:-1], times[1:]
    keep = x1 > x0
    x0, x1, owner = x0[keep], x1[keep], owner[keep]
    if not len(x0):
        return x0, x1, np.array([], dtype=object)
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])  # merge same-owner neighbours
    last = np.r_[first[1:] - 1, len(x0) - 1]
    o = owner[first]
    names = np.full(len(o), UNATTRIBUTED, dtype=object)
    names[o >= 0] = np.asarray(tree.name, dtype=object)[o[o >= 0]]
    return x0[first], x1[last], names


def _at_or_before(series: DeviceSeries, x: np.ndarray) -> np.ndarray:
    """E at the last reading at or before each x (the first reading's before it)."""
    k = np.searchsorted(series.t_ns, x, side="right") - 1
    return np.asarray(series.energy_j[np.clip(k, 0, len(series.t_ns) - 1)], float)


def _at_or_after(series: DeviceSeries, x: np.ndarray, max_w: float) -> np.ndarray:
    """E at the first reading at or after each x; past the last reading, E there + `max_w` x the
    time beyond it."""
    t = series.t_ns
    k = np.searchsorted(t, x, side="left")
    beyond = np.maximum(np.asarray(x, np.int64) - t[-1], 0) / 1e9
    at: np.ndarray = np.asarray(series.energy_j[np.minimum(k, len(t) - 1)], float)
    out: np.ndarray = at + max_w * beyond
    return out


def age_bounds(series: DeviceSeries, tree: PhaseTree, age_s: float, max_w: float
               ) -> pd.DataFrame:
    """Per phase name (and `unattributed`): `age_lo_j`, `age_hi_j`, the bounds of its true energy
    that hold whatever each boundary's lag in [0, `age_s`] (module docstring); indexed by phase."""
    t0, t1 = int(series.t_ns[0]), int(series.t_ns[-1])
    x0, x1, names = exclusive_pieces(tree, t0, t1)
    age = np.int64(round(max(age_s, 0.0) * 1e9))
    lo = np.maximum(_at_or_before(series, x1) - _at_or_after(series, x0 + age, max_w), 0.0)
    hi = _at_or_after(series, x1 + age, max_w) - _at_or_before(series, x0)
    df = pd.DataFrame({"phase": names, "age_lo_j": lo, "age_hi_j": hi, "x0": x0, "x1": x1})
    g = df.groupby("phase", sort=False)
    out = g[["age_lo_j", "age_hi_j"]].sum()
    # the phase's pieces lie inside its span [first x0, last x1]: never more than the span holds
    span_hi = (_at_or_after(series, g["x1"].max().to_numpy() + age, max_w)
               - _at_or_before(series, g["x0"].min().to_numpy()))
    out["age_hi_j"] = np.fmin(out["age_hi_j"].to_numpy(), span_hi)
    return out


def widen_for_age(df: pd.DataFrame, series: DeviceSeries, tree: PhaseTree, age_s: float,
                  max_w: float) -> pd.DataFrame:
    """A node device's phases table with each interval the hull of its own and `age_bounds`
    (rows with no exclusive time in the trace, e.g. a deconvolution residual, as they were);
    unchanged without a finite positive age or with fewer than 2 readings."""
    if not (np.isfinite(age_s) and age_s > 0) or len(series.t_ns) < 2 or not len(df):
        return df
    b = age_bounds(series, tree, age_s, max_w if np.isfinite(max_w) else 0.0)
    lo = df["phase"].map(b["age_lo_j"])
    hi = df["phase"].map(b["age_hi_j"])
    out = df.copy()
    out["energy_lo_j"] = np.fmin(df["energy_lo_j"], lo)
    out["energy_hi_j"] = np.fmax(df["energy_hi_j"], hi)
    return out
