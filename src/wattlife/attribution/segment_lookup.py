"""Which phase name holds each instant of a rank's time, looked up for a device's readings:
the segment index (`SegmentIndex`: per name, cumulative exclusive time at each boundary) and the
segments it is built from (`SegmentLookup`: whole, or one time window at a time, in memory or on
disk; issue 43). `tree.segment_index` makes a tree's."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np

from ..contracts import UNATTRIBUTED


class SegmentIndex:
    """Per phase name, cumulative exclusive time up to each segment boundary: one row of `cum`
    per boundary, one column per distinct name, so that a reading's row is one gather."""

    def __init__(self, bounds: np.ndarray, code: np.ndarray, names: list[str],
                 carry: np.ndarray | None = None) -> None:
        """`code`: each segment's name as its first index in `names` (-1: none of them).
        `carry`: each name's time before the first boundary (`Segments.window`: a time window's
        index starts from the run's sums there); zeros by default."""
        self.bounds = bounds.astype(np.float64)
        self.seg_len = np.diff(self.bounds)
        self.names = names
        self._col, to_col = _columns(names)
        self.code = to_col[np.asarray(code, dtype=np.int64)]  # -1 stays -1 (the last entry)
        self.cum = _accumulate(self.seg_len, self.code, int(to_col.max()) + 1, carry)

    def _at(self, t: np.ndarray) -> np.ndarray:
        """Each name's exclusive time before t (rows: t, columns: distinct names)."""
        nseg = len(self.seg_len)
        k = self._segment_of(t)
        kk = np.clip(k, 0, max(nseg - 1, 0))
        out: np.ndarray = self.cum[np.clip(k, 0, nseg)]
        code = self.code[kk]
        r = np.flatnonzero((k >= 0) & (k < nseg) & (code >= 0))
        # the part of t's own segment, added to its name's column (flat: one 1-d gather)
        out.reshape(-1)[r * out.shape[1] + code[r]] += (t - self.bounds[kk])[r]
        return out

    def _segment_of(self, t: np.ndarray) -> np.ndarray:
        """The last boundary at or before each t (-1: none), searched among the boundaries
        between t's least and greatest only (a block of readings: a slice that stays in cache)."""
        if not len(t):
            return np.searchsorted(self.bounds, t, side="right") - 1
        a, b = np.searchsorted(self.bounds, [np.min(t), np.max(t)], side="right")
        result: np.ndarray = np.searchsorted(self.bounds[a:b], t, side="right") + (a - 1)
        return result

    def overlap(self, t_ns: np.ndarray, window_ns: float,
                at_t: np.ndarray | None = None) -> np.ndarray:
        """A[i, n] = share of reading i's window [t_i - w, t_i] spent in phase name n
        (`at_t`: `_at(t_ns)` when the caller has it, for several windows of the same readings)."""
        a: np.ndarray = self._at(t_ns - window_ns)
        np.subtract(self._at(t_ns) if at_t is None else at_t, a, out=a)
        a /= window_ns  # in place: no third readings x names array
        if len(self._col) != a.shape[1]:  # a name listed twice: the same column twice
            a = a[:, self._col]
        # time outside every boundary (before the first, after the last) counts as unattributed
        if UNATTRIBUTED in self.names:
            j = self.names.index(UNATTRIBUTED)
            a[:, j] = np.clip(1.0 - (a.sum(axis=1) - a[:, j]), 0.0, 1.0)
        return a

    def overlaps(self, t_ns: np.ndarray, windows_ns: list[float]) -> Iterator[np.ndarray]:
        """`overlap` of the same readings for each window in turn (their ends looked up once)."""
        at_t = self._at(t_ns)
        return (self.overlap(t_ns, w, at_t) for w in windows_ns)


