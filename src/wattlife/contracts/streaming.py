"""The trace read in chunks, in bounded memory, whatever its length: `iter_trace` yields the
contract columns in batches (pyarrow's streaming CSV reader, or a Parquet file's batches), each
checked as `read_trace` checks the whole file (exact int64 `t_ns`, `check_readings`). Forms:
`trace.csv`, `trace.csv.gz`, `trace.csv.zst` (one zstd frame per flush, `zstd_frames`) and
Parquet. A truncated last line (or a cut last zstd frame: a killed writer) is dropped with the
same warning as `read_trace`.

What the streaming parser does not take as the contract does (a cell pyarrow cannot convert:
an integer with spaces or a sign, a float `t_ns`, a non-numeric value; a truncated gzip file;
a Parquet `t_ns` stored as float) raises `StreamUnreadable`: the caller reads the file with the
in-memory `read_trace` instead, which gives the contract's error naming file, line and column,
or the table when the contract takes the cell."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ContractError
from .names import TRACE_COLUMNS
from .reading import check_readings, warn_cut_line
from .zstd_frames import ZSTD_SUFFIX, FrameReader

if TYPE_CHECKING:
    import pandas as pd

#: bytes of CSV per parsed batch (~130 k trace rows). pyarrow's streaming parser holds ~10x
#: its block at once (read-ahead, decompression, conversion): a 10 M-row trace's read peaked at
#: 0.49 GB resident with 8 MiB, 0.68 GB with 16, 1.03 GB with 64, in about the same time
BATCH_BYTES = 8 << 20
_STR_COLUMNS = ("host", "device", "metric", "source")


class StreamUnreadable(Exception):
    """The trace holds something the streaming parser does not convert as the contract does;
    read it with `read_trace` (whose error or table is the contract's)."""


class _WholeLines(io.RawIOBase):
    """A byte stream without its last line when that line has no newline (a killed writer's);
    `cut` is True once such a line was dropped."""

    def __init__(self, raw: io.RawIOBase | io.BufferedIOBase | gzip.GzipFile) -> None:
        super().__init__()
        self._raw = raw
        self._held = b""
        self._out = b""
        self.cut = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        while not self._out:
            data = self._read(max(len(b), 1 << 20))
            if not data:
                self.cut = bool(self._held)
                self._held = b""
                return 0
            data = self._held + data
            nl = data.rfind(b"\n")
            self._out, self._held = data[: nl + 1], data[nl + 1:]
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _read(self, size: int) -> bytes:
        """Up to `size` bytes of the raw stream, fewer only at its end."""
        parts, have = [], 0
        while have < size:
            try:
                data = self._raw.read(size - have)
            except (EOFError, OSError, gzip.BadGzipFile) as exc:
                raise StreamUnreadable(str(exc)) from None
            if not data:
                break
            parts.append(data)
            have += len(data)
        return b"".join(parts)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _raw_stream(path: Path) -> io.RawIOBase | io.BufferedIOBase | gzip.GzipFile:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ZSTD_SUFFIX:
        return FrameReader(path)
    return open(path, "rb")  # noqa: SIM115 (closed by _WholeLines.close)


class LineChunks:
    """A trace CSV (plain, .gz, .zst) as blocks of whole lines of about `chunk_bytes` (the
    first one starts with the header), decompressed as it goes; once iterated, `tail` is the
    last line's bytes when it had no newline (a killed writer's; b"" otherwise) and `cut_frame`
    whether a cut zstd frame was left out. Raises StreamUnreadable for a cut gzip file. A zstd
    block is a run of whole frames (`FrameReader.runs`), passed on without a copy when it ends
    with a newline (the sampler's frames do)."""

    def __init__(self, path: str | Path, chunk_bytes: int = BATCH_BYTES) -> None:
        self.path, self.chunk_bytes = Path(path), chunk_bytes
        self.tail = b""
        self.cut_frame = False

    def _blocks(self) -> Iterator[bytes]:
        """The file's decompressed bytes in blocks (not cut at lines)."""
        if self.path.suffix == ZSTD_SUFFIX:
            with FrameReader(self.path) as frames:
                yield from frames.runs(self.chunk_bytes)
            self.cut_frame = bool(frames.cut_bytes)
            return
        raw = _raw_stream(self.path)
        try:
            while True:
                try:
                    data = raw.read(self.chunk_bytes)
                except (EOFError, OSError, gzip.BadGzipFile) as exc:
                    raise StreamUnreadable(str(exc)) from None
                if not data:
                    break
                yield data
        finally:
            raw.close()

    def __iter__(self) -> Iterator[bytes]:
        held = b""
        for block in self._blocks():
            data = held + block if held else block
            nl = data.rfind(b"\n")
            if nl == len(data) - 1:
                held = b""
                yield data
            elif nl >= 0:
                held = data[nl + 1:]
                yield data[:nl + 1]
            else:
                held = data
        self.tail = held


def _batches_csv(path: Path, batch_bytes: int, names: list[str]) -> Iterator[pd.DataFrame]:
    """The trace's blocks of whole lines (`LineChunks`) parsed one at a time by pyarrow's CSV
    reader (its threads on one block), the file's header `names` given to every block."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    lines = LineChunks(path, batch_bytes)
    types = {"t_ns": pa.int64(), "value": pa.float64(),
             **{c: pa.dictionary(pa.int32(), pa.string()) for c in _STR_COLUMNS}}
    convert = pacsv.ConvertOptions(column_types=types, include_columns=list(TRACE_COLUMNS))
    rows = 0
    for i, block in enumerate(lines):
        try:
            table = pacsv.read_csv(pa.py_buffer(block), convert_options=convert,
                                   read_options=pacsv.ReadOptions(column_names=names,
                                                                  skip_rows=int(i == 0)))
        except pa.ArrowInvalid as exc:
            raise StreamUnreadable(str(exc)) from None
        if not table.num_rows:
            continue
        if table.column("t_ns").null_count:
            raise StreamUnreadable("empty t_ns cell")
        yield table.to_pandas()
        rows += table.num_rows
    if lines.tail or lines.cut_frame:
        warn_cut_line(path, rows + 2, stacklevel=4)


def _batches_parquet(path: Path, batch_rows: int) -> Iterator[pd.DataFrame]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    if not pa.types.is_integer(pf.schema_arrow.field("t_ns").type):
        raise StreamUnreadable("t_ns is not an integer column")
    for batch in pf.iter_batches(batch_size=batch_rows, columns=list(TRACE_COLUMNS)):
        df = batch.to_pandas()
        df["t_ns"] = df["t_ns"].astype("int64")
        for c in _STR_COLUMNS:
            df[c] = df[c].astype("category")
        yield df


def _header_columns(path: Path) -> list[str]:
    """The trace's column names (its CSV header or Parquet schema)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    with _WholeLines(_raw_stream(path)) as s:
        head = io.BufferedReader(s).readline().decode("utf-8", errors="replace")
    if not head:
        raise ContractError(f"{path}: empty file (no header)")
    return [c.strip().strip('"') for c in head.rstrip("\r\n").split(",")]


def iter_trace(path: str | Path, batch_bytes: int = BATCH_BYTES) -> Iterator[pd.DataFrame]:
    """The trace's contract columns in batches (`t_ns` int64, `value` float64, host / device /
    metric / source categorical), in file order; each batch's readings checked
    (`check_readings`, lines named in the file). Raises ContractError as `read_trace` does for a
    missing file or column, and StreamUnreadable (module docstring)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    names = _header_columns(path)
    missing = [c for c in TRACE_COLUMNS if c not in names]
    if missing:
        raise ContractError(f"{path}: missing column(s) {missing}; expected at least "
                            f"{TRACE_COLUMNS}")
    parquet = path.suffix == ".parquet"
    batches = (_batches_parquet(path, max(batch_bytes // 48, 1)) if parquet
               else _batches_csv(path, batch_bytes, names))
    offset = 0
    for df in batches:
        df.index += offset
        check_readings(df, path, None if parquet else 2, offset=offset)
        offset += len(df)
        yield df
