"""The phase tree of one rank: the nesting rule, overlap clamping, exclusive time and segments.

Intervals of one (host, rank) nest: a child lies inside its parent, siblings never overlap
(concurrent phases, a background write beside the steps, are kept out: `timeline`).
`nest` is the one implementation of the rule (attribution and `wattlife check` call it); overlaps
of at most `OVERLAP_TOL_NS` (two clocks' boundaries) are clamped by `resolve_overlaps`. Energy
goes to the innermost phase: `exclusive` turns inclusive quantities into exclusive ones, and
`segments` / `SegmentIndex` give the innermost phase name active at every instant.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..contracts import CONCURRENT_PHASES, UNATTRIBUTED, ContractError, file_line
from .exact_sum import exact_group_sums
from .segment_lookup import Segments
from .series import DeviceSeries


@dataclass
class PhaseTree:
    """Properly nested intervals of one rank, sorted by (start, -end), with their parents."""

    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    parent: np.ndarray  # index into the arrays, -1 for top level
    #: `name_codes`' answer, kept once asked (a device's estimate asks several times)
    codes: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)


def name_codes(tree: PhaseTree) -> tuple[np.ndarray, np.ndarray]:
    """Each phase's name as a code (in order of first appearance, the smallest integer type
    that holds them) and the distinct names: computed once a tree, not once a use (a week of
    one rank: 9.9 M names hashed ~0.8 s and an 8-byte code a phase each time; issue 43)."""
    if tree.codes is None:
        codes, uniques = pd.factorize(tree.name, use_na_sentinel=False)
        small = np.int8 if len(uniques) <= 127 else np.int16 if len(uniques) <= 32767 else np.int64
        tree.codes = (codes.astype(small), np.asarray(uniques, dtype=object))
    return tree.codes


class NameCodes:
    """Names given run-wide codes in order of first appearance, a piece of rows at a time (the
    codes `name_codes` gives a whole tree, for a rank's windows or pieces; issue 43)."""

    def __init__(self) -> None:
        self._code: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._code)

    def of(self, names: np.ndarray) -> np.ndarray:
        """Each name's code (a new name gets the next one)."""
        local, uniques = pd.factorize(names, use_na_sentinel=False)
        lut = np.array([self._code.setdefault(str(u), len(self._code)) for u in uniques],
                       np.int64)
        return lut[local] if len(local) else np.zeros(0, np.int64)

    @property
    def uniques(self) -> np.ndarray:
        """The names in order of first appearance (code order)."""
        return np.asarray(list(self._code), dtype=object)


#: cross-clock overlaps up to this are resolved by clamping (GPU-timeline boundaries mapped to
#: the host clock through different anchors disagree by ~0.1 ms; far below a sensor's resolution)
OVERLAP_TOL_NS = 1_000_000


