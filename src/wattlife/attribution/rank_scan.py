"""What `rank_events.RankEvents` needs to know of a run's events files before it reads any rank
(issue 43): per (host, rank), where its rows are (its own file, or its part of a file holding
several ranks, split by `rank_split`), its local rank, row count, run ids, whether it marks
`compile` and its median start (the time-unit check of a rank never held whole). A file is
scanned a block of whole lines at a time, a few columns parsed (`scan_file`); the starts go to a
temporary file and their median is selected from it exactly (`median_start`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from ..contracts import COMPILE, LineChunks, StreamUnreadable, events_files
from .events_chunks import record_blocks
from .rank_split import RankPart, RankParts, one_local_rank
from .windowed import kth_smallest

#: where a rank's rows are: its own file, or its part of a file holding several ranks
Source = Path | RankPart

_SCAN = ["run_id", "host", "rank", "local_rank", "phase", "start_ns"]
#: bytes of an events file `scan_file` parses at a time
SCAN_BLOCK_BYTES = 1 << 22
#: starts read back a block at a time for their median (`median_start`)
MEDIAN_BLOCK_STARTS = 1 << 20


def scan_file(path: Path, spill_dir: str | Path | None = None) -> dict[str, Any] | None:
    """(host, rank, local_rank, rows, run ids, has compile, median start) of one rank's events
    file (local_rank None where a row has none); `{"several": True}` for a file of several
    (host, rank); None when a rank has several local ranks, a row no rank, or pyarrow cannot
    parse it as typed.
    Read a block of whole lines at a time (`SCAN_BLOCK_BYTES`, `events_chunks.record_blocks`):
    what is held is one block; the starts go to a temporary file under `spill_dir` (8 bytes a
    row on disk), their median selected from it exactly (`median_start`), and the parser's
    buffers go back to the system after (read whole, 3 days of one rank kept 0.33 GB in
    pyarrow's pool to the end of the run)."""
    import pyarrow as pa

    with tempfile.TemporaryFile(dir=spill_dir) as starts:
        try:
            seen = _scanned(path, starts)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError, StreamUnreadable):
            return None
        finally:
            pa.default_memory_pool().release_unused()
        if seen is None:
            return None
        if len(seen["host"]) > 1 or len(seen["rank"]) > 1:
            return {"several": True}
        alone, local = one_local_rank(seen["local_rank"] | (
            {float("nan")} if seen["local_null"] else set()))
        if not alone:
            return None
        return {"host": seen["host"].pop(), "rank": seen["rank"].pop(),
                "local_rank": local, "rows": seen["rows"],
                "run_ids": seen["run_id"], "compile": seen["compile"],
                # what `check_time_units` takes of the file's rows (the streamed path's check)
                "start_median": float("nan") if seen["null"] else median_start(
                    lambda: _blocks_of(starts), seen["rows"], seen["low"], seen["high"])}


def _blocks_of(starts: IO[bytes]) -> Iterator[np.ndarray]:
    """The int64 starts in the file `starts`, a block at a time."""
    starts.seek(0)
    while len(block := np.frombuffer(starts.read(8 * MEDIAN_BLOCK_STARTS), np.int64)):
        yield block