def _columns(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(each name's column of `cum`, the map from a name's first index in `names` to its
    column; its last entry, for code -1, is -1): a name listed twice has one column."""
    first = [names.index(nm) for nm in names]
    uniq = sorted(set(first))
    to_col = np.full(len(names) + 1, -1, dtype=np.int64)
    to_col[uniq] = np.arange(len(uniq))
    return np.array([uniq.index(f) for f in first], dtype=np.int64), to_col


def _accumulate(seg_len: np.ndarray, code: np.ndarray, k: int,
                carry: np.ndarray | None) -> np.ndarray:
    """Row j + 1: each of `k` names' time in segments 0..j, after row 0 = `carry` (zeros).
    Column by column the same sums as one cumsum per name (add.accumulate is sequential), so
    a window's rows started from the run's row at its first boundary are the run's rows, bit
    for bit; summed in place (no second copy)."""
    cum = np.zeros((len(seg_len) + 1, k))
    if carry is not None:
        cum[0] = carry
    seg = np.flatnonzero(code >= 0)
    cum[seg + 1, code[seg]] = seg_len[seg]
    np.cumsum(cum, axis=0, out=cum)
    return cum


class SegmentLookup(ABC):
    """A rank's segments on a device: the boundaries (ns, and relative to the series' first
    reading) and each segment's name (index into `names`, first occurrence), however they are
    kept (`Segments`: in memory; `tree_spill.SpilledSegments`: on disk, a piece at a time).

    `window(lo, hi)` is the segment index of the boundaries around one time window only, its
    cumulative times started from the run's at its first boundary: the same rows as the whole
    run's index (`index`, built on first use), bit for bit, in memory that grows with the
    window, not with the run (issue 43). Windows asked for in increasing time reuse the sums
    up to the last one; an earlier window starts them again from the run's first boundary."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self._whole: SegmentIndex | None = None
        self._last: tuple[int, np.ndarray] | None = None  # last window's first boundary, cum

    @property
    @abstractmethod
    def n_bounds(self) -> int:
        """The number of boundaries."""

    @abstractmethod
    def count_le(self, x: float) -> int:
        """How many boundaries' relative times are at or before `x`."""

    @abstractmethod
    def rel_slice(self, a: int, b: int) -> np.ndarray:
        """Boundaries a..b-1, relative to the series' first reading."""

    @abstractmethod
    def code_slice(self, a: int, b: int) -> np.ndarray:
        """The names of segments a..b-1 (segment k: from boundary k to k + 1)."""

    @abstractmethod
    def pieces(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(boundaries in ns, the names of the segments they start) a piece at a time in time
        order; a piece's boundaries end with the next piece's first (the last piece: one more
        boundary than names)."""

    @property
    def index(self) -> SegmentIndex:
        """The whole run's segment index (all boundaries at once)."""
        if self._whole is None:
            n = self.n_bounds
            self._whole = SegmentIndex(self.rel_slice(0, n), self.code_slice(0, max(n - 1, 0)),
                                       self.names)
        return self._whole

    def window(self, lo: float, hi: float) -> SegmentIndex:
        """The index of the boundaries from the last one at or before `lo` to the first one
        after `hi` (relative times): what `SegmentIndex` looks up for any t in [lo, hi]."""
        nb = self.n_bounds
        a = max(self.count_le(lo) - 1, 0)
        a = min(a, max(nb - 2, 0))  # one segment at least, as the run's index has
        b = min(max(self.count_le(hi) + 1, a + 2), nb)
        carry = self._carry(a)
        idx = SegmentIndex(self.rel_slice(a, b), self.code_slice(a, max(b - 1, a)), self.names,
                           carry)
        self._last = (a, idx.cum)
        return idx

    def _carry(self, a: int) -> np.ndarray:
        """Each name's time before boundary `a` (row a of the whole index's `cum`), summed in
        the whole index's order from the nearest row known."""
        col = _columns(self.names)[1]
        k = int(col.max()) + 1
        pos, row = 0, np.zeros(k)
        if self._last is not None and self._last[0] <= a:
            last_a, cum = self._last
            j = min(a - last_a, len(cum) - 1)
            pos, row = last_a + j, cum[j]
        step = 1 << 20
        while pos < a:  # bounded pieces: never the whole run's table
            end = min(a, pos + step)
            seg_len = np.diff(self.rel_slice(pos, end + 1))
            row = _accumulate(seg_len, col[np.asarray(self.code_slice(pos, end), np.int64)], k,
                              row)[-1]
            pos = end
        return np.array(row, copy=True)


class Segments(SegmentLookup):
    """A rank's segments held in memory (`tree.segment_index`): the boundaries (ns, and
    relative to the series' first reading), each segment's name (index into `names`)."""

    def __init__(self, bounds: np.ndarray, code: np.ndarray, names: list[str],
                 rel: np.ndarray) -> None:
        super().__init__(names)
        self.bounds, self.code, self.rel = bounds, code, rel

    @property
    def n_bounds(self) -> int:
        return len(self.rel)

    def count_le(self, x: float) -> int:
        return int(np.searchsorted(self.rel, x, side="right"))

    def rel_slice(self, a: int, b: int) -> np.ndarray:
        return self.rel[a:b]

    def code_slice(self, a: int, b: int) -> np.ndarray:
        return self.code[a:b]

    def pieces(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield self.bounds, self.code
