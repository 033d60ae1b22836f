"""An events file holding several ranks (a merged run's `events.csv` from `merge-nodes`, a
launcher's one file for all ranks) split into one part per (host, rank) in one pass, so that
`rank_events.RankEvents` reads, prepares and builds one rank at a time as it does a rank's own
file (issue 43: a day of two 8-GPU nodes merged is ~22 M rows, 17.6 GB read whole).

The file is read in chunks (`events_chunks.read_events_chunks`, `lines=True`: each row keeps
its file and line for the messages; or `wattlife check`'s chunks), each chunk's rows grouped by
(host, rank) in file order, held, and written as that rank's next Parquet piece once it holds
`PIECE_ROWS` rows (or the most of all ranks, when they hold `HOLD_ROWS` together: memory bounded
by that, not by the number of ranks). A part's rows read back are the file's rows of that rank,
in file order, with their columns and types (`RankPart.frame`, `RankPart.chunks`: positions
within the part as the index). What `rank_events` scans of a rank's own file is gathered as the
rows go by (`PartScan`); a rank with several local ranks makes the split give None (the run's
events are then read whole, as before). Parts come in the order of the ranks' first
rows that nest (`tree.timeline`), then the others, so the first part's first prepared row is
the whole frame's. The pieces live in a folder under `spill_dir`, removed by
`RankParts.close`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..contracts import COMPILE, CONCURRENT_PHASES
from .events_chunks import read_events_chunks

#: the folder of a run's rank parts (beside the output, removed at the end)
SPLIT_PREFIX = ".wattlife-ranks-"
#: bytes of CSV read at a time while splitting (None: `contracts.BATCH_BYTES`)
SPLIT_BYTES: int | None = None
#: rows of a rank held before they are written as a piece (a piece a chunk and rank costs a
#: file's overhead each: 4 k pieces of ~6 k rows for 24 h of 16 ranks)
PIECE_ROWS = 1 << 16
#: rows held over all ranks at most: past it, the rank holding the most is written
HOLD_ROWS = 1 << 19


@dataclass
class RankPart:
    """One (host, rank)'s rows of a file holding several: its Parquet pieces in file order."""

    path: Path  # the file split, for messages
    pieces: list[Path] = field(default_factory=list)
    rows: int = 0

    def chunks(self) -> Iterator[pd.DataFrame]:
        """The part's rows a piece at a time, indexed by their position in the part."""
        first = 0
        for piece in self.pieces:
            df = pd.read_parquet(piece)
            df.index = pd.RangeIndex(first, first + len(df))
            first += len(df)
            yield df

    def frame(self) -> pd.DataFrame:
        """The part's rows whole (a short rank's, as `read_events` gives a rank's own file)."""
        parts = list(self.chunks())
        return pd.concat(parts) if len(parts) > 1 else parts[0]

    def starts(self) -> Iterator[np.ndarray]:
        """The part's `start_ns` a piece at a time (int64; for the median)."""
        for piece in self.pieces:
            yield pd.read_parquet(piece, columns=["start_ns"])["start_ns"].to_numpy(np.int64)

    def __str__(self) -> str:
        return str(self.path)


@dataclass
class PartScan:
    """What `rank_events` scans of a rank's file, gathered from a part's chunks."""

    host: str
    rank: int
    local_ranks: set[float] = field(default_factory=set)
    run_ids: set[str] = field(default_factory=set)
    compile: bool = False
    low: int = int(np.iinfo(np.int64).max)
    high: int = int(np.iinfo(np.int64).min)
    first_nesting: int | None = None  # the file row of its first row that nests

    def add(self, rows: pd.DataFrame) -> None:
        """Gather a chunk's rows of this rank."""
        self.local_ranks |= set(rows["local_rank"].unique().tolist()) if (
            "local_rank" in rows.columns) else {float("nan")}
        self.run_ids |= set(rows["run_id"].astype(str).unique().tolist())
        self.compile |= bool((rows["phase"] == COMPILE).any())
        start = rows["start_ns"].to_numpy(np.int64)
        self.low, self.high = min(self.low, int(start.min())), max(self.high, int(start.max()))
        if self.first_nesting is None:
            nests = np.flatnonzero(~rows["phase"].isin(CONCURRENT_PHASES).to_numpy())
            self.first_nesting = int(rows.index[nests[0]]) if len(nests) else None



