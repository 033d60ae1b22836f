"""Reading a contract CSV for `wattlife check` (the I/O edge): every line kept with its number,
lines of the wrong field count and a truncated last line reported instead of failing, cells that
do not parse reported one by one."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pandas as pd

from ..contracts import (
    ContractError,
    LineChunks,
    StreamUnreadable,
    exact_ints,
    int_form,
    read_contract_bytes,
    record_lines,
    streaming,
)
from .findings import ERROR, WARNING, Finding, capped

#: the reading's finding codes in the order `read_csv_lines` reports them
READ_CODES = ("file.gzip", "file.empty", "csv.truncated-header", "csv.truncated-line",
              "csv.parse", "csv.field-count", "value.type")


def read_csv_lines(path: Path, max_rows: int = 5, kinds: dict[str, str] | None = None,
                   allow_empty: Iterable[str] = ()) -> tuple[pd.DataFrame | None, list[Finding]]:
    """Read a contract CSV (plain, .gz, or Parquet) with a `line_no` column; the `kinds`
    columns as int64 ('int') / float64 ('float'), the others as categories.

    A typed parse is tried first (the C parser: fast on millions of rows); if a cell does not
    parse, the file is read as strings and every bad cell reported (`to_numbers`).

    Lines whose field count differs from the header's are reported (error) and left out; a last
    line without its newline (a killed writer) is reported (warning) and left out, as the
    contract readers do. Field counting is vectorised over the raw bytes.
    """
    name = str(path)
    kinds = kinds or {}
    if path.suffix == ".parquet":
        return _no_lines(pd.read_parquet(path)), []
    data, findings = _complete_lines(path, name)
    if data is None:
        return None, findings
    if b'"' in data:  # quoted fields: leave the parsing to pandas
        try:
            df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
        except pd.errors.ParserError as exc:
            return None, findings + [Finding(ERROR, "csv.parse", name, None, str(exc))]
        df["line_no"] = record_lines(data.decode("utf-8", "replace"))[:len(df)]
        df, ff = to_numbers(df, kinds, name, max_rows, allow_empty)
        return df, findings + ff
    text, rows_line, ff = _drop_bad_field_counts(data, name, max_rows)
    df, ff2 = _parse_typed(text, rows_line, kinds, name, max_rows, allow_empty)
    return df, findings + ff + ff2


def _complete_lines(path: Path, name: str) -> tuple[bytes | None, list[Finding]]:
    """The file's bytes up to its last newline (None when unreadable, empty or a cut header),
    with the findings on what was left out."""
    try:
        data = read_contract_bytes(path)
    except ContractError as exc:
        return None, [Finding(ERROR, "file.gzip", name, None, str(exc).removeprefix(f"{name}: "))]
    if not data:
        return None, [Finding(ERROR, "file.empty", name, None, "empty file (no header)")]
    if data.endswith(b"\n"):
        return data, []
    cut = data.rfind(b"\n")
    n_line = data.count(b"\n") + 1
    if cut < 0:
        return None, [Finding(ERROR, "csv.truncated-header", name, 1, "header line is truncated")]
    return data[:cut + 1], [Finding(WARNING, "csv.truncated-line", name, n_line,
                                    f"truncated last line {data[cut + 1:][:80]!r} (writer "
                                    "killed?); readers ignore it")]


def _drop_bad_field_counts(data: bytes, name: str, max_rows: int, offset: int = 0
                           ) -> tuple[bytes, np.ndarray, list[Finding]]:
    """The text without the lines whose field count differs from the header's (reported), and
    the CSV line number of each data row kept; blank lines are dropped silently. `offset`: the
    file's data lines before these (a chunk of the file, its header in front)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == ord("\n"))
    commas = np.flatnonzero(buf == ord(","))
    # fields per line = commas before its newline minus commas before the previous newline, + 1
    per_line = np.diff(np.concatenate([[0], np.searchsorted(commas, nl)])) + 1
    blank = np.diff(np.concatenate([[-1], nl])) == 1
    expected = per_line[0]
    bad = (per_line != expected) & ~blank
    bad[0] = False
    line_no = np.arange(1, len(nl) + 1) + offset
    if not bad.any():
        return data, line_no[~blank][1:], []
    starts = np.concatenate([[0], nl[:-1] + 1])
    idx = np.flatnonzero(bad)
    findings = capped(
        ERROR, "csv.field-count", name, line_no[idx],
        [f"{per_line[i]} fields, header has {expected}: "
         f"{data[starts[i]:nl[i]][:80].decode('utf-8', 'replace')!r}" for i in idx[:max_rows]],
        max_rows)
    keep = ~bad & ~blank
    keep[0] = True
    text = b"".join(data[starts[i]:nl[i] + 1] for i in np.flatnonzero(keep))
    return text, line_no[keep][1:], findings


