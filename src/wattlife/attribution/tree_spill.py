"""A long rank's phase tree kept on disk a window at a time (`SpilledTree`, issue 43): what a
device's attribution holds of its rank grows with a window, not with the run.

Built in one pass over the rank's windows (`tree_windows`): each window's tree arrays, its
rows' names as run-wide codes (in order of first appearance: `tree.name_codes`' order) and its
segments on [lo, hi) (`TreeWindow.segments`' boundaries, each with the name of the innermost
phase after it) are written to a folder of `.npy` files. The windows' segments, one after the
other, are the whole tree's `segments` boundary for boundary (a window's [lo, hi) holds the
whole tree's boundaries there, with their labels; test_tree_windows), so the segment lookup
read back a piece at a time (`SpilledSegments`) gives the whole tree's index rows bit for bit.
Each pass over the tree (`windows`) reads the windows again, one at a time."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..contracts import UNATTRIBUTED
from .segment_lookup import SegmentLookup
from .series import DeviceSeries
from .tree import NameCodes, PhaseTree, name_codes, segment_index, segments
from .tree_windows import TreeWindow

#: a window's arrays on disk: its tree's, its rows' stream positions and name codes, and its
#: segments on [lo, hi) (boundaries, each boundary's name code and innermost phase as a stream
#: position, -1 where no phase is open)
_FIELDS = ("start", "end", "depth", "parent", "rows", "code", "seg_bounds", "seg_code",
           "seg_label")


class SpilledTree:
    """A rank's tree in windows on disk (module docstring): `windows()` reads them back in
    order; the names (`uniques`, in order of first appearance) and each one's phase count, the
    number of phases and the windows' bounds are held. `close` removes the folder (also when
    the object is collected)."""

    def __init__(self, spill_dir: str | Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=".wattlife-tree-", dir=spill_dir))
        self._remove = weakref.finalize(self, shutil.rmtree, self.path, True)
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.n_bounds: list[int] = []
        self.first_bound: list[int] = []
        self._names = NameCodes()
        self.counts = np.zeros(0, np.int64)
        self.n_phases = 0

    @classmethod
    def build(cls, windows: Iterable[TreeWindow], spill_dir: str | Path | None = None
              ) -> SpilledTree:
        """The tree of a rank's windows (`tree_windows`), each written as it comes."""
        out = cls(spill_dir)
        try:
            for w in windows:
                out._write(w)
        except BaseException:
            out.close()
            raise
        return out

    def _write(self, w: TreeWindow) -> None:
        """One window's arrays to disk; its own rows' names counted."""
        k = len(self.lo)
        code = self._names.of(w.tree.name).astype(np.int32)  # 4 bytes a row on disk
        own = w.tree.start >= w.lo
        bounds, label = segments(w.tree)
        seg_code = np.where(label >= 0, code[np.maximum(label, 0)], np.int32(-1))
        seg_label = np.where(label >= 0, w.rows[np.maximum(label, 0)], -1)
        a, b = np.searchsorted(bounds, [w.lo, w.hi], side="left")
        arrays = {"start": w.tree.start, "end": w.tree.end, "depth": w.tree.depth,
                  "parent": w.tree.parent, "rows": w.rows, "code": code,
                  "seg_bounds": bounds[a:b].astype(np.int64), "seg_code": seg_code[a:b],
                  "seg_label": seg_label[a:b]}
        for f in _FIELDS:
            np.save(self.path / f"{k}.{f}.npy", np.asarray(arrays[f]))
        grown = np.zeros(len(self._names), np.int64)
        grown[:len(self.counts)] = self.counts
        self.counts = grown + np.bincount(code[own], minlength=len(self._names))
        self.n_phases += int(own.sum())
        self.lo.append(w.lo)
        self.hi.append(w.hi)
        self.n_bounds.append(int(b - a))
        self.first_bound.append(int(bounds[a]) if b > a else w.lo)

    @property
    def uniques(self) -> np.ndarray:
        """The rank's distinct names in order of first appearance (`tree.name_codes`')."""
        return self._names.uniques

    def read(self, k: int, field: str) -> np.ndarray:
        """One array of window k."""
        result: np.ndarray = np.load(self.path / f"{k}.{field}.npy")
        return result

    def windows(self) -> Iterator[TreeWindow]:
        """The rank's windows again, one at a time, in order (`tree_windows`' windows)."""
        names = self.uniques
        for k, (lo, hi) in enumerate(zip(self.lo, self.hi, strict=True)):
            code = self.read(k, "code")
            tree = PhaseTree(names[code], self.read(k, "start"), self.read(k, "end"),
                             self.read(k, "depth"), self.read(k, "parent"))
            yield TreeWindow(lo, hi, tree, self.read(k, "rows"))

    def labelled_segments(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The whole tree's `segments` a window's piece at a time: boundaries (ns), the
        innermost phase after each (its row in the whole tree, -1: none) and its name
        (`UNATTRIBUTED` for none)."""
        uniques = np.append(self.uniques, UNATTRIBUTED)  # code -1: the last entry
        for k in range(len(self.lo)):
            yield (self.read(k, "seg_bounds"), self.read(k, "seg_label"),
                   uniques[self.read(k, "seg_code")])

    def close(self) -> None:
        """Removes the folder."""
        self._remove()


def assembled_tree(windows: Iterable[TreeWindow]) -> PhaseTree:
    """The whole tree of a rank from its windows (`tree_windows`): each window's own rows (those
    starting at or after its `lo`; the carried ones are an earlier window's) with their depth,
    and their parent as a stream position, which is the whole tree's row index (the stream is
    in `phase_tree`'s order). What is held: the tree's five arrays, not the rows' frames."""
    parts: list[tuple[np.ndarray, ...]] = []
    for w in windows:
        own = w.tree.start >= w.lo
        parent = np.where(w.tree.parent >= 0, w.rows[np.maximum(w.tree.parent, 0)], -1)
        parts.append((w.tree.name[own], w.tree.start[own], w.tree.end[own], w.tree.depth[own],
                      parent[own]))
    if not parts:
        return PhaseTree(np.zeros(0, object), np.zeros(0, np.int64), np.zeros(0, np.int64),
                         np.zeros(0, np.int64), np.zeros(0, np.int64))
    name, start, end, depth, parent = (np.concatenate([p[k] for p in parts]) for k in range(5))
    return PhaseTree(name, start, end, depth, parent)


class SpilledSegments(SegmentLookup):
    """A spilled tree's segments on a device's times, read a window's piece at a time (the
    last piece read kept): `SegmentLookup`'s lookups, the whole tree's bit for bit."""

    def __init__(self, tree: SpilledTree, series: DeviceSeries) -> None:
        uniques = list(tree.uniques)
        names = sorted(set(uniques)) + [UNATTRIBUTED]
        super().__init__(names)
        # a stored code's place in `names`; the last entry for -1 (no phase open)
        self._pos = np.array([names.index(u) for u in uniques] + [names.index(UNATTRIBUTED)],
                             np.int64)
        self._tree, self._series = tree, series
        self._offset = np.concatenate([[0], np.cumsum(tree.n_bounds, dtype=np.int64)])
        self._first_rel = series.rel(np.array(tree.first_bound, np.int64))
        self._held: tuple[int, np.ndarray, np.ndarray] | None = None

    @property
    def n_bounds(self) -> int:
        return int(self._offset[-1])

    def _piece(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Window k's boundaries (relative times) and their names' places in `names`."""
        if self._held is None or self._held[0] != k:
            rel = self._series.rel(self._tree.read(k, "seg_bounds"))
            self._held = (k, rel, self._pos[self._tree.read(k, "seg_code")])
        return self._held[1], self._held[2]

    def count_le(self, x: float) -> int:
        k = int(np.searchsorted(self._first_rel, x, side="right")) - 1
        if k < 0:
            return 0
        return int(self._offset[k]) + int(np.searchsorted(self._piece(k)[0], x, side="right"))

    def _slice(self, a: int, b: int, which: int) -> np.ndarray:
        """Boundaries a..b-1's relative times (which 0) or names (which 1), across pieces."""
        if b <= a:
            return np.zeros(0, np.float64 if which == 0 else np.int64)
        k0 = int(np.searchsorted(self._offset, a, side="right")) - 1
        k1 = int(np.searchsorted(self._offset, b - 1, side="right")) - 1
        parts = [self._piece(k)[which][max(a - int(self._offset[k]), 0):
                                       b - int(self._offset[k])] for k in range(k0, k1 + 1)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def rel_slice(self, a: int, b: int) -> np.ndarray:
        return self._slice(a, b, 0)

    def code_slice(self, a: int, b: int) -> np.ndarray:
        return self._slice(a, b, 1)

    def pieces(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = len(self._tree.n_bounds)
        for k in range(n):
            bounds = self._tree.read(k, "seg_bounds")
            code = self._pos[self._tree.read(k, "seg_code")]
            if k + 1 < n:
                yield np.append(bounds, self._tree.first_bound[k + 1]), code
            else:
                yield bounds, code[:-1]


#: a rank's tree: whole, or on disk a window at a time
AnyTree = PhaseTree | SpilledTree


def tree_segments(tree: AnyTree, series: DeviceSeries) -> SegmentLookup:
    """A rank's segments on a device's times, whichever way the tree is kept."""
    return SpilledSegments(tree, series) if isinstance(tree, SpilledTree) else (
        segment_index(tree, series))


def phase_count(tree: AnyTree) -> int:
    """The number of phases of a rank's tree."""
    return tree.n_phases if isinstance(tree, SpilledTree) else len(tree.start)


def count_by_name(tree: AnyTree) -> dict[str, int]:
    """Each name's number of phases."""
    if isinstance(tree, SpilledTree):
        return dict(zip(tree.uniques, map(int, tree.counts), strict=True))
    codes, uniques = name_codes(tree)
    return dict(zip(uniques, map(int, np.bincount(codes, minlength=len(uniques))), strict=True))
