"""One rank's events put from the order the markers write them (end order) into the order the
phase tree needs (start order) in bounded memory: an external sort (issue 43).

`start_ordered(chunks)` takes a rank's rows a chunk at a time (file order), sorts each run of
about `run_rows` rows in memory and spills it (Parquet), then merges the runs k ways, a block of
each run held at a time, and yields the rows in blocks. The order is `tree.phase_tree`'s:
(start_ns, -end_ns, recorded depth with missing as 0), ties in file order (its lexsort is
stable; here the rows' position in the stream is the last key), so the blocks joined are the
rows of `events.iloc[order]`, bit for bit (the columns and their types as the chunks give them).
Memory: one run while it is sorted, then `block_rows` rows of each run, `MERGE_ROWS` rows of all
runs together (a day of one rank: 1.4 M rows, 6 runs of 256 k; 3 days: 17 runs)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
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


def start_order(events: pd.DataFrame) -> np.ndarray:
    """The in-memory order of one rank's rows: `tree.phase_tree`'s (start, -end, recorded depth,
    missing as 0), ties in row order (np.lexsort is stable)."""
    return np.lexsort(_key_arrays(events)[:3][::-1])


def _key_arrays(df: pd.DataFrame, first_row: int = 0) -> tuple[np.ndarray, ...]:
    """(start, -end, depth key, row position) of a chunk whose first row is `first_row` of the
    stream, as `tree.phase_tree` computes them."""
    depth = (df["depth"].fillna(0).to_numpy(np.float64) if "depth" in df.columns
             else np.zeros(len(df)))
    return (df["start_ns"].to_numpy(np.int64), -df["end_ns"].to_numpy(np.int64), depth,
            np.arange(first_row, first_row + len(df), dtype=np.int64))


def _sorted_run(df: pd.DataFrame, first_row: int) -> pd.DataFrame:
    """A run's rows with their keys as columns, sorted by them (the row key makes it total)."""
    keys = _key_arrays(df, first_row)
    out = df.reset_index(drop=True).assign(**dict(zip(_KEYS, keys, strict=True)))
    return out.iloc[np.lexsort(keys[::-1])].reset_index(drop=True)


def _spill(chunks: Iterable[pd.DataFrame], tmp: Path, run_rows: int) -> list[Path]:
    """The chunks gathered into runs of at least `run_rows` rows (the last: what is left),
    each sorted and written to `tmp`; the runs' files in stream order."""
    runs: list[Path] = []
    held: list[pd.DataFrame] = []
    n_held, first = 0, 0

    def flush() -> None:
        nonlocal held, n_held, first
        if not held:
            return
        run = _sorted_run(pd.concat(held, ignore_index=True) if len(held) > 1 else held[0],
                          first)
        held, first, n_held = [], first + n_held, 0
        runs.append(tmp / f"run{len(runs)}.parquet")
        run.to_parquet(runs[-1], index=False, row_group_size=GROUP_ROWS)

    for chunk in chunks:
        if len(chunk):
            held.append(chunk)
            n_held += len(chunk)
        if n_held >= run_rows:
            flush()
    flush()
    return runs


def _blocks(path: Path, block_rows: int) -> Iterator[pd.DataFrame]:
    """A spilled run read back `block_rows` rows at a time (its types as written)."""
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=block_rows,
                                                                    use_threads=False):
        yield batch.to_pandas()


def _merge(runs: list[Path], block_rows: int) -> Iterator[pd.DataFrame]:
    """The runs' rows in key order, a block at a time. Keys are distinct (the row position), so
    every row at or below the least of the open runs' last keys is in hand: each round takes
    those rows (a prefix of each sorted run's block), sorts them and yields them, and refills
    the run whose last key that was. Runs cut from an end-ordered file barely overlap in time,
    so a round mostly takes one run's block: only what is taken is joined and sorted."""
    per_run = max(min(block_rows, MERGE_ROWS // max(len(runs), 1)), min(block_rows, 1024))
    readers = [_blocks(r, per_run) for r in runs]
    bufs = [next(r, None) for r in readers]
    while any(b is not None for b in bufs):
        held = [i for i, b in enumerate(bufs) if b is not None]
        lasts = {i: _last_key(bufs[i]) for i in held}
        bound_run = min(lasts, key=lambda i: lasts[i])
        taken = []
        for i in held:
            b = bufs[i]
            assert b is not None
            n = len(b) if i == bound_run else _n_upto(b, lasts[bound_run])
            if n:
                taken.append(b.iloc[:n])
            bufs[i] = b.iloc[n:] if n < len(b) else None
        block = pd.concat(taken, ignore_index=True) if len(taken) > 1 else (
            taken[0].reset_index(drop=True))
        order = np.lexsort([block[k].to_numpy() for k in reversed(_KEYS)])
        yield block.iloc[order].drop(columns=list(_KEYS)).reset_index(drop=True)
        if bufs[bound_run] is None:
            bufs[bound_run] = next(readers[bound_run], None)


def _n_upto(b: pd.DataFrame, bound: tuple[float, ...]) -> int:
    """How many of a sorted block's first rows have keys at or below `bound` (a prefix)."""
    s, ne, d, r = (b[k].to_numpy() for k in _KEYS)
    b0, b1, b2, b3 = bound
    upto = (s < b0) | ((s == b0) & ((ne < b1) | ((ne == b1) & (
        (d < b2) | ((d == b2) & (r <= b3))))))
    return int(np.count_nonzero(upto))


def _last_key(b: pd.DataFrame | None) -> tuple[float, ...]:
    """A sorted block's last key (start, -end, depth, row)."""
    assert b is not None and len(b)
    return tuple(float(b[k].iat[-1]) if k == "__wl_depth" else int(b[k].iat[-1])
                 for k in _KEYS)


def start_ordered(chunks: Iterable[pd.DataFrame], spill_dir: str | Path | None = None,
                  run_rows: int = RUN_ROWS, block_rows: int = BLOCK_ROWS
                  ) -> Iterator[pd.DataFrame]:
    """One rank's rows (chunks in file order) in `start_order`, in blocks (module docstring);
    the spilled runs live in a folder under `spill_dir` removed when the generator ends."""
    with tempfile.TemporaryDirectory(prefix=".wattlife-sort-", dir=spill_dir) as tmp:
        runs = _spill(chunks, Path(tmp), run_rows)
        for block in _merge(runs, block_rows):
            if len(block):
                yield block
