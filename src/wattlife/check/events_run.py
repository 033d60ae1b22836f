"""`wattlife check`'s events checks of a run one rank's file at a time (issue 43): memory
bounded by one file (a day of one rank at 0.3 s steps: ~1.4 M rows), not by the run (8 ranks:
~11 M rows held at once before).

Every events check is one of rows or of one (host, rank) (the nesting, a concurrent phase ending
after its rank's last phase, the steps a kind's rank marks), and reports per file: the files
are checked in groups holding whole (host, rank)s (one file each, as the workloads write them;
files naming one (host, rank) are checked together), their findings put in the order one pass
over all the files gives (per check, file after file: `_ORDER`), and what the run-wide findings
need is added up over the groups (the hosts against the trace, the lowest rank's steps, the
warm-up tally, the phase names a kind is inferred from). A group of more than
`events_stream.STREAM_ROWS` rows (~17 h of one rank at 0.3 s steps) is not held whole: its
chunks and its rows in start order are checked as a stream (`events_stream.check_stream`); a
long file of several (host, rank)s is split into its ranks' parts, each checked so
(`events_parts`). Where that cannot give the same findings (an overlap, several files of which
one holds several ranks, a file the chunked reader does not take), the group is read and
checked whole, as a shorter one (a Parquet file is read whole either way). The findings are
those of `check_events`, `check_span`, `check_summary`, `warmup_findings` and
`check_kind_phases` of all the files joined (tests/check/test_check_events_run.py,
test_check_events_stream.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..contracts import EVENTS_COLUMNS, ContractError, StreamUnreadable
from ..contracts.compact import concat_compact
from . import events_stream
from .events import check_events
from .events_parts import check_parts
from .events_reading import EventsChunks, read_events_file, with_file_name
from .events_stream import (
    EventsContext,
    EventsOutcome,
    NeedsWhole,
    SeveralRanks,
    check_stream,
)
from .findings import Finding
from .kinds import KIND_PHASES, check_kind_phases, infer_kind
from .outputs import rank0_steps
from .reading import check_columns
from .trace import span_findings, span_host_keys, untraced_hosts

#: the per-file findings' codes, in the order one pass over all files gives them (one place
#: each; codes of one place keep their order within a file)
_ORDER = {code: i for i, codes in enumerate((
    ("clock.before-2000", "clock.future"), ("events.end-before-start",),
    ("events.overlap-clamped",), ("events.overlap",), ("events.concurrent-unfinished",),
    ("events.step-items",), ("events.step-zero-items",),
    ("events.outside-trace",), ("events.outside-workload",),
    ("events.phase-missing",), ("events.step-children",))) for code in codes}


def kinds_to_check(kind: str, meta: dict[str, Any] | None,
                   summary: dict[str, Any] | None) -> tuple[str, ...]:
    """The kind `check_run` will check (`--kind`, or inferred from meta.json and the summary);
    every kind where it is inferred from the events' phase names, known only at the end."""
    if kind == "none":
        return ()
    if kind != "auto":
        return (kind,)
    k = infer_kind(meta, summary, ())
    return (k,) if k is not None else tuple(KIND_PHASES)


def check_events_files(paths: list[Path], ctx: EventsContext, f: list[Finding]
                       ) -> EventsOutcome | None:
    """The events files read (their reading findings appended to `f`, file after file) and
    checked a group of whole (host, rank)s at a time; None when none is readable with its
    contract's columns (as the joined table of `_frame`s would be)."""
    groups: list[tuple[list[int], set[tuple[str, int]], EventsOutcome]] = []
    for i, p in enumerate(paths):
        got = _group([p], ctx, f)
        if got is None:
            continue
        keys, held = got
        hit = [g for g in groups if g[1] & keys]
        if hit:  # a (host, rank) in several files: they are checked together (read again)
            files = sorted({i, *(j for g in hit for j in g[0])})
            keys = keys.union(*(g[1] for g in hit))
            groups = [g for g in groups if not any(g is h for h in hit)]
            del held
            again = _group([paths[j] for j in files], ctx, [])
            assert again is not None
            held = again[1]
        else:
            files = [i]
        groups.append((files, keys, held if isinstance(held, EventsOutcome)
                       else _check_group(held, ctx)))
        del held
    if not groups:
        return None
    return _joined([g[2] for g in sorted(groups, key=lambda g: g[0][0])],
                   {str(p): i for i, p in enumerate(paths)})


