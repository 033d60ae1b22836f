"""The clamping of a rank's small overlaps (`tree.clamp_events`) applied to its prepared rows a
start-ordered window at a time (issue 43), the rows then put in the start order of their
clamped bounds (`start_order.start_order`, ties in the prepared frame's row order: the column
`POS`, dropped from the rows yielded).

`tree.resolve_overlaps` moves only the later of two overlapping rows (its start to the other's
end, or its end to it), and a start only ever moves later. A window is clamped after the rows
of earlier windows it can depend on (`_context`: those still open, and again those open at the
start of one kept), with their unclamped bounds, so the whole frame's passes are replayed on
them; its rows whose clamped start lies before the window's last start `L` are final (every
later row starts at `L` or after) and yielded; the others are carried, unclamped, into the next
window. The warning is `clamp_events`' own, counted over all windows, given after the last.

Equal to the whole frame's on every rank `phase_tree` accepts that the tests tried (72 random
ranks with 2-30 % of rows moved by up to 0.9 ms, windows of 3 rows). Not proven in
general: the whole frame's passes clamp all of a pass's overlaps at once, and behind an overlap
no clamp settles (a rank `phase_tree` then refuses, whole or windowed) rows are clamped
differently (12 of 88 such ranks; `test_where_windows_differ_the_rank_is_refused`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd

from .tree import OVERLAP_TOL_NS, resolve_overlaps

#: the prepared frame's row position of each row (ties of the start order)
POS = "__wl_pos"


class _Count:
    """The clamped rows counted over the windows: how many, the largest move, the total."""

    def __init__(self) -> None:
        self.n, self.largest, self.total = 0, 0, 0

    def add(self, c: np.ndarray) -> None:
        moved = c[c > 0]
        self.n += len(moved)
        self.largest = max(self.largest, int(moved.max(initial=0)))
        self.total += int(moved.sum())


def clamped_windows(windows: Iterable[pd.DataFrame], where: str = "events",
                    tol_ns: int = OVERLAP_TOL_NS) -> Iterator[pd.DataFrame]:
    """One rank's prepared rows (start-ordered windows with `POS`) clamped as `clamp_events`
    clamps them whole, in the start order of their clamped bounds (module docstring)."""
    open_s = open_e = np.zeros(0, np.int64)
    pending: pd.DataFrame | None = None
    count = _Count()
    for w in windows:
        if not len(w):
            continue
        rows = w if pending is None else pd.concat([pending, w], ignore_index=True)
        last = int(w["start_ns"].iat[-1])
        out, pending, open_s, open_e = _clamp(rows, open_s, open_e, last, tol_ns, count)
        if len(out):
            yield out
    if pending is not None and len(pending):
        yield _clamp(pending, open_s, open_e, None, tol_ns, count)[0]
    if count.n:
        warnings.warn(f"{where}: {count.n} phase boundar{'y' if count.n == 1 else 'ies'} "
                      f"overlapping a neighbour by at most {tol_ns / 1e6:g} ms clamped (largest "
                      f"{count.largest / 1e3:.1f} us, total {count.total / 1e3:.1f} us): "
                      "GPU-timeline boundaries mapped to the host clock through different "
                      "anchors", stacklevel=2)


def _clamp(rows: pd.DataFrame, open_s: np.ndarray, open_e: np.ndarray, last: int | None,
           tol_ns: int, count: _Count
           ) -> tuple[pd.DataFrame, pd.DataFrame | None, np.ndarray, np.ndarray]:
    """The rows clamped after the open ones (final bounds, sorted before them): (the final rows
    in start order, the rows carried unclamped, the open rows' bounds for the next window)."""
    k = len(open_s)
    s, e, c = resolve_overlaps(np.concatenate([open_s, rows["start_ns"].to_numpy(np.int64)]),
                               np.concatenate([open_e, rows["end_ns"].to_numpy(np.int64)]),
                               tol_ns)
    s, e, c = s[k:], e[k:], c[k:]
    final = np.ones(len(rows), bool) if last is None else s < last
    prior = (rows["clamp_ns"].fillna(0).astype(np.int64).to_numpy()
             if "clamp_ns" in rows.columns else 0)
    out = rows[final].assign(start_ns=s[final], end_ns=e[final])
    out["clamp_ns"] = (c + prior)[final] if "clamp_ns" in rows.columns else c[final]
    count.add(c[final])
    depth = (out["depth"].fillna(0).to_numpy(np.float64) if "depth" in out.columns
             else np.zeros(len(out)))
    order = np.lexsort((out[POS].to_numpy(), depth, -out["end_ns"].to_numpy(np.int64),
                        out["start_ns"].to_numpy(np.int64)))
    out = out.iloc[order].drop(columns=POS).reset_index(drop=True)
    open_s = np.concatenate([open_s, rows["start_ns"].to_numpy(np.int64)[final]])
    open_e = np.concatenate([open_e, rows["end_ns"].to_numpy(np.int64)[final]])
    carried = rows[~final] if not final.all() else None
    if last is not None:  # what a carried or later row's clamping can still depend on
        cut = min(last, int(carried["start_ns"].min())) if carried is not None else last
        open_s, open_e = _context(open_s, open_e, cut)
    return out, carried, open_s, open_e


def _context(s: np.ndarray, e: np.ndarray, cut: int) -> tuple[np.ndarray, np.ndarray]:
    """Of rows (unclamped bounds) all starting before `cut`, those a row starting at `cut` or
    later can depend on: the ones still open at `cut`, and, again and again, the ones open at
    the start of a row kept (they set its depth, so which row is its parent, and its own
    clamping); in `resolve_overlaps`' order."""
    order = np.lexsort((-e, s))
    s, e = s[order], e[order]
    keep = e > cut
    while True:
        kept_s = np.where(keep, s, np.iinfo(np.int64).max)
        after = np.minimum.accumulate(kept_s[::-1])[::-1]  # least start kept at or after
        later = np.append(after[1:], np.iinfo(np.int64).max)
        more = ~keep & (e > later)
        if not more.any():
            return s[keep], e[keep]
        keep |= more
