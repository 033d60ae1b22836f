"""`merge-nodes`' events in bounded memory (issue 43): every node's events files read one at a
time, each file's rows sorted by (start, host, rank) and spilled (Parquet), then merged k ways
and written as they come: the bytes `pd.concat` of the files, a stable sort and one `to_csv`
give, holding a file and a block of each sorted file (a day of 2 nodes x 8 ranks: ~23 M rows,
held whole before). Files whose columns or their types differ are merged in memory instead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .contracts import atomic_path, events_files, read_events
from .contracts.compact import as_categories, concat_compact

#: rows of each sorted file held at a time while merging
MERGE_BLOCK_ROWS = 1 << 15
_KEY = ["_s", "_h", "_r"]


def events_paths(events: list[str | Path]) -> list[Path]:
    """Every node's events file and its rank siblings, in the order the merge takes them."""
    out: list[Path] = []
    for e in events:
        files = [p for p in events_files(e) if p.exists()]
        if not files:
            raise FileNotFoundError(f"{e}: no such file")
        out += files
    return out


def read_compact(path: Path) -> pd.DataFrame:
    """One events file (`read_events`, no siblings), its text columns as categories."""
    return as_categories(read_events(path, siblings=False))


def _form(df: pd.DataFrame) -> list[tuple[str, str]]:
    """A file's columns and their types (text: 'category')."""
    return [(c, "category" if isinstance(t, pd.CategoricalDtype) else str(t))
            for c, t in df.dtypes.items()]


def spill_events(paths: list[Path], tmp: Path) -> tuple[list[Path], list[str], pd.DataFrame]:
    """Each events file read once (`read_compact`) and spilled to `tmp` as Parquet; the spilled
    files, every host named, and each (host, step)'s earliest `step` end (`clock_offsets`' rows:
    phase, host, step, end_ns)."""
    spilled, hosts = [], set()
    ends = pd.Series(dtype=np.int64)
    for i, p in enumerate(paths):
        df = read_compact(p)
        hosts |= set(df["host"].astype(str).unique())
        st = df[(df["phase"] == "step").to_numpy()]
        got = st.assign(host=st["host"].astype(str)).groupby(["host", "step"])["end_ns"].min()
        ends = got if not len(ends) else pd.concat([ends, got]).groupby(level=[0, 1]).min()
        spilled.append(tmp / f"raw{i}.parquet")
        df.to_parquet(spilled[-1], index=False)
    steps = ends.rename("end_ns").reset_index().assign(phase="step")
    return spilled, sorted(hosts), steps


def write_sorted(spilled: list[Path], out: str | Path,
                 shift: Callable[[pd.DataFrame], pd.DataFrame], hosts: list[str]) -> None:
    """The events of the `spilled` files moved by `shift` (each host's clock alignment) and
    written to `out` sorted by (start_ns, host, rank), ties in file order (a stable sort),
    atomically. `hosts`: every host named in the files."""
    code = {h: i for i, h in enumerate(sorted(hosts))}
    runs, forms = [], []
    for p in spilled:
        df = shift(pd.read_parquet(p))
        forms.append(_form(df))
        key = pd.DataFrame({"_s": df["start_ns"].to_numpy(np.int64),
                            "_h": df["host"].astype(str).map(code).to_numpy(np.int64),
                            "_r": df["rank"].to_numpy(np.int64)})
        order = np.lexsort((key["_r"], key["_h"], key["_s"]))  # stable
        runs.append(p.with_name(f"sorted-{p.name}"))
        pd.concat([df, key], axis=1).iloc[order].to_parquet(
            runs[-1], index=False, row_group_size=MERGE_BLOCK_ROWS)
        del df
    if any(f != forms[0] for f in forms):  # concat would change a column's type: whole
        _write_whole(runs, out)
        return
    with atomic_path(out) as dst, open(dst, "w") as fh:
        fh.write(pd.read_parquet(runs[0]).drop(columns=_KEY).iloc[:0].to_csv(index=False))
        for block in _merged(runs):
            block.to_csv(fh, index=False, header=False)  # in pandas' chunks, no whole string


def _write_whole(runs: list[Path], out: str | Path) -> None:
    """The sorted files joined in memory (their types differ), sorted, written."""
    ev = concat_compact([pd.read_parquet(r) for r in runs])
    ev = ev.sort_values(_KEY, kind="stable").drop(columns=_KEY)
    with atomic_path(out) as dst:
        ev.to_csv(dst, index=False)


def _blocks(path: Path) -> Iterator[pd.DataFrame]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=MERGE_BLOCK_ROWS):
        yield batch.to_pandas()


def _merged(runs: list[Path]) -> Iterator[pd.DataFrame]:
    """The rows of the sorted files in (start, host, rank) order, ties in file order, a block
    at a time: each round takes the rows below the least last key of the files not yet read
    to their end (every row of a key below it is in hand), sorted stably in file order."""
    readers = [_blocks(r) for r in runs]
    bufs: list[pd.DataFrame | None] = [next(r, None) for r in readers]
    done = [b is None for b in bufs]
    while any(b is not None and len(b) for b in bufs):
        open_ = [i for i, b in enumerate(bufs) if not done[i] and b is not None]
        bound = min((_last(bufs[i]) for i in open_), default=None)
        taken, rest = [], []
        for b in bufs:
            if b is None or not len(b):
                rest.append(b)
                continue
            below = np.ones(len(b), bool) if bound is None else _below(b, bound)
            taken.append(b[below])
            rest.append(b[~below])
        bufs = rest
        if sum(len(t) for t in taken):
            block = concat_compact(taken)  # text kept as categories
            order = np.lexsort([block[k].to_numpy() for k in reversed(_KEY)])  # stable
            yield block.drop(columns=_KEY).iloc[order]
        for i in range(len(bufs)):  # refill: a file in hand to its bound, or all of a key
            b = bufs[i]
            if done[i] or (b is not None and len(b) and _last(b) != bound):
                continue
            more = next(readers[i], None)
            if more is None:
                done[i] = True
            else:
                bufs[i] = more if b is None or not len(b) else pd.concat([b, more],
                                                                          ignore_index=True)


def _last(b: pd.DataFrame | None) -> tuple[int, int, int]:
    """The (start, host, rank) of a block's last row."""
    assert b is not None and len(b)
    s, h, r = (int(b[k].iloc[-1]) for k in _KEY)
    return s, h, r


def _below(b: pd.DataFrame, bound: tuple[int, ...]) -> np.ndarray:
    """Rows whose (start, host, rank) is below `bound`."""
    s, h, r = (b[k].to_numpy() for k in _KEY)
    later = (h < bound[1]) | ((h == bound[1]) & (r < bound[2]))
    return np.asarray((s < bound[0]) | ((s == bound[0]) & later), bool)
