"""One rank's events put from the order the markers write them (end order) into the order the
phase tree needs (start order) in bounded memory: an external sort (issue 43), also the one
`merge-nodes` sorts its events with (`sorted_blocks`, by its own keys: `merge_events`).

`start_ordered(chunks)` takes a rank's rows a chunk at a time (file order), sorts each run of
about `run_rows` rows in memory and spills it (Parquet), then merges the runs k ways, a block of
each run held at a time, and yields the rows in blocks. The order is `tree.phase_tree`'s:
(start_ns, -end_ns, recorded depth with missing as 0), ties in file order (its lexsort is
stable; here the rows' position in the stream is the last key), so the blocks joined are the
rows of `events.iloc[order]`, bit for bit (the columns and their types as the chunks give them).
Memory: one run while it is sorted, then `block_rows` rows of each run, `MERGE_ROWS` rows of all
runs together (a day of one rank: 1.4 M rows, 6 runs of 256 k; 3 days: 17 runs). With a
`fan_in` (`sorted_blocks`; `merge-nodes` gives 32), more runs than that are first merged that
many at a time into longer ones (a pass more over the rows): the last merge's rounds then take
blocks of `MERGE_ROWS / fan_in` rows or more of each run, however long the stream (a day of two
8-rank nodes: 87 runs, one pass more; 6 h: 22 runs, none). `start_ordered` merges all its runs
at once, as before (its blocks are `prepare_windows`' windows)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

#: rows sorted in memory and spilled as one run
RUN_ROWS = 1 << 18
#: rows of each run held at a time while merging (at most)
BLOCK_ROWS = 1 << 15
#: rows of all runs held at a time while merging: each run's block shrinks as runs add up (to
#: 1024 rows at least), so the merge's memory does not grow with the rank's length
MERGE_ROWS = 1 << 17
#: rows of a spilled run's Parquet row groups: a reader decodes a whole group, so one group of
#: each run is held while merging whatever the blocks asked for
GROUP_ROWS = 1 << 13
#: the sort keys kept beside a spilled run's rows (dropped from the rows yielded)
_KEYS = ("__wl_start", "__wl_negend", "__wl_depth", "__wl_row")

#: a chunk's sort keys by column name (`chunk`, the row of the stream it starts at), the last
#: one each row's position in the stream: it makes the order total (ties in stream order)
KeyFn = Callable[[pd.DataFrame, int], dict[str, np.ndarray]]
#: a spilled run: its rows, sorted, in the files read one after another
Run = list[Path]


def start_order(events: pd.DataFrame) -> np.ndarray:
    """The in-memory order of one rank's rows: `tree.phase_tree`'s (start, -end, recorded depth,
    missing as 0), ties in row order (np.lexsort is stable)."""
    return np.lexsort(list(_tree_keys(events, 0).values())[:3][::-1])


def _tree_keys(df: pd.DataFrame, first_row: int = 0) -> dict[str, np.ndarray]:
    """(start, -end, depth key, row position) of a chunk whose first row is `first_row` of the
    stream, as `tree.phase_tree` computes them."""
    depth = (df["depth"].fillna(0).to_numpy(np.float64) if "depth" in df.columns
             else np.zeros(len(df)))
    keys = (df["start_ns"].to_numpy(np.int64), -df["end_ns"].to_numpy(np.int64), depth,
            np.arange(first_row, first_row + len(df), dtype=np.int64))
    return dict(zip(_KEYS, keys, strict=True))


def _sorted_run(df: pd.DataFrame, first_row: int, keys: KeyFn
                ) -> tuple[pd.DataFrame, list[str]]:
    """A run's rows with their keys as columns, sorted by them (the row key makes it total);
    the keys' names."""
    cols = keys(df, first_row)
    out = df.reset_index(drop=True).assign(**cols)
    return out.iloc[np.lexsort(list(cols.values())[::-1])].reset_index(drop=True), list(cols)


def _spill(chunks: Iterable[pd.DataFrame], tmp: Path, run_rows: int, keys: KeyFn
           ) -> tuple[list[Run], list[str]]:
    """The chunks gathered into runs of at least `run_rows` rows (the last: what is left),
    each sorted and written to `tmp`; the runs in stream order, the keys' names."""
    runs: list[Run] = []
    held: list[pd.DataFrame] = []
    n_held, first = 0, 0
    names: list[str] = []

    def flush() -> None:
        nonlocal held, n_held, first, names
        if not held:
            return
        run, names = _sorted_run(pd.concat(held, ignore_index=True) if len(held) > 1
                                 else held[0], first, keys)
        held, first, n_held = [], first + n_held, 0
        runs.append([tmp / f"run{len(runs)}.parquet"])
        run.to_parquet(runs[-1][0], index=False, row_group_size=GROUP_ROWS)

    for chunk in chunks:
        if len(chunk):
            held.append(chunk)
            n_held += len(chunk)
        if n_held >= run_rows:
            flush()
    flush()
    return runs, names


def _fewer(runs: list[Run], tmp: Path, block_rows: int, names: list[str], fan_in: int
           ) -> list[Run]:
    """Runs merged `fan_in` at a time into longer runs (spilled, the merged ones' files
    removed) until at most `fan_in` are left."""
    n_files = 0
    while len(runs) > fan_in:
        merged: list[Run] = []
        for g in range(0, len(runs), fan_in):
            group, out = runs[g:g + fan_in], []
            for block in batched(_merge(group, block_rows, names), block_rows):
                out.append(tmp / f"merged{n_files}.parquet")
                n_files += 1
                block.to_parquet(out[-1], index=False, row_group_size=GROUP_ROWS)
            for path in (p for run in group for p in run):
                path.unlink()
            merged.append(out)
        runs = merged
    return runs


