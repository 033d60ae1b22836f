"""One rank's events prepared a window at a time, in start order (issue 43): the rows the
whole-frame preparation gives (`wrappers.prepared_frame`: warm-up labels `warmup.label_warmup`, the
wrapper intervals `wrappers.wrapper_events`; then `tree.timeline`), put in
`start_order.start_order`, cut into the windows of the external sort (`start_order.start_ordered`).

What the preparation needs from all of a rank's rows is gathered while the sort reads them
(`Gathered`: the first steps by start, how many steps, the first forward and backward, whether
any row is `compile`, the first start and last end, the first row): the sort yields nothing
before it has read them all, so every window is prepared knowing them. A window's rows are then
labelled alone (a row is warm-up when it lies inside one of the warm-up steps: their bounds are
known), and the rows the preparation adds (a compiled run's `compile` copies of its first forward
and backward, the wrapper intervals: a few) are merged in where the whole frame's order puts
them: after every file row of an equal key (they come after the file's rows), in the first
window whose last key is above theirs (or after the last window). Columns and types: the whole
frame's (a column the added rows lack turns as `pd.concat` turns it: `line_no` float). The
windows carry each row's position in the prepared frame (`clamp_windows.POS`) for the clamping
that follows (`prepared_file`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import BACKWARD, COMPILE, FORWARD, STEP, WARMUP, RunMeta, warmup_count
from ..contracts.names import WARMUP_STEPS
from .clamp_windows import POS, clamped_windows
from .rank_split import RankPart, rank_chunks
from .start_order import start_ordered
from .tree import timeline
from .warmup import compile_copies, in_warmup_steps
from .wrappers import wrapper_events


@dataclass
class Gathered:
    """What preparing one rank's rows needs from all of them, gathered a chunk at a time in
    file order (`add`): a few rows and numbers, whatever the rank's length."""

    n_steps: int = 0
    steps: pd.DataFrame | None = None  # the first WARMUP_STEPS step rows by start
    first_fb: pd.DataFrame | None = None  # the first forward and backward by start
    has_compile: bool = False
    first_start: int | None = None
    last_end: int | None = None
    head: pd.DataFrame | None = None  # the file's first row
    rows: int = 0

    def add(self, chunk: pd.DataFrame) -> pd.DataFrame:
        """Gather a chunk (file order) and hand it on."""
        if not len(chunk):
            return chunk
        if self.head is None:
            self.head = chunk.iloc[:1].copy()  # not a view holding the chunk
        self.rows += len(chunk)
        phase = chunk["phase"]
        step = chunk[(phase == STEP).to_numpy()]
        self.n_steps += len(step)
        self.steps = _first_by_start(self.steps, step, None, WARMUP_STEPS)
        fb = chunk[phase.isin([FORWARD, BACKWARD]).to_numpy()]
        self.first_fb = _first_by_start(self.first_fb, fb, "phase", 1)
        self.has_compile |= bool((phase == COMPILE).any())
        lo, hi = int(chunk["start_ns"].min()), int(chunk["end_ns"].max())
        self.first_start = lo if self.first_start is None else min(self.first_start, lo)
        self.last_end = hi if self.last_end is None else max(self.last_end, hi)
        return chunk

    def warm_steps(self) -> np.ndarray:
        """The warm-up steps' (start, end) rows: the first `warmup_count(n)` by start."""
        if self.steps is None:
            return np.zeros((0, 2), np.int64)
        w = self.steps.iloc[:warmup_count(self.n_steps)]
        return np.column_stack([w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)])


def _first_by_start(held: pd.DataFrame | None, new: pd.DataFrame, by: str | None, k: int
                    ) -> pd.DataFrame | None:
    """The first `k` rows by start (of each `by` value), ties in file order, of the rows held
    and a later chunk's (`new`)."""
    if not len(new):
        return held
    both = new if held is None else pd.concat([held, new])
    both = both.sort_values("start_ns", kind="stable")
    return both.groupby(by, sort=False).head(k) if by else both.iloc[:k]


def added_rows(g: Gathered, meta: RunMeta, has_meta: bool, warmup_labels: bool,
               compiled: bool) -> pd.DataFrame:
    """The rows the whole-frame preparation adds to the file's, in its order: a compiled run's
    `compile` copies (`warmup.compile_copies`), then the wrapper intervals."""
    assert g.head is not None
    parts = [g.head.iloc[:0]]
    if warmup_labels and compiled and not g.has_compile and g.first_fb is not None:
        parts.append(compile_copies(g.first_fb))
    if has_meta:  # wrapper_events needs the rank's first row, first start and last end only
        span = g.head.assign(start_ns=g.first_start, end_ns=g.last_end)
        extra = wrapper_events(span, meta)
        if len(extra):
            parts.append(extra)
    added = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return added.assign(**{POS: np.arange(g.rows, g.rows + len(added), dtype=np.int64)})


