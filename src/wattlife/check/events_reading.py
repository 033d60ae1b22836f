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


def read_events_file(path: Path, max_rows: int, chunk_bytes: int | None = None
                     ) -> tuple[pd.DataFrame | None, list[Finding]]:
    """One events file as `read_csv_lines` gives it (rows with `line_no`, numbers typed, text
    as categories; findings), read `chunk_bytes` at a time where the chunked reader takes it."""
    if path.suffix not in _CSV_FORMS:
        return read_csv_lines(path, max_rows, EVENTS_KINDS, allow_empty=EVENTS_ALLOW_EMPTY)
    parts: list[pd.DataFrame] = []
    found: list[Finding] = []
    try:
        for df, ff in read_csv_chunks(path, max_rows, EVENTS_KINDS, chunk_bytes,
                                      allow_empty=EVENTS_ALLOW_EMPTY):
            found += ff
            if df is not None:
                parts.append(df)
    except (StreamUnreadable, ContractError):
        return read_csv_lines(path, max_rows, EVENTS_KINDS, allow_empty=EVENTS_ALLOW_EMPTY)
    findings = merge_capped(found, max_rows, READ_CODES, EVENTS_KINDS)
    if not parts:
        return None, findings
    return concat_compact(parts), findings


def with_file_name(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The rows with their file's name as a category column `file_name` (one code a row)."""
    codes = np.zeros(len(df), np.int8)
    return df.assign(file_name=pd.Categorical.from_codes(codes, [str(path)]))