def batched(blocks: Iterable[pd.DataFrame], rows: int) -> Iterator[pd.DataFrame]:
    """The blocks joined into blocks of at least `rows` rows (the last: what is left)."""
    held: list[pd.DataFrame] = []
    n = 0
    for block in blocks:
        held.append(block)
        n += len(block)
        if n >= rows:
            yield pd.concat(held, ignore_index=True) if len(held) > 1 else held[0]
            held, n = [], 0
    if held:
        yield pd.concat(held, ignore_index=True) if len(held) > 1 else held[0]


def _blocks(run: Run, block_rows: int) -> Iterator[pd.DataFrame]:
    """A spilled run read back `block_rows` rows at a time (its types as written)."""
    import pyarrow.parquet as pq

    for path in run:
        for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(
                batch_size=block_rows, use_threads=False):
            yield batch.to_pandas()


def _merge(runs: list[Run], block_rows: int, names: list[str]) -> Iterator[pd.DataFrame]:
    """The runs' rows in the order of their key columns `names`, a block at a time (the keys
    kept). Keys are distinct (the row position), so every row at or below the least of the
    open runs' last keys is in hand: each round takes those rows (a prefix of each sorted
    run's block), sorts them and yields them, and refills the run whose last key that was.
    Runs cut from an end-ordered file barely overlap in time, so a round mostly takes one
    run's block: only what is taken is joined and sorted."""
    per_run = max(min(block_rows, MERGE_ROWS // max(len(runs), 1)), min(block_rows, 1024))
    readers = [_blocks(r, per_run) for r in runs]
    bufs = [_Held.of(next(r, None), names) for r in readers]
    while any(b is not None for b in bufs):
        held = {i: b for i, b in enumerate(bufs) if b is not None}
        lasts = {i: b.last() for i, b in held.items()}
        bound_run = min(lasts, key=lambda i: lasts[i])
        taken = []
        for i, b in held.items():
            n = b.left() if i == bound_run else b.upto(lasts[bound_run])
            if n:
                taken.append(b.take(n))
        block = pd.concat(taken, ignore_index=True) if len(taken) > 1 else (
            taken[0].reset_index(drop=True))
        order = np.lexsort([block[k].to_numpy() for k in reversed(names)])
        yield block.iloc[order].reset_index(drop=True)
        bufs[bound_run] = _Held.of(next(readers[bound_run], None), names)


class _Held:
    """A run's block in hand: its rows, its key columns as arrays (read once: a column of a
    frame costs more than the arithmetic on it), how many of its rows were taken."""

    def __init__(self, frame: pd.DataFrame, names: list[str]) -> None:
        self.frame = frame
        self.keys = [frame[k].to_numpy() for k in names]
        self.off = 0

    @classmethod
    def of(cls, frame: pd.DataFrame | None, names: list[str]) -> _Held | None:
        """The block held, None for none (its run read to its end)."""
        return None if frame is None else cls(frame, names)

    def left(self) -> int:
        """Its rows not yet taken."""
        return len(self.frame) - self.off

    def last(self) -> tuple[float, ...]:
        """Its last key."""
        return tuple(a[-1].item() for a in self.keys)

    def upto(self, bound: tuple[float, ...]) -> int:
        """How many of its rows left have keys at or below `bound` (a prefix of them)."""
        cols = [a[self.off:] for a in self.keys]
        upto = cols[-1] <= bound[-1]
        for col, v in zip(cols[-2::-1], bound[-2::-1], strict=True):
            upto = (col < v) | ((col == v) & upto)
        return int(np.count_nonzero(upto))

    def take(self, n: int) -> pd.DataFrame:
        """Its next `n` rows."""
        self.off += n
        return self.frame.iloc[self.off - n:self.off]


def sorted_blocks(chunks: Iterable[pd.DataFrame], keys: KeyFn,
                  spill_dir: str | Path | None = None, run_rows: int = RUN_ROWS,
                  block_rows: int = BLOCK_ROWS, fan_in: int | None = None
                  ) -> Iterator[pd.DataFrame]:
    """The rows of a stream of chunks sorted by `keys` (the last: the row's position), in
    blocks without the key columns, by the external sort of the module docstring (`fan_in`:
    the most runs merged at once; None: all); the spilled runs live in a folder under
    `spill_dir` removed when the generator ends."""
    with tempfile.TemporaryDirectory(prefix=".wattlife-sort-", dir=spill_dir) as tmp:
        runs, names = _spill(chunks, Path(tmp), run_rows, keys)
        if fan_in is not None:
            runs = _fewer(runs, Path(tmp), block_rows, names, fan_in)
        for block in _merge(runs, block_rows, names):
            if len(block):
                yield block.drop(columns=names)


def start_ordered(chunks: Iterable[pd.DataFrame], spill_dir: str | Path | None = None,
                  run_rows: int = RUN_ROWS, block_rows: int = BLOCK_ROWS
                  ) -> Iterator[pd.DataFrame]:
    """One rank's rows (chunks in file order) in `start_order`, in blocks (module docstring);
    the spilled runs live in a folder under `spill_dir` removed when the generator ends."""
    return sorted_blocks(chunks, _tree_keys, spill_dir, run_rows, block_rows)
