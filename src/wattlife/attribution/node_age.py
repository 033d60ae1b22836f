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

from collections.abc import Iterator
from itertools import chain

import numpy as np
import pandas as pd

from ..contracts import UNATTRIBUTED
from .exact_sum import ExactSums
from .series import DeviceSeries
from .tree import NameCodes, segments
from .tree_spill import AnyTree, SpilledTree

#: a piece of a tree's segments: boundaries (ns), the innermost phase after each (an id, -1:
#: none) and its name
Labelled = tuple[np.ndarray, np.ndarray, np.ndarray]


def _labelled(tree: AnyTree) -> Iterator[Labelled]:
    """The tree's `segments` with each boundary's name, a piece at a time (a spilled tree's
    windows, `SpilledTree.labelled_segments`; a whole tree: one piece)."""
    if isinstance(tree, SpilledTree):
        yield from tree.labelled_segments()
        return
    b, label = segments(tree)
    names = np.full(len(label), UNATTRIBUTED, dtype=object)
    names[label >= 0] = np.asarray(tree.name, dtype=object)[label[label >= 0]]
    yield np.asarray(b, np.int64), np.asarray(label, np.int64), names


def merged_pieces(tree: AnyTree, t0: int, t1: int) -> Iterator[Labelled]:
    """`exclusive_pieces` a piece of the segments at a time: (x0, x1, names) of the merged
    pieces that closed in it (the last one stays open while the next piece may extend it)."""
    last: Labelled = (np.array([t0], np.int64), np.array([-1], np.int64),
                      np.array([UNATTRIBUTED], dtype=object))  # the time before the first
    held: tuple[np.ndarray, ...] = tuple(np.zeros(0, d) for d in (np.int64, np.int64, np.int64,
                                                                  object))
    end = (np.array([t1], np.int64), np.array([-1], np.int64), np.array([""], dtype=object))
    for b, label, names in chain(_labelled(tree), [end]):  # `end`: the boundary at t1
        times = np.clip(np.concatenate([last[0], b]), t0, t1)
        owner, name = np.concatenate([last[1], label]), np.concatenate([last[2], names])
        last = (times[-1:], owner[-1:], name[-1:])
        keep = times[1:] > times[:-1]
        x0, x1 = np.concatenate([held[0], times[:-1][keep]]), np.concatenate(
            [held[1], times[1:][keep]])
        o, nm = np.concatenate([held[2], owner[:-1][keep]]), np.concatenate(
            [held[3], name[:-1][keep]])
        if not len(x0):
            continue
        first = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])  # merge same-owner neighbours
        stop = np.r_[first[1:] - 1, len(x0) - 1]
        held = (x0[first[-1:]], x1[-1:], o[first[-1:]], nm[first[-1:]])
        yield x0[first[:-1]], x1[stop[:-1]], nm[first[:-1]]
    yield held[0], held[1], held[3]


def exclusive_pieces(tree: AnyTree, t0: int, t1: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The maximal pieces [x0, x1] (ns, inside [t0, t1], positive length) of every phase's
    exclusive time and of the time no top-level phase covers, with their phase names
    (`UNATTRIBUTED` for the latter)."""
    parts = list(merged_pieces(tree, t0, t1))
    x0, x1, names = (np.concatenate([p[k] for p in parts]) for k in range(3))
    return x0, x1, names.astype(object)


def _at_or_before(series: DeviceSeries, x: np.ndarray) -> np.ndarray:
    """E at the last reading at or before each x (the first reading's before it)."""
    k = series.searchsorted(x, "right") - 1
    return series.energy_of(np.clip(k, 0, len(series.t_ns) - 1))


def _at_or_after(series: DeviceSeries, x: np.ndarray, max_w: float) -> np.ndarray:
    """E at the first reading at or after each x; past the last reading, E there + `max_w` x the
    time beyond it."""
    n = len(series.t_ns)
    k = series.searchsorted(x, "left")
    beyond = np.maximum(np.asarray(x, np.int64) - int(series.t_ns[n - 1]), 0) / 1e9
    out: np.ndarray = series.energy_of(np.minimum(k, n - 1)) + max_w * beyond
    return out


def age_bounds(series: DeviceSeries, tree: AnyTree, age_s: float, max_w: float
               ) -> pd.DataFrame:
    """Per phase name (and `unattributed`): `age_lo_j`, `age_hi_j`, the bounds of its true energy
    that hold whatever each boundary's lag in [0, `age_s`] (module docstring); indexed by phase
    in order of first appearance. Summed over the merged pieces as they close (`merged_pieces`;
    correctly rounded, `exact_sum`), so a spilled tree is never held whole."""
    t0, t1 = int(series.t_ns[0]), int(series.t_ns[-1])
    age = np.int64(round(max(age_s, 0.0) * 1e9))
    codes = NameCodes()
    sums = ExactSums(2)
    first_x0, last_x1 = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for x0, x1, names in merged_pieces(tree, t0, t1):
        lo = np.maximum(_at_or_before(series, x1) - _at_or_after(series, x0 + age, max_w), 0.0)
        hi = _at_or_after(series, x1 + age, max_w) - _at_or_before(series, x0)
        code = codes.of(names)
        grow = len(codes) - len(first_x0)
        first_x0 = np.concatenate([first_x0, np.full(grow, np.iinfo(np.int64).max)])
        last_x1 = np.concatenate([last_x1, np.full(grow, np.iinfo(np.int64).min)])
        np.minimum.at(first_x0, code, x0)
        np.maximum.at(last_x1, code, x1)
        sums.add(code, lo, hi)
    lo_j, hi_j = sums.totals(len(codes))
    # the phase's pieces lie inside its span [first x0, last x1]: never more than the span holds
    span_hi = (_at_or_after(series, last_x1 + age, max_w) - _at_or_before(series, first_x0))
    return pd.DataFrame({"age_lo_j": lo_j, "age_hi_j": np.fmin(hi_j, span_hi)},
                        index=pd.Index(codes.uniques, name="phase"))


def widen_for_age(df: pd.DataFrame, series: DeviceSeries, tree: AnyTree, age_s: float,
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