def median_start(pieces: Callable[[], Iterator[np.ndarray]], n: int, low: int,
                  high: int) -> float:
    """`float(np.median(starts))` of the int64 starts `pieces()` gives a block at a time,
    exactly: selected by `windowed.kth_smallest` over their offsets from the least (three
    passes, a block at a time), the middle two's mean as np.median takes it; read whole where
    the offsets do not fit 63 bits (no epoch timestamps)."""
    if high - low >= 1 << 63:
        return float(np.median(np.concatenate(list(pieces()))))
    mid = kth_smallest(lambda: (b - low for b in pieces()),
                       [n // 2] if n % 2 else [n // 2 - 1, n // 2])
    return sum(float(x + low) for x in mid) / len(mid)


def _scanned(path: Path, starts: IO[bytes]) -> dict[str, Any] | None:
    """`scan_file`'s columns a block (a Parquet file: a row group) at a time: the distinct
    hosts, ranks, local ranks and run ids, whether a `compile` row is there or a row without a
    local rank, the number of rows and the least and greatest start (the starts written to
    `starts`); None at a missing rank, or when the file has no row. It stops at a second host
    or rank: that file is split (`rank_split`), which reads all of it."""
    import pyarrow.compute as pc

    seen: dict[str, Any] = {c: set() for c in ("host", "rank", "local_rank", "run_id")}
    seen.update(compile=False, rows=0, null=False, local_null=False,
                low=np.iinfo(np.int64).max, high=np.iinfo(np.int64).min)
    for t in _tables(path):
        if t.column("rank").null_count:
            return None
        seen["local_null"] |= bool(t.column("local_rank").null_count)
        for c in ("host", "rank", "local_rank", "run_id"):
            seen[c] |= set(pc.unique(t.column(c).drop_null()).to_pylist())
        if len(seen["host"]) > 1 or len(seen["rank"]) > 1:
            return seen  # several ranks: the split reads the file (the rest is not needed)
        seen["compile"] |= bool(pc.any(pc.equal(t.column("phase"), COMPILE)).as_py())
        col = t.column("start_ns")
        seen["null"] |= bool(col.null_count)  # np.median: NaN
        start = np.ascontiguousarray(col.drop_null().to_numpy(), np.int64)
        if len(start):
            seen["low"] = min(seen["low"], int(start.min()))
            seen["high"] = max(seen["high"], int(start.max()))
        seen["rows"] += len(col)
        starts.write(start.tobytes())
    return seen if seen["rows"] else None


def _tables(path: Path) -> Iterator[Any]:
    """The scanned columns (`_SCAN`) of an events file as Arrow tables typed as `read_events`
    types them (local_rank float: `merge-nodes` writes "0.0"; a missing column: nulls): a CSV
    file a block of whole
    lines at a time, a Parquet file a row group at a time (cast; a cell that does not cast
    raises `ArrowInvalid`)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    types = {"run_id": pa.string(), "host": pa.string(), "rank": pa.int64(),
             "local_rank": pa.float64(), "phase": pa.string(), "start_ns": pa.int64()}
    schema = pa.schema([(c, types[c]) for c in _SCAN])
    if path.suffix == ".parquet":
        with pq.ParquetFile(path) as pf:
            have = [c for c in _SCAN if c in pf.schema_arrow.names]
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i, columns=have)
                for c in (c for c in _SCAN if c not in have):  # missing: all null
                    t = t.append_column(c, pa.nulls(len(t), types[c]))
                yield t.select(_SCAN).cast(schema)
        return
    convert = pacsv.ConvertOptions(include_columns=_SCAN, column_types=types,
                                   include_missing_columns=True)
    for header, block in record_blocks(LineChunks(path, SCAN_BLOCK_BYTES)):
        yield pacsv.read_csv(pa.BufferReader(header + block), convert_options=convert)


class Scanned(NamedTuple):
    """A run's ranks: where each one's rows are, its scan (`scan_file`'s keys), and the files
    split (`close` removes their parts)."""

    sources: list[Source]
    scans: list[dict[str, Any]]
    splits: list[RankParts]

    def close(self) -> None:
        """Removes the split files' parts."""
        for parts in self.splits:
            parts.close()


def scan_sources(events: str | Path, spill_dir: str | Path | None = None) -> Scanned | None:
    """The run's events file and its rank siblings scanned, a file of several ranks split into
    its ranks' parts (under `spill_dir`); None where the events must be read whole (a file
    `scan_file` refuses, a rank twice, no file)."""
    out = Scanned([], [], [])
    try:
        files = [p for p in events_files(events) if p.exists()]
        whole = not files or not all(_add_file(out, p, spill_dir) for p in files)
    except BaseException:
        out.close()
        raise
    ranks = [(s["host"], s["rank"]) for s in out.scans]
    if whole or len(set(ranks)) != len(ranks):
        out.close()
        return None
    return out


def _add_file(out: Scanned, path: Path, spill_dir: str | Path | None) -> bool:
    """The file's rank, or its ranks' parts, added to `out`; False where it cannot be."""
    scan = scan_file(path, spill_dir)
    if scan is None:
        return False
    if not scan.get("several"):
        out.sources.append(path)
        out.scans.append(scan)
        return True
    parts = RankParts(path, spill_dir)
    out.splits.append(parts)
    ranked = parts.split().ranked()
    for part, part_scan in ranked or []:
        out.sources.append(part)
        out.scans.append(part_scan)
    return ranked is not None


def start_median(source: Source, scan: dict[str, Any]) -> float:
    """The rank's median start (`median_start`; a part's selected from its pieces when first
    asked for)."""
    if "start_median" not in scan and isinstance(source, RankPart):
        low, high = scan["starts"]
        scan["start_median"] = median_start(source.starts, scan["rows"], low, high)
    return float(scan["start_median"])