def _group(paths: list[Path], ctx: EventsContext, f: list[Finding]
           ) -> tuple[set[tuple[str, int]], pd.DataFrame | EventsOutcome] | None:
    """Some files' (host, rank)s and their rows joined (`_prepared`), read in chunks; where
    they hold more than `events_stream.STREAM_ROWS` rows, their outcome checked as a stream
    instead (`check_stream`), or, where it cannot be, the rows read whole again. Their reading
    findings appended to `f`; None when none is readable with its contract's columns."""
    found: list[Finding] = []
    try:
        got = _held_or_streamed(paths, ctx, found)
    except SeveralRanks:
        got = _split(paths, ctx, f)
    except (StreamUnreadable, ContractError, NeedsWhole):
        got = None
    else:
        f += found
    if got is not None:
        return got
    frames = [x for x in (_frame(p, ctx.max_rows, f) for p in paths) if x is not None]
    if not frames:
        return None
    ev = _prepared(frames)
    return set(zip(ev["host"], ev["rank"].tolist(), strict=True)), ev


def _split(paths: list[Path], ctx: EventsContext, f: list[Finding]
           ) -> tuple[set[tuple[str, int]], EventsOutcome] | None:
    """A long file of several (host, rank)s checked a rank at a time (`events_parts`), its
    reading findings appended to `f`; None where it cannot be (a group of several files, an
    overlap in a rank: the rows are then read whole)."""
    if len(paths) != 1:
        return None
    found: list[Finding] = []
    reader = EventsChunks(paths[0], ctx.max_rows)
    try:
        got = check_parts(paths[0], _file_chunks(paths[0], iter(reader), reader, found), ctx)
    except (StreamUnreadable, ContractError, NeedsWhole):
        return None
    f += found
    return got


def _held_or_streamed(paths: list[Path], ctx: EventsContext, f: list[Finding]
                      ) -> tuple[set[tuple[str, int]], pd.DataFrame | EventsOutcome] | None:
    """`_group` where the chunked reader takes every file (it raises where not): the files'
    chunks held until they pass `STREAM_ROWS` rows, then all passed to `check_stream`."""
    done: list[pd.DataFrame] = []
    rows = 0
    for k, p in enumerate(paths):
        reader = EventsChunks(p, ctx.max_rows)
        it = iter(reader)
        parts: list[pd.DataFrame] = []
        for df in it:
            parts.append(df)
            rows += len(df)
            if rows > events_stream.STREAM_ROWS:  # the rows held let go as they pass
                held = (_prepared([x]) for x in _drained(done))
                key, out = check_stream(chain(
                    held, _file_chunks(p, chain(_drained(parts), it), reader, f),
                    _files_chunks(paths[k + 1:], ctx.max_rows, f)), ctx)
                return {key}, out
        frame = _checked(p, concat_compact(parts) if parts else None, reader.findings(), f)
        if frame is not None:
            done.append(frame)
    if not done:
        return None
    ev = _prepared(done)
    return set(zip(ev["host"], ev["rank"].tolist(), strict=True)), ev


