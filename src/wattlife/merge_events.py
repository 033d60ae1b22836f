"""`merge-nodes`' events in bounded memory (issue 43): every node's events files read in chunks
(`attribution.events_chunks`: `read_events`' rows and types, a few MB of CSV at a time), each
chunk spilled (Parquet) as it comes; then the chunks, each host's clock alignment applied,
sorted by (start, host, rank), ties in file order, then in row order within a file (the stable
sort of the files joined), by the external sort `attribution.start_order.sorted_blocks`
(sorted runs of `RUN_ROWS` spilled, merged k ways, `FAN_IN` at a time) and written as they
come: the bytes `pd.concat` of the files, a stable sort and one `to_csv` give, holding a chunk,
a run, or a block of each run at a time, whatever the run's length. Where the chunks' columns
or their types differ (between files; or within a Parquet file whose row groups type a column
differently, e.g. an integer column with missing cells in some groups only) the files are read
whole and merged in memory instead: the types `pd.concat` of the whole files gives."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .attribution.events_chunks import read_events_chunks
from .attribution.start_order import batched, sorted_blocks
from .contracts import atomic_path, events_files, read_events
from .contracts.compact import as_categories, concat_compact

#: bytes of an events file's CSV parsed at a time
CHUNK_BYTES = 8 << 20
#: rows sorted in memory and spilled as one run of the external sort
RUN_ROWS = 1 << 18
#: rows of each run held at a time while merging (at most)
MERGE_BLOCK_ROWS = 1 << 15
#: runs merged at once: more are merged this many at a time into longer runs first (a day of
#: two 8-rank nodes makes 87 runs; merged at once, each round would take a few rows of each)
FAN_IN = 32
#: rows written to the CSV at a time (pandas' `to_csv` is slow on small frames)
WRITE_ROWS = 1 << 16


@dataclass(frozen=True)
class Spill:
    """What `spill_events` read: the events `files`, their chunks spilled in file order (none
    where their columns or types differ: `whole`), every host named (sorted), each (host,
    step)'s earliest `step` end (`clock_offsets`' rows: phase, host, step, end_ns), and the
    first chunk's columns (no rows: the header written)."""

    files: list[Path]
    chunks: list[Path]
    hosts: list[str]
    steps: pd.DataFrame
    head: pd.DataFrame
    whole: bool


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


def _chunks(path: Path) -> Iterator[pd.DataFrame]:
    """One events file's rows in chunks: `read_events(path, siblings=False)`'s, host and phase
    as text as it makes them."""
    for df in read_events_chunks(path, CHUNK_BYTES, lines=False):
        yield df.assign(host=df["host"].astype(str), phase=df["phase"].astype(str))


def _form(df: pd.DataFrame) -> list[tuple[str, str]]:
    """A frame's columns and their types (text: 'category')."""
    return [(c, "category" if isinstance(t, pd.CategoricalDtype) else str(t))
            for c, t in df.dtypes.items()]


def _step_ends(df: pd.DataFrame) -> pd.Series:
    """Each (host, step)'s earliest `step` end among the rows."""
    st = df[(df["phase"] == "step").to_numpy()]
    return st.assign(host=st["host"].astype(str)).groupby(["host", "step"])["end_ns"].min()


def _least(parts: list[pd.Series]) -> pd.Series:
    """Each (host, step)'s least end among the parts (`_step_ends`; the empty ones left out)."""
    full = [e for e in parts if len(e)]
    if len(full) < 2:
        return full[0] if full else parts[-1]
    return pd.concat(full).groupby(level=[0, 1]).min()


def spill_events(paths: list[Path], tmp: Path) -> Spill:
    """Each events file read once in chunks, each chunk spilled to `tmp` as Parquet (`Spill`)."""
    chunks: list[Path] = []
    hosts: set[str] = set()
    forms: set[tuple[tuple[str, str], ...]] = set()
    ends = pd.Series(dtype=np.int64)
    head: pd.DataFrame | None = None
    for p in paths:
        file_ends = [ends]
        for df in _chunks(p):
            hosts |= set(df["host"].unique())
            file_ends.append(_step_ends(df))
            forms.add(tuple(_form(df)))
            head = df.iloc[:0] if head is None else head
            if len(forms) == 1 and len(df):
                chunks.append(tmp / f"chunk{len(chunks)}.parquet")
                df.to_parquet(chunks[-1], index=False)
        ends = _least(file_ends)  # once a file: the chunks' ends joined, not the run's each time
    assert head is not None  # every file gives a chunk (a header alone: no rows)
    steps = ends.rename("end_ns").reset_index().assign(phase="step")
    return Spill(paths, chunks if len(forms) == 1 else [], sorted(hosts), steps, head,
                 len(forms) > 1)


def write_sorted(spill: Spill, out: str | Path,
                 shift: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    """The events `spill_events` read, moved by `shift` (each host's clock alignment), written
    to `out` sorted by (start_ns, host, rank), ties in file order (a stable sort), atomically."""
    code = {h: i for i, h in enumerate(spill.hosts)}

    def keys(df: pd.DataFrame, first_row: int) -> dict[str, np.ndarray]:
        return {"__wl_start": df["start_ns"].to_numpy(np.int64),
                "__wl_host": df["host"].astype(str).map(code).to_numpy(np.int64),
                "__wl_rank": df["rank"].to_numpy(np.int64),
                "__wl_row": np.arange(first_row, first_row + len(df), dtype=np.int64)}

    if spill.whole:  # concat would change a column's type: whole
        ev = shift(concat_compact([read_compact(p) for p in spill.files]))
        order = np.lexsort(list(keys(ev, 0).values())[2::-1])  # stable
        with atomic_path(out) as dst:
            ev.iloc[order].to_csv(dst, index=False)
        return
    tmp = spill.chunks[0].parent if spill.chunks else None
    with atomic_path(out) as dst, open(dst, "w") as fh:
        fh.write(spill.head.to_csv(index=False))
        rows = sorted_blocks((shift(_spilled(p)) for p in spill.chunks), keys, tmp, RUN_ROWS,
                             MERGE_BLOCK_ROWS, FAN_IN)
        for block in batched(rows, WRITE_ROWS):
            block.to_csv(fh, index=False, header=False)  # in pandas' chunks, no whole string


def _spilled(path: Path) -> pd.DataFrame:
    """A spilled chunk read back, its file removed (the disk a merge holds: about twice the
    events)."""
    df = pd.read_parquet(path)
    path.unlink()
    return df
