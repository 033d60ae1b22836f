"""One rank's phase tree built a window of events at a time from the start-ordered stream
(`start_order.start_ordered`), for ranks too long to hold whole (issue 43).

A window takes the next `window_rows` rows or more (never cutting rows of one start apart) and
the rows of earlier windows still open at its first start `lo` (ending at or after it: the
ancestors of its rows, and siblings ending at `lo`). That set holds every ancestor of each of
its rows, so `tree.phase_tree` of it gives each row the depth and parent the whole tree gives
(sorted before any of the window's own rows, the carried rows keep their order), and every
overlap the whole tree reports is reported by the window of its later row. The innermost phase
at each instant of [lo, hi) is active then, so it is among the window's rows: the window's
segments restricted to [lo, hi) (`restrict`) are the whole tree's restricted alike. Memory:
a window's rows plus the ancestors open at its edge."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .tree import PhaseTree, phase_tree, segments

#: no end: the last window's `hi`
NO_END = np.iinfo(np.int64).max
#: new rows of a window (the rows of its last start all join it)
WINDOW_ROWS = 1 << 16


@dataclass
class TreeWindow:
    """A window of one rank's tree: its rows' own time from `lo` (its first row's start) to
    `hi` (the next window's `lo`, `NO_END` for the last), the tree of its rows and the rows
    carried into it, each tree row's position in the start-ordered stream, and those rows
    (`check.events_stream` reads their other columns)."""

    lo: int
    hi: int
    tree: PhaseTree
    rows: np.ndarray
    #: the window's rows (carried, then its own) as the stream gave them, one a tree row
    frame: pd.DataFrame | None = None

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """The window's segments on [lo, hi): boundaries and each segment's innermost row as its
        stream position (-1: none), as `restrict` gives them."""
        bounds, label = segments(self.tree)
        return restrict(bounds, np.where(label >= 0, self.rows[np.maximum(label, 0)], -1),
                        self.lo, self.hi)


def restrict(bounds: np.ndarray, label: np.ndarray, lo: int, hi: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Segments (`tree.segments`' boundaries and labels) on [lo, hi): `lo` with the label of the
    last boundary before it (when one is), then every boundary in [lo, hi) with its label."""
    k0 = int(np.searchsorted(bounds, lo, side="left"))
    k1 = int(np.searchsorted(bounds, hi, side="left"))
    head_b = np.array([lo], np.int64) if k0 > 0 else np.zeros(0, np.int64)
    head_l = label[k0 - 1:k0] if k0 > 0 else np.zeros(0, np.int64)
    return (np.concatenate([head_b, bounds[k0:k1].astype(np.int64)]),
            np.concatenate([head_l, label[k0:k1]]).astype(np.int64))


def _cut(start: np.ndarray, want: int) -> int | None:
    """Where a window of at least `want` of these rows ends: the first row after them whose
    start differs from its predecessor's; None when the rows in hand do not show it yet."""
    if len(start) <= want:
        return None
    change = np.flatnonzero(start[want:] != start[want - 1:-1])
    return int(want + change[0]) if len(change) else None


def _in_start_order(start: np.ndarray, where: str) -> None:
    """A window's own rows must come in start order (`start_ordered`): `phase_tree` would sort
    them again, and the rows' stream positions would no longer be the tree's rows."""
    if len(start) > 1 and bool((start[1:] < start[:-1]).any()):
        i = int(np.flatnonzero(start[1:] < start[:-1])[0])
        raise ValueError(f"{where}: tree_windows needs rows in start order (start_ordered); a "
                         f"row starting at {start[i + 1]} follows one starting at {start[i]}")


def tree_windows(blocks: Iterable[pd.DataFrame], window_rows: int = WINDOW_ROWS,
                 where: str = "events") -> Iterator[TreeWindow]:
    """The windows of one rank's tree from its rows in start order (`start_ordered`'s blocks),
    one at a time (module docstring); `where` names the rank in an overlap's error."""
    want = max(int(window_rows), 1)
    pending: list[pd.DataFrame] = []
    carried = pd.DataFrame()
    carried_pos = np.zeros(0, np.int64)
    first = 0  # stream position of the first pending row
    it = iter(blocks)
    done = False
    while True:
        held = pd.concat(pending, ignore_index=True) if len(pending) > 1 else (
            pending[0] if pending else pd.DataFrame())
        start = held["start_ns"].to_numpy(np.int64) if len(held) else np.zeros(0, np.int64)
        cut = _cut(start, want)
        if cut is None and not done:
            block = next(it, None)
            if block is None:
                done = True
            elif len(block):
                pending = [held, block.reset_index(drop=True)] if len(held) else [block]
            continue
        if not len(held):
            return
        n = len(held) if cut is None else cut
        _in_start_order(start[:n + 1], where)  # and the next window's first
        own = held.iloc[:n]
        rows = pd.concat([carried, own], ignore_index=True) if len(carried) else (
            own.reset_index(drop=True))
        pos = np.concatenate([carried_pos, np.arange(first, first + n, dtype=np.int64)])
        lo = int(start[0])
        hi = NO_END if cut is None else int(start[cut])
        yield TreeWindow(lo, hi, phase_tree(rows, where=where), pos, rows)
        still = (rows["end_ns"].to_numpy(np.int64) >= hi) if cut is not None else None
        if still is None:
            return
        carried = rows[still].reset_index(drop=True)
        carried_pos = pos[still]
        pending = [held.iloc[n:].reset_index(drop=True)]
        first += n