def _parse_typed(text: bytes, rows_line: np.ndarray, kinds: dict[str, str], name: str,
                 max_rows: int, allow_empty: Iterable[str]) -> tuple[pd.DataFrame, list[Finding]]:
    """Parse with the `kinds` columns typed (fast); on a cell that does not parse, or an empty
    one not allowed, parse as strings and report every bad cell (`to_numbers`)."""
    header = pd.read_csv(io.BytesIO(text), nrows=0).columns
    typed = {c: ("int64" if kinds[c] == "int" else "float64") for c in kinds if c in header}
    empty_ok = set(allow_empty)
    try:
        df = pd.read_csv(io.BytesIO(text), keep_default_na=False,
                         na_values={c: [""] for c in typed},
                         dtype={**{c: str for c in header if c not in typed}, **typed})
        for c in header:  # text as written ("00" stays "00": a category dtype infers numbers)
            if c not in typed:
                df[c] = df[c].astype("category")
        holes = [c for c in typed if c not in empty_ok and df[c].isna().any()]
        if holes:
            raise ValueError(f"empty cells in {holes}")
        if not _ints_exact(text, df, [c for c in typed if kinds[c] == "int"]):
            raise ValueError("an int column holds a float cell")
    except (ValueError, OverflowError):  # a cell that does not parse: find them all on the strings
        df = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False)
        df["line_no"] = rows_line[:len(df)]
        return to_numbers(df, kinds, name, max_rows, allow_empty)
    df["line_no"] = rows_line[:len(df)]
    return df, []


def _ints_exact(text: bytes, df: pd.DataFrame, ints: list[str]) -> bool:
    """Whether the C parser's int64 columns hold every cell exactly: it reads an int64 column
    holding one float cell (`1.7964346455e18`, `12.0`) as float64 and casts it back, changing
    the other rows' last digits. pyarrow's strict int64 parse of those columns alone (~0.06 s a
    million rows) refuses such a cell; its values must equal the C parser's."""
    import pyarrow as pa
    from pyarrow import csv as pa_csv

    if not ints:
        return True
    options = pa_csv.ConvertOptions(include_columns=ints,
                                    column_types={c: pa.int64() for c in ints})
    try:
        table = pa_csv.read_csv(io.BytesIO(text), convert_options=options)
    except pa.ArrowException:  # a cell pyarrow does not take as an int64
        return False
    return all(table.column(c).null_count == 0
               and np.array_equal(table.column(c).to_numpy(), df[c].to_numpy()) for c in ints)


def check_columns(df: pd.DataFrame, required: list[str], file: str) -> list[Finding]:
    """Required columns of a contract table (extra columns are allowed)."""
    missing = [c for c in required if c not in df.columns]
    if not missing:
        return []
    return [Finding(ERROR, "columns.missing", file, 1,
                    f"missing column(s) {missing}; the contract needs at least {required}")]