def one_local_rank(values: Iterable[Any]) -> tuple[bool, int | None]:
    """A rank's local rank from the distinct values its rows hold: (whether the rank can be
    read alone: not where it has several, its one local rank: None where a row has none, the
    run's ranks then numbered as `energy.phase_map` numbers them)."""
    only = list(values)
    if any(pd.isna(x) for x in only):
        return True, None
    if len(only) == 1 and float(only[0]).is_integer():
        return True, int(only[0])
    return False, None


def rank_chunks(source: str | Path | RankPart, chunk_bytes: int | None = None
                ) -> Iterator[pd.DataFrame]:
    """A rank's rows a chunk at a time, indexed by their position among its rows: its own
    file's (`read_events_chunks`) or its part's."""
    if isinstance(source, RankPart):
        return source.chunks()
    return read_events_chunks(source, chunk_bytes)


class RankParts:
    """A file split into its ranks' parts (module docstring); `close` removes the pieces."""

    def __init__(self, path: Path, spill_dir: str | Path | None) -> None:
        self.path = path
        self.folder = Path(tempfile.mkdtemp(prefix=SPLIT_PREFIX, dir=spill_dir))
        self.parts: dict[tuple[str, int], RankPart] = {}
        self.scans: dict[tuple[str, int], PartScan] = {}
        self._held: dict[tuple[str, int], list[pd.DataFrame]] = {}

    def split(self, chunks: Iterable[pd.DataFrame] | None = None) -> RankParts:
        """Every chunk's rows appended to their rank's part (one pass over the file): the
        file's chunks as `read_events` reads it, or `chunks` (`wattlife check`'s reading);
        the parts in the order of their first rows (`parts`)."""
        try:
            for chunk in (read_events_chunks(self.path, SPLIT_BYTES, lines=True)
                          if chunks is None else chunks):
                self._add(chunk)
            for key in self.parts:
                self._write(key)
        except BaseException:
            self.close()
            raise
        return self

    def _add(self, chunk: pd.DataFrame) -> None:
        """A chunk's rows held by rank, in file order within each; a rank's rows written as a
        piece once it holds `PIECE_ROWS`, or holds the most when all hold `HOLD_ROWS`."""
        codes = chunk.groupby(["host", "rank"], sort=False).ngroup().to_numpy()
        order = np.argsort(codes, kind="stable")  # each rank's rows together, in file order
        bounds = np.searchsorted(codes[order], np.arange(codes.max(initial=-1) + 2))
        for k in range(len(bounds) - 1):
            rows = chunk.iloc[order[bounds[k]:bounds[k + 1]]]
            key = (str(rows["host"].iat[0]), int(rows["rank"].iat[0]))
            if key not in self.parts:
                self.parts[key], self.scans[key] = RankPart(self.path), PartScan(*key)
                self._held[key] = []
            self.scans[key].add(rows)
            self._held[key].append(rows)
            self.parts[key].rows += len(rows)
            if sum(len(x) for x in self._held[key]) >= PIECE_ROWS:
                self._write(key)
        while sum(len(x) for held in self._held.values() for x in held) >= HOLD_ROWS:
            self._write(max(self._held, key=lambda k: sum(len(x) for x in self._held[k])))

    def _write(self, key: tuple[str, int]) -> None:
        """The rows a rank holds written as its next piece."""
        held, part = self._held[key], self.parts[key]
        if not held:
            return
        part.pieces.append(self.folder / f"{list(self.parts).index(key)}-"
                                         f"{len(part.pieces)}.parquet")
        (pd.concat(held) if len(held) > 1 else held[0]).to_parquet(part.pieces[-1], index=False)
        held.clear()

    def ranked(self) -> list[tuple[RankPart, dict[str, Any]]] | None:
        """(part, its scan as `rank_events` gives a file's) in the order of their first rows
        that nest, then the others; None where a rank has several local ranks."""
        out = []
        for key, part in self.parts.items():
            s = self.scans[key]
            alone, local = one_local_rank(s.local_ranks)
            if not alone:
                return None
            out.append((part, {"host": s.host, "rank": s.rank, "local_rank": local,
                               "rows": part.rows, "run_ids": s.run_ids, "compile": s.compile,
                               "starts": (s.low, s.high), "first": s.first_nesting}))
        return sorted(out, key=lambda ps: (ps[1]["first"] is None, ps[1]["first"] or 0))

    def close(self) -> None:
        """Removes the parts' pieces."""
        shutil.rmtree(self.folder, ignore_errors=True)
