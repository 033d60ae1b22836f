"""The events files of a run as `wattlife check` reads them (issue 43): each file in chunks
(`reading.read_csv_chunks`, findings merged as one pass over the file gives them), its text
columns kept as categories and the files joined without turning them back into strings
(`contracts.compact.concat_compact`). A day
of 8 ranks at 0.3 s steps is ~11 M rows: read whole, each line's text cells and its file name
were strings of their own (~6 GB); here a row holds its numbers and a few category codes.

The same rows, columns and findings as reading each file whole (`read_csv_lines`); a file the
chunked reader does not take (quoted fields, a cut gzip stream, an unreadable zstd frame,
Parquet) is read whole as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import ContractError, StreamUnreadable
from ..contracts.compact import concat_compact
from .findings import Finding, merge_capped
from .reading import READ_CODES, read_csv_chunks, read_csv_lines

#: the events columns `check` reads as numbers (the others: categories)
EVENTS_KINDS = {"start_ns": "int", "end_ns": "int", "rank": "int", "items": "float",
                "step": "float", "depth": "float"}
EVENTS_ALLOW_EMPTY = ("items", "step", "depth")
_CSV_FORMS = (".csv", ".gz", ".zst")


class EventsChunks:
    """One events file's rows a chunk at a time (`read_csv_chunks`, about `chunk_bytes` each;
    a file the chunked reader does not take: whole, by `read_csv_lines`), iterated once; its
    findings, once every chunk is read, as one pass over the file gives them (`findings`).
    Iterating raises StreamUnreadable or ContractError where the chunked reader gives up (the
    caller reads the file whole: `read_events_file`)."""

    def __init__(self, path: Path, max_rows: int, chunk_bytes: int | None = None) -> None:
        self.path, self.max_rows, self.chunk_bytes = path, max_rows, chunk_bytes
        self._found: list[Finding] = []
        self._whole: list[Finding] | None = None

    def __iter__(self) -> Iterator[pd.DataFrame]:
        if self.path.suffix not in _CSV_FORMS:
            df, self._whole = read_csv_lines(self.path, self.max_rows, EVENTS_KINDS,
                                             allow_empty=EVENTS_ALLOW_EMPTY)
            if df is not None:
                yield df
            return
        for df, ff in read_csv_chunks(self.path, self.max_rows, EVENTS_KINDS, self.chunk_bytes,
                                      allow_empty=EVENTS_ALLOW_EMPTY):
            self._found += ff
            if df is not None:
                yield df

    def findings(self) -> list[Finding]:
        """The file's reading findings (after its last chunk)."""
        if self._whole is not None:
            return self._whole
        return merge_capped(self._found, self.max_rows, READ_CODES, EVENTS_KINDS)


def read_events_file(path: Path, max_rows: int, chunk_bytes: int | None = None
                     ) -> tuple[pd.DataFrame | None, list[Finding]]:
    """One events file as `read_csv_lines` gives it (rows with `line_no`, numbers typed, text
    as categories; findings), read `chunk_bytes` at a time where the chunked reader takes it."""
    chunks = EventsChunks(path, max_rows, chunk_bytes)
    try:
        parts = list(chunks)
    except (StreamUnreadable, ContractError):
        return read_csv_lines(path, max_rows, EVENTS_KINDS, allow_empty=EVENTS_ALLOW_EMPTY)
    if not parts:
        return None, chunks.findings()
    return concat_compact(parts), chunks.findings()


def with_file_name(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The rows with their file's name as a category column `file_name` (one code a row)."""
    codes = np.zeros(len(df), np.int8)
    return df.assign(file_name=pd.Categorical.from_codes(codes, [str(path)]))