def to_numbers(df: pd.DataFrame, kinds: dict[str, str], file: str, max_rows: int = 5,
               allow_empty: Iterable[str] = ()) -> tuple[pd.DataFrame, list[Finding]]:
    """Convert string columns to int64 ('int', parsed exactly: `contracts.exact_ints`) / float64
    ('float'); bad cells are findings and become missing (an int column then nullable Int64).
    Columns in `allow_empty` may be empty."""
    out = df.copy()
    findings: list[Finding] = []
    empty_ok = set(allow_empty)
    for col, kind in kinds.items():
        if col not in out.columns:
            continue
        raw = out[col].astype(str).str.strip()
        empty = (raw == "").to_numpy()
        if kind == "int":  # exactly, never through float64; bad cells missing (Int64)
            whole, not_int = exact_ints(raw)
            ok = ~not_int
            vals = whole if ok.all() else pd.Series(
                pd.arrays.IntegerArray(whole.to_numpy(np.int64), not_int), index=raw.index)
        else:
            vals = pd.to_numeric(raw.where(~empty, None), errors="coerce").astype("float64")
            ok = vals.notna().to_numpy()
        bad = ~ok & ~(empty & (col in empty_ok))
        if bad.any():
            what = int_form(col) if kind == "int" else "a number"
            findings += capped(ERROR, "value.type", file, out["line_no"][bad],
                                [f"column '{col}' expects {what}, got {v!r}"
                                 for v in raw[bad].head(max_rows)], max_rows)
        out[col] = vals if kind == "int" else pd.to_numeric(vals, errors="coerce")
    return out, findings



def read_csv_chunks(path: Path, max_rows: int, kinds: dict[str, str],
                    chunk_bytes: int | None = None, allow_empty: Iterable[str] = ()
                    ) -> Iterator[tuple[pd.DataFrame | None, list[Finding]]]:
    """`read_csv_lines` of a CSV trace (plain, .gz, .zst) chunk by chunk (`LineChunks`, about
    `chunk_bytes` each, `streaming.BATCH_BYTES` by default): each chunk's rows with their file
    line numbers and its findings; a last item (None, findings) for an empty file, a cut header
    or a truncated last line. Raises StreamUnreadable for quoted fields or a cut gzip file
    (read the file whole instead). `allow_empty`: as `read_csv_lines`."""
    name = str(path)
    chunks = LineChunks(path, chunk_bytes or streaming.BATCH_BYTES)
    header, offset = b"", 0
    for block in chunks:
        if not header:
            cut = block.find(b"\n") + 1
            header, block = block[:cut], block[cut:]
        if b'"' in header or b'"' in block:
            raise StreamUnreadable("quoted fields")
        text, rows_line, ff = _drop_bad_field_counts(header + block, name, max_rows, offset)
        df, ff2 = _parse_typed(text, rows_line, kinds, name, max_rows, allow_empty)
        offset += block.count(b"\n")
        yield df, ff + ff2
    if not header:
        yield None, [Finding(ERROR, "csv.truncated-header", name, 1, "header line is truncated")
                     if chunks.tail else Finding(ERROR, "file.empty", name, None,
                                                 "empty file (no header)")]
    elif chunks.tail or chunks.cut_frame:
        what = (f"truncated last line {chunks.tail[:80]!r}" if chunks.tail else
                "cut last zstd frame")
        yield None, [Finding(WARNING, "csv.truncated-line", name, offset + 2,
                             f"{what} (writer killed?); readers ignore it")]


def _no_lines(df: pd.DataFrame) -> pd.DataFrame:
    """A Parquet table's rows with a `line_no` column of missing values (it has no lines)."""
    df["line_no"] = pd.array([pd.NA] * len(df), dtype="Int64")
    return df


def parquet_row_groups(path: Path) -> Iterator[tuple[pd.DataFrame | None, list[Finding]]]:
    """`read_csv_lines` of a Parquet file row group by row group, as `read_csv_chunks` yields
    a CSV's chunks (no findings: a Parquet file has its types). Raises StreamUnreadable for a
    file without row groups (read it whole)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as pf:
        if pf.num_row_groups == 0:
            raise StreamUnreadable("no row groups")
        for i in range(pf.num_row_groups):
            yield _no_lines(pf.read_row_group(i).to_pandas()), []
