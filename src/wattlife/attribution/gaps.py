"""Sensor gaps: a device whose readings stop for longer than a few reading periods (a sensor
that stopped answering, NVML_ERROR_GPU_IS_LOST, a failing RAPL read).

The cumulative series E(t) bridges a gap with a straight line, so the energy it gives the time
inside a gap is assumed, not read: for point readings (NVML samples and polls, the simulated GPU)
both its amount and its place are invented; for readings that average since the previous one
(`averaging` sources: RAPL, the utilisation estimate, NVML's energy counter) the gap's total is
measured but its split across the phases is not. Nothing inside a gap is filled silently: each
phase carries the seconds and joules of its time in gaps (`gap_s`, `gap_energy_j`), its
`covered_fraction` leaves them out, and its interval widens to what the device could have drawn
there (between its floor and its upper bound). `wattlife check` fails a run where the energy
bridged across gaps exceeds `MAX_INVENTED_SHARE` of a device's energy, whatever the source: after
a backend raised, nothing says that its next reading covers the time it was silent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..contracts import RESIDUAL, UNATTRIBUTED, averaging_sources
from .exact_sum import exact_sum
from .exclusive_windows import sums_over_windows
from .series import DeviceSeries
from .tree import PhaseTree, exclusive, sums_by_name
from .tree_spill import AnyTree, SpilledTree
from .tree_windows import TreeWindow

#: a spacing between two readings above this many times the device's median spacing is a gap,
#: whatever its absolute length (issue 41; no floor). Chosen on the committed H100/H200 traces
#: (`benchmarks/gap_threshold.py`: 253 device series, no sensor failed): at 3, no NVML series is
#: flagged (85 of 127 at 2: the driver buffer's batches) and 27 of the 126 CPU-estimate series
#: show sampler stalls (28, up to 0.51 s, at a flush or at CMD's exit; at most 1.1 % of the
#: device's energy: `trace.gap` warnings, never a failed check); the former 0.5 s floor let
#: any hole under 0.5 s through
GAP_PERIODS = 3
#: `wattlife check` fails a device whose invented (gap) energy exceeds this share of its energy
MAX_INVENTED_SHARE = 0.05


@dataclass
class Gaps:
    """A device's gaps: their bounds, and cumulative gap seconds / joules at the readings
    that begin or end a gap (`at_ns`; between two such readings with no gap they stay as
    they are, so interpolating them there is interpolating them at every reading, bit for
    bit, in memory that grows with the gaps, not the readings)."""

    series: DeviceSeries
    start_ns: np.ndarray
    end_ns: np.ndarray
    at_ns: np.ndarray  # the readings that begin or end a gap
    seconds: np.ndarray  # cumulative seconds inside gaps at each of `at_ns`
    joules: np.ndarray  # cumulative energy (J) the series puts inside gaps at each of `at_ns`
    #: each gap's own energy (J): E after it minus E before it
    each_j: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def total_s(self) -> float:
        return float(self.seconds[-1]) if len(self.seconds) else 0.0

    @property
    def total_j(self) -> float:
        return float(self.joules[-1]) if len(self.joules) else 0.0

    @property
    def averaging(self) -> bool:
        """Whether the source's readings average since the previous one (a gap's total is
        read): the source registry's `averaging` flag."""
        return self.series.source in averaging_sources()

    def within(self, start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seconds and joules of each interval [start, end] that lie inside gaps."""
        if not len(self.start_ns):  # no gap: what interpolating the zeros gives, exactly
            return np.zeros(len(start_ns)), np.zeros(len(end_ns))
        s = self.series
        x = s.rel(self.at_ns)
        a, b = s.rel(start_ns), s.rel(end_ns)
        return (np.interp(b, x, self.seconds) - np.interp(a, x, self.seconds),
                np.interp(b, x, self.joules) - np.interp(a, x, self.joules))

    def describe(self) -> str:
        """'host/device: N gap(s), S s (longest L s from ... ns)' for messages."""
        s = self.series
        longest = int(np.argmax(self.end_ns - self.start_ns))
        return (f"{s.host}/{s.device}: {len(self.start_ns)} gap(s) in its readings, "
                f"{self.total_s:.3f} s in all (longest "
                f"{(self.end_ns[longest] - self.start_ns[longest]) / 1e9:.3f} s from t_ns "
                f"{int(self.start_ns[longest])}), {self.total_j:.1f} J bridged")


def sensor_gaps(s: DeviceSeries) -> Gaps:
    """The gaps of one device's readings: spacings above `GAP_PERIODS` x its median spacing."""
    t = s.t_ns
    if len(t) < 3:
        z = np.zeros(0)
        return Gaps(s, t[:0], t[:0], t[:0], z, z)
    # spacings' sums over the gaps' readings only (the sums over all readings add 0 outside
    # gaps: exact); a series read window by window gives the same points (`WindowedSeries`)
    idx, ta, tb, ea, eb = s.gap_points(GAP_PERIODS * s.median_dt)
    secs = np.concatenate([[0.0], np.cumsum((tb - ta) / 1e9)])
    joules = np.concatenate([[0.0], np.cumsum(eb - ea)])
    at, first = np.unique(np.concatenate([idx, idx + 1]), return_index=True)
    before = np.searchsorted(idx, at, side="left")  # gaps ended at or before each point
    return Gaps(s, ta, tb, np.concatenate([ta, tb])[first], secs[before], joules[before],
                eb - ea)


def phase_coverage(series: DeviceSeries, tree: AnyTree, gaps: Gaps
                   ) -> tuple[pd.Series, float, float]:
    """Per phase name, the share of its (exclusive) time read by the device (inside the trace's
    span, outside its sensor gaps: `covered_fraction`); the share of all phases' time inside the
    span; the seconds outside it. A tree on disk a window at a time (`phase_coverage_windows`:
    the same bits)."""
    if isinstance(tree, SpilledTree):
        return phase_coverage_windows(series, tree.windows(), gaps)
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    top = tree.parent < 0
    full = (tree.end - tree.start) / 1e9
    tot_full, ex_full = exact_sum(full[top]), exclusive(tree, full)
    del full  # each array let go once used: a long rank's phases are millions (issue 43)
    a, b = np.clip(tree.start, t0, t1), np.clip(tree.end, t0, t1)
    inside = (b - a) / 1e9
    tot_in = exact_sum(inside[top])
    inside -= gaps.within(a, b)[0]
    del a, b
    by = sums_by_name(tree, full=ex_full, inside=exclusive(tree, inside))
    del inside, ex_full
    return _shares(by, tot_full, tot_in)


def phase_coverage_windows(series: DeviceSeries, windows: Iterable[TreeWindow], gaps: Gaps
                           ) -> tuple[pd.Series, float, float]:
    """`phase_coverage` of a rank's tree given a window at a time (`tree_windows`), bit for
    bit: each phase's full and covered time taken in the window of its start, made exclusive
    once it closes, summed per name correctly rounded (`exclusive_windows.sums_over_windows`)."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]

    def values(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.clip(start, t0, t1), np.clip(end, t0, t1)
        full, inside = (end - start) / 1e9, (b - a) / 1e9
        return (np.column_stack([full, inside - gaps.within(a, b)[0]]),
                np.column_stack([full, inside]))

    sums = sums_over_windows(windows, values, ["full", "inside"])
    by = sums.by_name.sort_index(kind="stable")  # sorted names, as sums_by_name's
    return _shares(by, float(sums.top[0]), float(sums.top[1]))


def _shares(by: pd.DataFrame, tot_full: float, tot_in: float) -> tuple[pd.Series, float, float]:
    """`phase_coverage`'s answer from the per-name exclusive `full` and `inside` time and the
    top-level phases' totals (both paths)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = pd.Series(np.where(by["full"] > 0, by["inside"] / by["full"], 1.0), index=by.index)
    overall = tot_in / tot_full if tot_full > 0 else 1.0
    return frac.clip(0.0, 1.0), overall, tot_full - tot_in


def gap_sums(gaps: Gaps, tree: AnyTree | Iterable[TreeWindow]
             ) -> tuple[pd.DataFrame, float, float]:
    """Per phase name (sorted) the gap seconds `s` and joules `j` inside its exclusive time, and
    the gap seconds and joules outside every top-level phase; from the whole tree or from its
    windows (a tree on disk: its windows; `exclusive_windows.sums_over_windows`: the same
    bits)."""
    if isinstance(tree, SpilledTree):
        tree = tree.windows()
    s = gaps.series
    t0, t1 = s.t_ns[0], s.t_ns[-1]
    if isinstance(tree, PhaseTree):
        g_s, g_j = gaps.within(np.clip(tree.start, t0, t1), np.clip(tree.end, t0, t1))
        top = tree.parent < 0
        by = sums_by_name(tree, s=exclusive(tree, g_s), j=exclusive(tree, g_j))
        return by, gaps.total_s - exact_sum(g_s[top]), gaps.total_j - exact_sum(g_j[top])

    def values(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = np.column_stack(gaps.within(np.clip(start, t0, t1), np.clip(end, t0, t1)))
        return g, g

    sums = sums_over_windows(tree, values, ["s", "j"])
    by = sums.by_name.sort_index(kind="stable")[["s", "j"]]
    return by, gaps.total_s - float(sums.top[0]), gaps.total_j - float(sums.top[1])


def add_gap_columns(df: pd.DataFrame, gaps: Gaps, tree: AnyTree | Iterable[TreeWindow]
                    ) -> pd.DataFrame:
    """One device's phases with `gap_s` and `gap_energy_j` (exclusive, per name; the
    `unattributed` row gets the gaps outside top-level phases) and the interval widened over the
    gap time: the phase's energy there lies between the device's floor and upper bound. `tree`:
    the rank's tree (whole or on disk), or its windows (`gap_sums`)."""
    s = gaps.series
    by, out_s, out_j = gap_sums(gaps, tree)
    df["gap_s"] = df["phase"].map(by["s"]).fillna(0.0)
    df["gap_energy_j"] = df["phase"].map(by["j"]).fillna(0.0)
    un = df["phase"] == UNATTRIBUTED
    df.loc[un, "gap_s"], df.loc[un, "gap_energy_j"] = max(out_s, 0.0), out_j
    un_t = df.loc[un, "time_s"].clip(lower=1e-12)
    df.loc[un, "covered_fraction"] = (1.0 - df.loc[un, "gap_s"] / un_t).clip(0.0, 1.0)
    df.loc[df["phase"] == RESIDUAL, ["gap_s", "gap_energy_j"]] = 0.0
    if gaps.total_s > 0:
        sec, joule = df["gap_s"].clip(lower=0.0), df["gap_energy_j"]
        df["energy_lo_j"] -= (joule - s.floor_w * sec).clip(lower=0.0)
        df["energy_hi_j"] += (s.upper_w * sec - joule).clip(lower=0.0)
    return df
