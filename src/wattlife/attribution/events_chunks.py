"""One rank's events file read in chunks (issue 43): the rows, columns, types and line numbers
of `read_events(path, lines=True, siblings=False)` (or without the line numbers, `lines=False`:
`merge-nodes` writes none), a chunk at a time, so that a long run's
file is never parsed whole; `prepare_windows.stream_file` feeds them to the external sort
(`start_order.start_ordered`).

The bytes come as `wattlife check` reads them (`contracts.LineChunks`: plain, .gz, .zst, blocks
of whole lines), re-joined where a block ends inside a quoted field (a phase name holding a line
break); each chunk, its file's header in front, is parsed by the contract reader's own parse
(`contracts.reading.parse_csv_bytes`, `events_rows`), its line numbers offset by the lines
before it. A Parquet file is read a row group at a time. A chunk the reader refuses (a bad
cell, a phase ending before it starts, an unreadable stream) has the file read whole to raise
`read_events`' own error (the same file:line and words, whichever row it names first); a
truncated last line or a cut zstd frame gives `read_events`' warnings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from ..contracts import BATCH_BYTES, ContractError, LineChunks, StreamUnreadable, read_events
from ..contracts.names import EVENTS_COLUMNS, EVENTS_TYPES
from ..contracts.reading import events_rows, parse_csv_bytes, typed_cells, warn_cut_line


def read_events_chunks(path: str | Path, chunk_bytes: int | None = None, lines: bool = True
                       ) -> Iterator[pd.DataFrame]:
    """`read_events(path, lines=lines, siblings=False)` in chunks of about `chunk_bytes` of CSV
    (`contracts.BATCH_BYTES` by default), each indexed by its rows' positions in the file (the
    chunks joined: that frame, index included). Errors and warnings: the module docstring."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    first = 0
    try:
        for df in _parsed(path, chunk_bytes or BATCH_BYTES):
            df = events_rows(df, path, lines=lines)
            df.index = pd.RangeIndex(first, first + len(df))
            first += len(df)
            yield df
    except (ContractError, StreamUnreadable) as exc:
        read_events(path, lines=lines, siblings=False)  # its error, where it gives one
        if isinstance(exc, StreamUnreadable):
            raise ContractError(f"{path}: {exc}") from exc
        raise


def _parsed(path: Path, chunk_bytes: int) -> Iterator[pd.DataFrame]:
    """The file's rows a chunk at a time, typed as `read_events` types them."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        with pq.ParquetFile(path) as pf:
            for i in range(pf.num_row_groups):
                yield typed_cells(pf.read_row_group(i).to_pandas(), path, EVENTS_COLUMNS,
                                  EVENTS_TYPES, None)
        return
    chunks = LineChunks(path, chunk_bytes)
    header, lines = b"", 0
    for header, block in record_blocks(chunks):
        if block:
            yield parse_csv_bytes(header + block, path, EVENTS_COLUMNS, EVENTS_TYPES, lines)
        lines += block.count(b"\n")
    if not header:
        raise ContractError(f"{path}:1: header line is truncated" if chunks.tail
                            else f"{path}: empty file (no header)")
    if not lines:  # a header alone: its empty frame, as the file read whole
        yield parse_csv_bytes(header, path, EVENTS_COLUMNS, EVENTS_TYPES)
    for cut in (chunks.cut_frame, bool(chunks.tail)):
        if cut:  # the header, the lines read, then the cut one
            warn_cut_line(path, 1 + lines + 1, stacklevel=3)


def record_blocks(chunks: LineChunks) -> Iterator[tuple[bytes, bytes]]:
    """The file's header line and each block of whole records after it (a block ending inside
    a quoted field joined to the next): `header + block` parses as a CSV file of its own."""
    header = b""
    for block in _whole_records(chunks):
        if not header:
            cut = block.find(b"\n") + 1
            header, block = block[:cut], block[cut:]
        yield header, block


def _whole_records(chunks: LineChunks) -> Iterator[bytes]:
    """The blocks of whole lines, a block ending inside a quoted field (an odd count of quote
    characters so far) joined to the next: each block then ends at a record's end."""
    held: list[bytes] = []
    odd = False
    for block in chunks:
        held.append(block)
        odd ^= block.count(b'"') % 2 == 1
        if not odd:
            yield b"".join(held) if len(held) > 1 else held[0]
            held = []
    if held:  # an unclosed quote: the parser's error, as for the file read whole
        yield b"".join(held)