def _keys(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`start_order`'s keys: start, -end, recorded depth (missing as 0)."""
    depth = (df["depth"].fillna(0).to_numpy(np.float64) if "depth" in df.columns
             else np.zeros(len(df)))
    return df["start_ns"].to_numpy(np.int64), -df["end_ns"].to_numpy(np.int64), depth


def _below(keys: tuple[np.ndarray, ...], bound: tuple[float, ...]) -> np.ndarray:
    """Which keys are lexicographically below `bound` (strictly)."""
    s, ne, d = keys
    below: np.ndarray = (s < bound[0]) | ((s == bound[0]) & ((ne < bound[1]) | (
        (ne == bound[1]) & (d < bound[2]))))
    return below


def _label(w: pd.DataFrame, warm: np.ndarray) -> pd.DataFrame:
    """A window's rows inside a warm-up step renamed `warmup` (`warmup.in_warmup_steps`)."""
    if not len(warm) or not len(w):
        return w
    inside = in_warmup_steps(w, warm)
    if inside.any():
        w = w.copy()
        w.loc[inside, "phase"] = WARMUP
    return w


def prepared_windows(blocks: Iterable[pd.DataFrame], g: Gathered, meta: RunMeta,
                     has_meta: bool, warmup_labels: bool, compiled: bool
                     ) -> Iterator[pd.DataFrame]:
    """The rank's start-ordered blocks prepared (module docstring), each as `tree.timeline`
    leaves it; `g` complete once the first block comes (the sort has read every chunk)."""
    added: pd.DataFrame | None = None
    warm = np.zeros((0, 2), np.int64)
    types: pd.Series | None = None
    for block in blocks:
        if added is None:
            added = added_rows(g, meta, has_meta, warmup_labels, compiled)
            added = added.iloc[np.lexsort(_keys(added)[::-1])]  # stable: their own order kept
            warm = g.warm_steps() if warmup_labels else warm
            # the whole frame's types: its rows and the added ones joined (`pd.concat`)
            types = (pd.concat([block.iloc[:1], added], ignore_index=True).dtypes
                     if len(added) else None)
        block = _label(block, warm)
        last = tuple(float(k[-1]) for k in _keys(block))
        here = _below(_keys(added), last)
        out = _merged(block, added[here], types)
        added = added[~here]
        out = timeline(out)
        if len(out):
            yield out.reset_index(drop=True)
    if added is not None and len(added):
        out = timeline(added.astype(types) if types is not None else added)
        if len(out):
            yield out.reset_index(drop=True)


def _merged(block: pd.DataFrame, add: pd.DataFrame, types: pd.Series | None) -> pd.DataFrame:
    """A window's rows and the added rows that fall in it, in start order (an added row after
    the file rows of its key), with the whole frame's columns and types."""
    if not len(add):
        return block.astype(types) if types is not None else block
    both = pd.concat([block, add], ignore_index=True)
    s, ne, d = _keys(both)
    both = both.iloc[np.lexsort((both[POS].to_numpy(), d, ne, s))]
    return both.astype(types) if types is not None else both


def stream_file(path: str | Path | RankPart, meta: RunMeta, has_meta: bool, warmup_labels: bool,
                compiled: bool, spill_dir: str | Path | None = None,
                chunk_bytes: int | None = None, **sort: int) -> Iterator[pd.DataFrame]:
    """One rank's events file (or part of a file, `rank_split`) read in chunks (`rank_chunks`),
    put in start order by the external sort and prepared a window at a time
    (`prepared_windows`), each row's position in the prepared frame in column `POS`: the rows
    `RankEvents` prepares whole, before clamping, never held whole."""
    g = Gathered()
    chunks = (g.add(c).assign(**{POS: c.index.to_numpy(np.int64)})
              for c in rank_chunks(path, chunk_bytes))
    blocks = start_ordered(chunks, spill_dir, **sort)
    return prepared_windows(blocks, g, meta, has_meta, warmup_labels, compiled)


def prepared_file(path: str | Path, meta: RunMeta, has_meta: bool, warmup_labels: bool,
                  compiled: bool, where: str = "events", spill_dir: str | Path | None = None,
                  chunk_bytes: int | None = None, **sort: int) -> Iterator[pd.DataFrame]:
    """`stream_file`'s windows with their overlaps clamped (`clamp_windows`; `where` names the
    rank in the warning), in the start order of their clamped bounds."""
    return clamped_windows(stream_file(path, meta, has_meta, warmup_labels, compiled, spill_dir,
                                       chunk_bytes, **sort), where)
