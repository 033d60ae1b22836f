"""`wattlife check`'s events checks of a long file holding several ranks (a merged run's
`events.csv`), its rows never held whole (issue 43): the file's chunks, as `events_run` reads
them, are split into one part per (host, rank) in one pass (`attribution.rank_split.RankParts`:
Parquet pieces, each row's file and line kept), each part is checked as a stream
(`events_stream.check_stream`), and the parts' outcomes are joined as the check of the whole
file gives them (`joined_ranks`).

Every events check is one of rows or of one (host, rank), and a file's findings of a check list
its rows in file order, the first `max_rows` quoted and the rest counted (`capped`): the parts'
capped findings are merged by line (`findings.CappedTally`, which keeps the first rows by line
whichever part they come from). `events.phase-missing` is a finding per (host, rank), in the
order of the ranks' first rows: the parts' come in that order. What the run-wide checks need
is added up (`WarmupTally.join`, `lowest_rank_steps`, the hosts and phases). A part a window
finds an overlap in cannot be streamed (`NeedsWhole`): the file is then checked whole, as
before."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..attribution.rank_split import RankParts
from .events_stream import (
    EventsContext,
    EventsOutcome,
    NeedsWhole,
    check_stream,
    clock_part,
    row_code_order,
)
from .findings import CappedTally, Finding

#: findings made once per (host, rank), not capped per file: joined in the parts' order
PER_RANK = ("events.phase-missing",)


def check_parts(path: Path, chunks: Iterable[pd.DataFrame], ctx: EventsContext
                ) -> tuple[set[tuple[str, int]], EventsOutcome]:
    """A file's prepared chunks (file order) split into their ranks' parts and checked a part
    at a time; the (host, rank)s and the file's outcome. The parts are removed at the end."""
    parts = RankParts(path, None)
    try:
        parts.split(chunks)
        outcomes = [check_stream(part.chunks(), ctx)[1] for part in parts.parts.values()]
    finally:
        parts.close()
    if not outcomes:
        raise NeedsWhole("no rows")
    return set(parts.parts), joined_ranks(outcomes, ctx.max_rows)


def joined_ranks(parts: list[EventsOutcome], max_rows: int) -> EventsOutcome:
    """The outcomes of one file's ranks (in the order of their first rows) as the check of the
    whole file gives them (module docstring)."""
    return EventsOutcome.joined(parts, lambda lists: _merged(lists, max_rows))


def _merged(lists: list[list[Finding]], max_rows: int) -> list[Finding]:
    """The ranks' findings of one check list: the per-rank ones in the ranks' order, the
    capped ones merged by line per (code, file, clock column), ordered as one rank's are."""
    tally = CappedTally(max_rows)
    once: list[Finding] = []
    for found in lists:
        once += [x for x in found if x.code in PER_RANK]
        tally.add([x for x in found if x.code not in PER_RANK], clock_part)
    return once + tally.findings(row_code_order)
