"""A rank's exclusive quantities a window of its tree at a time (`tree_windows`), bit for bit
what `tree.exclusive` gives from the whole tree (issue 43: per-name sums of a rank too long to
hold its tree whole).

`exclusive` subtracts from each phase its children's inclusive values, which `np.bincount` sums
one by one in the tree's order starting at 0.0. Here a phase's inclusive values are taken in the
window of its start, its children's are added to it one by one in the same order (`np.add.at`,
carried from window to window while it is open), and the phase is handed back once it closes
(ends before the window's `hi`): the same additions in the same order, so the same bits. Its
name's code is run-wide, in order of first appearance (what `sums_by_name(sort=False)` lists)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .exact_sum import ExactSums
from .tree import NameCodes
from .tree_windows import TreeWindow


@dataclass
class Closed:
    """Phases closed in a window: name codes, inclusive values and their children's sums
    (rows x columns; exclusive = incl - kids); and the name codes of the window's own rows."""

    code: np.ndarray
    incl: np.ndarray
    kids: np.ndarray
    own_code: np.ndarray


class ExclusiveWindows:
    """Feeds a rank's windows in order; `feed` takes the window's own phases' inclusive values
    (its rows after those carried in) and gives back the phases that closed in it."""

    def __init__(self, n_columns: int) -> None:
        self.names = NameCodes()
        self._pos = np.zeros(0, np.int64)
        self._code = np.zeros(0, np.int64)
        self._incl = np.zeros((0, n_columns))
        self._kids = np.zeros((0, n_columns))

    def carried(self) -> int:
        """Phases carried into the next window (its first rows)."""
        return len(self._pos)

    def feed(self, w: TreeWindow, own_incl: np.ndarray) -> Closed:
        """The window's phases that closed, given its own rows' inclusive values (own rows x
        columns)."""
        tree, k = w.tree, len(self._pos)
        if not np.array_equal(w.rows[:k], self._pos):
            raise ValueError("ExclusiveWindows: a window's first rows are not the phases "
                             "carried from the window before (tree_windows' order)")
        own_code = self.names.of(tree.name[k:])
        code = np.concatenate([self._code, own_code])
        incl = np.concatenate([self._incl, np.asarray(own_incl, np.float64).reshape(
            len(tree.start) - k, self._incl.shape[1])])
        kids = np.concatenate([self._kids, np.zeros((len(tree.start) - k, self._kids.shape[1]))])
        child = np.flatnonzero(tree.parent[k:] >= 0) + k
        np.add.at(kids, tree.parent[child], incl[child])
        done = tree.end < w.hi
        self._pos, self._code = w.rows[~done], code[~done]
        self._incl, self._kids = incl[~done], kids[~done]
        return Closed(code[done], incl[done], kids[done], own_code)

    def name_index(self) -> pd.Index:
        """The names in order of first appearance, as `sums_by_name(sort=False)` indexes them."""
        return pd.Index(self.names.uniques, name="phase")


def own_rows(w: TreeWindow, carried: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A window's own rows' (start, end, whether at the top level) after the `carried` ones."""
    t = w.tree
    return t.start[carried:], t.end[carried:], t.parent[carried:] < 0


#: a window's own rows' (start, end) -> their inclusive values and the values their top-level
#: sums take (rows x columns each; the same arrays where they are one)
OwnValues = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class WindowSums:
    """What a pass over a rank's windows sums: per name (index in order of first appearance,
    as `sums_by_name(sort=False)`'s) each column's exclusive total and the phase count; each
    column's total over the top-level phases. All sums correctly rounded (`exact_sum`)."""

    by_name: pd.DataFrame
    top: np.ndarray


def sums_over_windows(windows: Iterable[TreeWindow], values: OwnValues,
                      columns: list[str], kids_sign: float = -1.0) -> WindowSums:
    """One pass over a rank's windows: each phase's inclusive values (`values` of its start
    and end, in the window of its start) made exclusive once it closes (`ExclusiveWindows`) and
    summed per name; the top-level phases' values summed. `kids_sign` 1: each phase's value
    plus its children's instead (what the settling sums, `settle.settle_halfwidth`)."""
    n = len(columns)
    ex, by_name, top = ExclusiveWindows(n), ExactSums(n), ExactSums(n)
    counts = np.zeros(0, np.int64)
    for w in windows:
        start, end, at_top = own_rows(w, ex.carried())
        incl, top_values = values(start, end)
        top.add(None, *np.asarray(top_values)[at_top].T)
        closed = ex.feed(w, incl)
        counts = np.concatenate([counts, np.zeros(len(ex.names) - len(counts), np.int64)])
        counts += np.bincount(closed.own_code, minlength=len(ex.names))
        by_name.add(closed.code, *(closed.incl + kids_sign * closed.kids).T)
    table = pd.DataFrame(dict(zip(columns, by_name.totals(len(ex.names)), strict=True)),
                         index=ex.name_index())
    table["count"] = counts
    return WindowSums(table, np.array([float(t[0]) for t in top.totals(1)]))