def nest(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nesting rule, on one rank's intervals already sorted by (start, -end): each interval's
    depth, parent (index, -1 at the top) and whether it overlaps that parent without nesting in it.

    Depth = intervals sorted before me still open at my start. The one implementation of the rule:
    `phase_tree`, `resolve_overlaps` and `check.nesting` all call it."""
    n = len(start)
    idx = np.arange(n)
    # intervals open at my start = those sorted before me minus those of them already ended.
    # Every interval ending at or before my start counts as ended, except zero-length ones that
    # start at my instant and sort at or after me (myself included): they are not before me.
    closed = np.searchsorted(np.sort(end), start, side="right")
    zl = (end == start).astype(np.int64)
    if zl.any():
        new_group = np.concatenate([[True], start[1:] != start[:-1]])
        cum = np.concatenate([[0], np.cumsum(zl)])
        g_end = np.append(np.flatnonzero(new_group)[1:], n)[np.cumsum(new_group) - 1]
        closed -= cum[g_end] - cum[idx]  # zero-length intervals of my instant at or after me
    depth = np.maximum(idx - closed, 0)
    parent = np.full(n, -1, dtype=np.int64)
    for d in range(1, int(depth.max(initial=0)) + 1):
        child = idx[depth == d]
        up = idx[depth == d - 1]
        pos = np.searchsorted(up, child) - 1
        parent[child] = up[np.maximum(pos, 0)]
    has_parent = parent >= 0
    over = np.zeros(n, dtype=bool)
    over[has_parent] = end[has_parent] > end[parent[has_parent]]
    return depth, parent, over


def resolve_overlaps(start: np.ndarray, end: np.ndarray, tol_ns: int = OVERLAP_TOL_NS
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clamp one rank's overlaps of at most `tol_ns` (any order of rows): an interval that starts
    inside another and ends after it starts at the other's end when their common part is the
    smaller (siblings whose boundary the two clocks placed differently), else ends at the
    other's end (a child sticking out of its parent). Returns (start, end, clamp_ns): the new
    bounds and how far each row moved. Larger overlaps are left for `nest` to report."""
    start = np.asarray(start, dtype=np.int64).copy()
    end = np.asarray(end, dtype=np.int64).copy()
    clamp = np.zeros(len(start), dtype=np.int64)
    for _ in range(256):  # each pass settles one nesting level of a clamped boundary
        order = np.lexsort((-end, start))
        s, e = start[order], end[order]
        _, parent, over = nest(s, e)
        i = np.flatnonzero(over)
        if not len(i):
            break
        j = parent[i]
        inter, protr = e[j] - s[i], e[i] - e[j]
        # a wrong parent (inter <= 0) is the echo of an overlap before it: settled by that one
        small = (inter > 0) & (np.minimum(inter, protr) <= tol_ns)
        if not small.any():
            break
        i, j, inter, protr = i[small], j[small], inter[small], protr[small]
        at_start = inter <= protr
        rows = order[i]
        start[rows[at_start]] = e[j[at_start]]
        end[rows[~at_start]] = e[j[~at_start]]
        clamp[rows] += np.minimum(inter, protr)
    return start, end, clamp


def timeline(events: pd.DataFrame) -> pd.DataFrame:
    """The rows that nest: every phase but the concurrent ones (`contracts.CONCURRENT_PHASES`, a
    background checkpoint write overlapping the steps), whose time and energy stay with the
    phases they overlap."""
    if not len(events) or "phase" not in events.columns:
        return events
    return events[~events["phase"].isin(CONCURRENT_PHASES)]


def clamp_events(events: pd.DataFrame, tol_ns: int = OVERLAP_TOL_NS,
                 where: str = "events") -> pd.DataFrame:
    """Events with overlaps of at most `tol_ns` per (host, rank) clamped (`resolve_overlaps`), a
    `clamp_ns` column (plus what the markers already clamped) and a warning counting them."""
    if not len(events):
        return events
    ev = events.copy()
    prior = ev["clamp_ns"].fillna(0).astype(np.int64) if "clamp_ns" in ev.columns else 0
    ev["clamp_ns"] = 0
    for _, g in ev.groupby(["host", "rank"], sort=False):
        s, e, c = resolve_overlaps(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), tol_ns)
        if c.any():
            ev.loc[g.index, "start_ns"], ev.loc[g.index, "end_ns"] = s, e
            ev.loc[g.index, "clamp_ns"] = c
    moved = ev["clamp_ns"] > 0
    if moved.any():
        n = int(moved.sum())
        warnings.warn(f"{where}: {n} phase boundar{'y' if n == 1 else 'ies'} overlapping a "
                      f"neighbour by at most {tol_ns / 1e6:g} ms clamped (largest "
                      f"{ev['clamp_ns'].max() / 1e3:.1f} us, total "
                      f"{ev['clamp_ns'].sum() / 1e3:.1f} us): GPU-timeline boundaries mapped to "
                      "the host clock through different anchors", stacklevel=2)
    ev["clamp_ns"] = ev["clamp_ns"] + prior
    return ev


def phase_tree(events: pd.DataFrame, where: str = "events") -> PhaseTree:
    """Sort one rank's intervals and find each one's parent (vectorised over depth levels).
    An overlap is an error naming the rows' file and line (columns `file_name`, `line_no`)."""
    # equal bounds: the shallower recorded depth is the parent (a `compile` inside its forward)
    depth_key = (events["depth"].fillna(0).to_numpy() if "depth" in events.columns
                 else np.zeros(len(events)))
    order = np.lexsort((depth_key, -events["end_ns"].to_numpy(), events["start_ns"].to_numpy()))
    start = events["start_ns"].to_numpy(np.int64)[order]
    end = events["end_ns"].to_numpy(np.int64)[order]
    name = _names(events["phase"])[order]
    depth, parent, over = nest(start, end)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        j = int(parent[i])
        rows = events.iloc[order[[i, j]]]
        a, b = (f"'{_recorded_name(r)}'{_in_file(r)}" for _, r in rows.iterrows())
        raise ContractError(
            f"{where}: phase {a} [{start[i]}, {end[i]}] overlaps {b} [{start[j]}, {end[j]}] by "
            f"{(end[j] - start[i]) / 1e6:.3f} ms without nesting inside it; phases of one rank "
            "must nest")
    return PhaseTree(name, start, end, depth, parent)