def _drained(held: list[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The frames of a list, each removed from it as it is given (none kept by the list)."""
    held.reverse()
    while held:
        yield held.pop()


def _files_chunks(paths: list[Path], max_rows: int, f: list[Finding]) -> Iterator[pd.DataFrame]:
    """The files' prepared chunks, file after file (`_file_chunks`)."""
    for p in paths:
        reader = EventsChunks(p, max_rows)
        yield from _file_chunks(p, iter(reader), reader, f)


def _file_chunks(path: Path, chunks: Iterable[pd.DataFrame], reader: EventsChunks,
                 f: list[Finding]) -> Iterator[pd.DataFrame]:
    """A file's chunks prepared as `_prepared` joins them (none where it lacks a contract's
    column); its findings appended to `f` once read, as `_frame` gives them."""
    cols: list[Finding] | None = None
    for df in chunks:
        if cols is None:
            cols = check_columns(df, EVENTS_COLUMNS, str(path))
        if not cols:
            yield _prepared([with_file_name(df, path)])
    f += reader.findings() + (cols or [])


def _checked(path: Path, df: pd.DataFrame | None, found: list[Finding], f: list[Finding]
             ) -> pd.DataFrame | None:
    """A file's rows read and its findings (appended to `f`) as `_frame` gives them."""
    f += found
    if df is None:
        return None
    cols = check_columns(df, EVENTS_COLUMNS, str(path))
    f += cols
    return None if cols else with_file_name(df, path)


def _frame(path: Path, max_rows: int, f: list[Finding]) -> pd.DataFrame | None:
    """One events file read (in chunks) with its `file_name`, its findings appended to `f`;
    None when unreadable or without its contract's columns."""
    df, ff = read_events_file(path, max_rows)
    return _checked(path, df, ff, f)


def _prepared(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Events files' rows joined as the checks take them: rows without a start, end or rank
    left out, those as int64, phase and host as strings."""
    ev = concat_compact(frames)
    keep = (ev["start_ns"].notna() & ev["end_ns"].notna() & ev["rank"].notna()).to_numpy()
    if not keep.all():  # no copy of a table without a missing cell there
        ev = ev[keep]
    for c in ("start_ns", "end_ns", "rank"):
        if ev[c].dtype != np.int64:
            ev[c] = ev[c].astype(np.int64)
    ev["phase"] = ev["phase"].astype(str)
    ev["host"] = ev["host"].astype(str)
    return ev


def _check_group(ev: pd.DataFrame, ctx: EventsContext) -> EventsOutcome:
    """Every events check of a group of whole (host, rank)s."""
    out = EventsOutcome(events=check_events(ev, ctx.now_ns, ctx.max_rows))
    if ctx.span is not None and len(ctx.span):
        out.span = span_findings(ctx.span, ev, ctx.meta, ctx.max_rows)
        out.hosts = set(span_host_keys(ctx.span, ev))
    out.first_file = str(ev["file_name"].iloc[0]) if len(ev) else None
    out.steps = rank0_steps(ev)
    out.tally.add(ev)
    out.phases = set(ev["phase"].unique())
    out.kinds = {k: check_kind_phases(ev, k, ctx.meta, ctx.max_rows) for k in ctx.kinds}
    return out


def _joined(parts: list[EventsOutcome], file_index: dict[str, int]) -> EventsOutcome:
    """The groups' outcomes (in the order of their first file) as one pass over all the files
    gives them: each list of findings ordered by (check, file), the run-wide sums added up."""
    def order(ff: list[Finding]) -> list[Finding]:
        return sorted(ff, key=lambda x: (_ORDER.get(x.code, len(_ORDER)),
                                         file_index.get(x.file, len(file_index))))

    return EventsOutcome.joined(parts, lambda lists: order([x for ff in lists for x in ff]))


def untraced(outcome: EventsOutcome, ctx: EventsContext) -> list[Finding]:
    """`check_span`'s hosts of the events without trace rows (the run's first events file)."""
    if ctx.span is None or not len(ctx.span):
        return []
    return untraced_hosts(ctx.span, outcome.hosts, outcome.first_file or "", ctx.trace_file)