def _names(phase: pd.Series) -> np.ndarray:
    """The phase column as an object array whose rows share one string a distinct name (the
    same values as `to_numpy(object)`, which makes one Python string a row from an Arrow or
    string column: 4.2 M rows, ~0.3 GB, for 3 days of one rank; issue 43)."""
    codes, uniques = pd.factorize(phase, use_na_sentinel=False)
    result: np.ndarray = np.asarray(uniques, dtype=object)[codes]
    return result


def _recorded_name(row: pd.Series) -> str:
    """A row's phase as its file records it (`recorded_phase`, kept by `read_events` when the
    warm-up labelling renames the warm-up steps' rows `warmup`), else its `phase`."""
    rec = row.get("recorded_phase")
    return str(rec) if isinstance(rec, str) else str(row["phase"])


def _in_file(row: pd.Series) -> str:
    """' (file:line)' of a row, '' when unknown (`contracts.file_line`)."""
    loc = file_line(row.get("file_name"), row.get("line_no"))
    return f" ({loc})" if loc else ""


def sums_by_name(names: np.ndarray | PhaseTree, sort: bool = True, **columns: np.ndarray
                 ) -> pd.DataFrame:
    """Each column's sum over the rows of each distinct name (index `phase`: the names sorted,
    or in order of first appearance): float columns correctly rounded (`exact_sum`: the same
    bits whatever the rows' order, so that a rank's tree summed a window at a time gives the
    whole tree's; issue 43), integer columns exactly; grouped on the names' integer codes
    (a tree's: `name_codes`), so that no column of one string a phase is built (a week of one
    rank: 9.9 M phases)."""
    if isinstance(names, PhaseTree):
        codes, uniques = name_codes(names)
        if sort:  # the same codes and names as factorize(sort=True)
            order = np.argsort(uniques, kind="stable")
            codes, uniques = np.argsort(order).astype(codes.dtype)[codes], uniques[order]
    else:
        codes, uniques = pd.factorize(names, sort=sort, use_na_sentinel=False)
    n = len(uniques)
    floats = [k for k, v in columns.items() if np.asarray(v).dtype.kind == "f"]
    sums = dict(zip(floats, exact_group_sums(codes, n, *(columns[k] for k in floats)),
                    strict=True))
    for k, v in columns.items():
        if k not in sums:
            sums[k] = np.zeros(n, np.int64)
            np.add.at(sums[k], codes, np.asarray(v, dtype=np.int64))
    return pd.DataFrame({k: sums[k] for k in columns},
                        index=pd.Index(np.asarray(uniques, dtype=object), name="phase"))


def exclusive(tree: PhaseTree, inclusive: np.ndarray) -> np.ndarray:
    child_sum = np.bincount(tree.parent[tree.parent >= 0],
                            weights=inclusive[tree.parent >= 0], minlength=len(inclusive))
    return inclusive - child_sum


def segments(tree: PhaseTree) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries b_k and the innermost interval index active on [b_k, b_k+1) (-1: none).

    At equal times: ends (innermost first), then starts (outermost first), then the zero-length
    intervals of that instant, each start before its end, so that their segments are empty and
    the one after them is the innermost interval still open (a zero-length `compile` at its
    forward's start once took the forward's whole time: its end sorted before its start)."""
    n = len(tree.start)
    times = np.concatenate([tree.start, tree.end])
    label = np.concatenate([np.arange(n), tree.parent])
    is_start = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])
    zl = np.tile(tree.start == tree.end, 2)
    phase = np.where(zl, 3 - is_start, is_start)  # 0 end, 1 start, 2 empty start, 3 its end
    tie = np.concatenate([tree.depth, -tree.depth])
    order = np.lexsort((tie, phase, times))
    return times[order], label[order]


def segment_index(tree: PhaseTree, series: DeviceSeries,
                  made: tuple[np.ndarray, np.ndarray] | None = None) -> Segments:
    """The segments of a rank's tree on a device's times (relative to its first reading);
    `made`: the tree's `segments` when the caller has them."""
    bounds, label = segments(tree) if made is None else made
    codes, uniques = name_codes(tree)
    names = sorted(set(uniques)) + [UNATTRIBUTED]
    pos = np.array([names.index(u) for u in uniques] + [names.index(UNATTRIBUTED)],
                   dtype=np.int64)  # the last entry: no phase (label -1)
    lab = label[:-1]
    code = pos[np.where(lab >= 0, codes[np.maximum(lab, 0)], len(uniques))] if len(lab) else (
        np.zeros(0, np.int64))
    return Segments(bounds, code, names, series.rel(bounds))
