"""`wattlife check`'s events checks of one long (host, rank), its rows never held whole
(issue 43): a group of files of one (host, rank) over `STREAM_ROWS` rows (`events_run`) is
checked from its chunks (file order) and from its rows in start order a window at a time.

- Per chunk: the row checks (`events.row_findings`: clock, end >= start; `step_findings`;
  `trace.span_findings`), merged as `capped` of all the rows gives them (`CappedTally`), and
  what the rest needs carried: the lowest rank's steps, the warm-up tally (the first
  `WARMUP_STEPS` steps by start held apart until the count is known), the phases marked, the
  hosts, the last timeline end with the concurrent rows that may still end after it.
- The nesting: the rows that nest (`attribution.timeline`, end >= start) put in start order by
  the external sort (`attribution.start_order.start_ordered`; no `depth` column, so the order
  is the check's (start, -end, row)) and built a window at a time (`attribution.tree_windows`,
  open rows carried). A window that finds an overlap stops the stream (`NeedsWhole`): clamping
  (`resolve_overlaps`) settles a rank's overlaps over its whole rows, and an overlap's parent
  can lie in a window gone; the caller then checks the group whole, as before. Without an
  overlap in any window the whole rank has none (the first overlap in start order is found by
  its window: every row before it nests), so `events.overlap` and `events.overlap-clamped`
  have no rows and each row's parent is the whole tree's. The kind's step children come from
  each window's own rows: the nearest `step` above a row is among the rows open at its start;
  a step's children are complete once the step is no longer carried.
- A group of several (host, rank)s, a chunk the reader cannot stream: `NeedsWhole` too.

Same findings as `events_run`'s whole group (tests/check/test_check_events_stream.py), but
the `step` throughput's items are summed chunk by chunk (a different order of float sums:
equal for whole items)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..attribution.start_order import start_ordered
from ..attribution.tree_windows import NO_END, WINDOW_ROWS, TreeWindow, tree_windows
from ..contracts import (
    COMPILE,
    CONCURRENT_PHASES,
    STEP,
    WARMUP_STEPS,
    ContractError,
    warmup_count,
)
from .events import late_findings, row_findings, step_findings
from .findings import ERROR, CappedTally, Finding, capped
from .kinds import KIND_STEP_CHILDREN, lacking_message, missing_phases
from .outputs import rank0_steps
from .trace import span_findings, span_host_keys
from .warmup import WarmupTally

#: a group of files of one (host, rank) of more rows than this is checked as a stream
STREAM_ROWS = 1 << 20
#: new rows of a nesting window (`tree_windows`)
WINDOW = WINDOW_ROWS
#: the external sort's sizes (`start_ordered`'s keywords; its defaults where empty)
SORT: dict[str, int] = {}
_CLOCK_COLUMNS = ("start_ns", "end_ns")
_ROW_CODES = ("clock.before-2000", "clock.future", "events.end-before-start",
              "events.step-items", "events.step-zero-items", "events.outside-trace",
              "events.outside-workload")


class NeedsWhole(Exception):
    """The group cannot be checked as a stream (module docstring): check it whole."""


class SeveralRanks(NeedsWhole):
    """The group holds several (host, rank)s: a file of them can be split (`events_parts`)."""


@dataclass(frozen=True)
class EventsContext:
    """What the events checks take besides the events: the trace's span per host (None without
    a readable trace), the kinds whose phases are checked (`events_run.kinds_to_check`)."""

    now_ns: int
    max_rows: int
    span: pd.DataFrame | None
    trace_file: str
    meta: dict[str, Any] | None
    kinds: tuple[str, ...]


@dataclass
class EventsOutcome:
    """The events findings of a run, and what the run-wide checks need of its events."""

    events: list[Finding] = field(default_factory=list)
    span: list[Finding] = field(default_factory=list)
    kinds: dict[str, list[Finding]] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)
    first_file: str | None = None
    steps: tuple[int, int] | None = None
    tally: WarmupTally = field(default_factory=WarmupTally)
    phases: set[str] = field(default_factory=set)

    @classmethod
    def joined(cls, parts: list[EventsOutcome],
               join: Callable[[list[list[Finding]]], list[Finding]]) -> EventsOutcome:
        """Several groups' outcomes (in order) as one: each list of findings joined by `join`
        (given the groups' lists), the run-wide sums added up."""
        out = cls()
        out.events = join([p.events for p in parts])
        out.span = join([p.span for p in parts])
        out.kinds = {k: join([p.kinds[k] for p in parts]) for k in parts[0].kinds}
        out.first_file = next((p.first_file for p in parts if p.first_file is not None), None)
        for p in parts:
            out.hosts |= p.hosts
            out.phases |= p.phases
            out.tally.join(p.tally)
            out.steps = lowest_rank_steps(out.steps, p.steps)
        return out


def lowest_rank_steps(a: tuple[int, int] | None, b: tuple[int, int] | None
                      ) -> tuple[int, int] | None:
    """`rank0_steps` of two groups' (or chunks') rows together."""
    if a is None or b is None:
        return a or b
    if a[0] != b[0]:
        return min(a, b)
    return a[0], a[1] + b[1]


def clock_part(x: Finding) -> str:
    """The column a clock finding names (its message starts 'start_ns=...')."""
    col = x.message.split("=", 1)[0]
    return col if col in _CLOCK_COLUMNS else ""


def row_code_order(key: tuple[str, str, str]) -> tuple[int, int]:
    """The order of one file's row findings' groups (code, file, clock column), as
    `check_events` gives them: the start's clock, the end's, then by code."""
    code, _, col = key
    return (_CLOCK_COLUMNS.index(col) if col else 0,
            _ROW_CODES.index(code) if code in _ROW_CODES else len(_ROW_CODES))


class _Steps:
    """The warm-up tally of one (host, rank)'s steps fed a chunk at a time: the first
    `warmup_count` steps by (start, row) are left out once the count is known, so the
    `contracts.WARMUP_STEPS` earliest seen are held apart."""

    def __init__(self) -> None:
        self.n, self.items, self.ns = 0, 0.0, 0
        self.first = pd.DataFrame({"start_ns": np.zeros(0, np.int64),
                                   "row": np.zeros(0, np.int64), "items": np.zeros(0),
                                   "ns": np.zeros(0, np.int64)})

    def add(self, steps: pd.DataFrame, first_row: int) -> None:
        new = pd.DataFrame({"start_ns": steps["start_ns"].to_numpy(np.int64),
                            "row": first_row + np.arange(len(steps), dtype=np.int64),
                            "items": steps["items"].to_numpy(np.float64),
                            "ns": (steps["end_ns"] - steps["start_ns"]).to_numpy(np.int64)})
        self.n += len(new)
        both = pd.concat([self.first, new], ignore_index=True)
        both = both.iloc[np.lexsort((both["row"].to_numpy(), both["start_ns"].to_numpy()))]
        self.first, rest = both.iloc[:WARMUP_STEPS], both.iloc[WARMUP_STEPS:]
        self._count(rest)

    def _count(self, rows: pd.DataFrame) -> None:
        self.items += float(rows["items"].sum())
        self.ns += int(rows["ns"].sum())

    def post(self) -> tuple[int, float, int]:
        """(count, items, ns) of the steps after warm-up (`WarmupTally.post`'s entry)."""
        if warmup_count(self.n) == 0:
            self._count(self.first)
            self.first = self.first.iloc[:0]
            return self.n, self.items, self.ns
        return self.n - len(self.first), self.items, self.ns


class _Children:
    """Which of a kind's children every step holds, from the nesting's windows: per file the
    first `max_rows` lacking steps (by row) and their count."""

    def __init__(self, kinds: tuple[str, ...], max_rows: int, rank: int) -> None:
        self.names = list(dict.fromkeys(c for k in kinds for c in KIND_STEP_CHILDREN[k]))
        self.need = {k: sum(1 << self.names.index(c) for c in KIND_STEP_CHILDREN[k])
                     for k in kinds}
        self.max_rows, self.rank = max_rows, rank
        self.open: dict[int, int] = {}  # a carried step's position: the children seen so far
        self.lacking: dict[str, dict[int, tuple[list[tuple[int, Any, Any, list[str]]], int]]] = {
            k: {} for k in kinds}

    def window(self, w: TreeWindow) -> None:
        """One window's own rows' nearest steps, and the steps it sees for the last time."""
        assert w.frame is not None
        phase = w.frame["phase"].to_numpy(object)
        parent = w.tree.parent
        anc = np.full(len(phase), -1, np.int64)
        cur = parent.copy()
        is_step = phase == STEP
        while True:
            live = np.flatnonzero((cur >= 0) & (anc < 0))
            if not len(live):
                break
            hit = is_step[cur[live]]
            anc[live[hit]] = cur[live[hit]]
            cur[live] = parent[cur[live]]
        own = w.tree.start >= w.lo
        bits = np.zeros(len(phase), np.int64)
        for i, name in enumerate(self.names):
            bits[phase == name] = 1 << i
        sel = own & (anc >= 0) & (bits > 0)
        mask = np.zeros(len(phase), np.int64)
        np.bitwise_or.at(mask, anc[sel], bits[sel])
        steps = np.flatnonzero(is_step)
        for i in steps[~own[steps]]:  # carried: what earlier windows saw
            mask[i] |= self.open.pop(int(w.rows[i]), 0)
        ends = w.tree.end[steps] < w.hi if w.hi != NO_END else np.ones(len(steps), bool)
        for i in steps[~ends]:
            self.open[int(w.rows[i])] = int(mask[i])
        self._done(w, steps[ends], mask)

    def _done(self, w: TreeWindow, steps: np.ndarray, mask: np.ndarray) -> None:
        """Steps whose children are all seen: per file, the lacking ones counted and the first
        `max_rows` by row kept."""
        assert w.frame is not None
        row, file = w.frame["__row"].to_numpy(), w.frame["__file"].to_numpy()
        for k, need in self.need.items():
            bad = steps[(mask[steps] & need) != need]
            for fi in np.unique(file[bad]):
                of = bad[file[bad] == fi]
                first = of[np.argsort(row[of], kind="stable")[:self.max_rows]]
                rows, n = self.lacking[k].get(int(fi), ([], 0))
                rows += [(int(row[i]), w.frame["line_no"].iat[i], w.frame["step"].iat[i],
                          [c for c in KIND_STEP_CHILDREN[k]
                           if not mask[i] >> self.names.index(c) & 1]) for i in first]
                rows.sort(key=lambda x: x[0])
                self.lacking[k][int(fi)] = (rows[:self.max_rows], n + len(of))

    def findings(self, kind: str, files: list[str]) -> list[Finding]:
        """`events.step-children` per file (in file order)."""
        f: list[Finding] = []
        for i, (rows, n) in sorted(self.lacking[kind].items()):
            lines = [r[1] for r in rows] + [None] * (n - len(rows))
            f += capped(ERROR, "events.step-children", files[i], lines,
                        [lacking_message(r[2], self.rank, r[3]) for r in rows], self.max_rows)
        return f


class _Pass:
    """One (host, rank)'s chunks checked as they pass on to the sort (module docstring)."""

    def __init__(self, ctx: EventsContext) -> None:
        self.ctx = ctx
        self.rows, self.spans = CappedTally(ctx.max_rows), CappedTally(ctx.max_rows)
        self.files: list[str] = []
        self.key: tuple[str, int] | None = None
        self.out = EventsOutcome()
        self.steps = _Steps()
        self.n = 0
        self.last: int | None = None
        self.late = pd.DataFrame()

    def watch(self, chunks: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Each chunk checked; its rows that nest passed on with what the step children's
        findings quote (`__file`: the file's index; `__row`: the row's in the group's files,
        the order findings list rows in)."""
        for c in chunks:
            if not len(c):
                continue
            files = self._rows(c)
            tl = ~c["phase"].isin(CONCURRENT_PHASES).to_numpy()
            ok = tl & (c["end_ns"] >= c["start_ns"]).to_numpy()
            yield pd.DataFrame({
                "phase": c["phase"].to_numpy()[ok], "start_ns": c["start_ns"].to_numpy()[ok],
                "end_ns": c["end_ns"].to_numpy()[ok], "step": c["step"].to_numpy()[ok],
                "line_no": c["line_no"].array[ok],
                "__file": files[ok],
                "__row": self.n - len(c) + np.flatnonzero(ok)})

    def _rows(self, c: pd.DataFrame) -> np.ndarray:
        """The checks of a chunk's rows alone, and what the rest carries; each row's file as
        its index in `files` (the files in the order their rows come)."""
        codes, names = pd.factorize(c["file_name"])
        for f in map(str, names):
            if f not in self.files:
                self.files.append(f)
        index = np.array([self.files.index(str(f)) for f in names], np.int64)
        hosts, ranks = c["host"].unique(), c["rank"].unique()
        key = (str(hosts[0]), int(ranks[0]))
        if len(hosts) > 1 or len(ranks) > 1 or self.key not in (None, key):
            raise SeveralRanks("several (host, rank)s")
        self.key = key
        ctx, out = self.ctx, self.out
        if out.first_file is None:
            out.first_file = str(c["file_name"].iloc[0])
        self.rows.add(row_findings(c, ctx.now_ns, ctx.max_rows), clock_part)
        self.rows.add(step_findings(c, ctx.max_rows))
        if ctx.span is not None and len(ctx.span):
            self.spans.add(span_findings(ctx.span, c, ctx.meta, ctx.max_rows))
            out.hosts |= set(span_host_keys(ctx.span, c))
        out.steps = lowest_rank_steps(out.steps, rank0_steps(c))
        out.phases |= set(c["phase"].unique())
        out.tally.compiled |= bool((c["phase"] == COMPILE).any())
        lo = int(c["rank"].min())
        out.tally.min_rank = lo if out.tally.min_rank is None else min(lo, out.tally.min_rank)
        step = (c["phase"] == STEP).to_numpy()
        self.steps.add(c[step], self.n)
        self._late(c)
        self.n += len(c)
        rows: np.ndarray = index[codes]
        return rows

    def _late(self, c: pd.DataFrame) -> None:
        """The concurrent rows that may end after the rank's last timeline phase: those ending
        after the last timeline end seen so far (the final one is at least that)."""
        conc = c["phase"].isin(CONCURRENT_PHASES).to_numpy()
        if (~conc).any():
            top = int(c["end_ns"].to_numpy()[~conc].max())
            self.last = top if self.last is None else max(self.last, top)
        held = pd.concat([self.late, c[conc]]) if conc.any() and len(self.late) else (
            c[conc] if conc.any() else self.late)
        if self.last is not None and len(held):
            held = held[(held["end_ns"] > self.last).to_numpy()]
        self.late = held

    def outcome(self, children: _Children | None) -> EventsOutcome:
        """The group's outcome once every chunk and window has passed."""
        out, ctx = self.out, self.ctx
        if self.key is None:
            raise NeedsWhole("no rows")
        host, rank = self.key
        files = {f: i for i, f in enumerate(self.files)}
        out.events = self.rows.findings(lambda k: (files[k[1]], *row_code_order(k)))
        if self.last is not None and len(self.late):
            late = self.late[(self.late["end_ns"] > self.last).to_numpy()]
            out.events += late_findings(late.astype({"file_name": str}), ctx.max_rows)
        out.span = self.spans.findings(lambda k: (files[k[1]], *row_code_order(k)))
        if self.steps.n:
            out.tally.steps[(host, rank)] = self.steps.n
            n, items, ns = self.steps.post()
            out.tally.post[rank] = (n, items, ns)
        have, first = {self.key: out.phases}, {self.key: out.first_file}
        out.kinds = {k: missing_phases(k, ctx.meta, have, first)
                     + (children.findings(k, self.files) if children else []) for k in ctx.kinds}
        return out


def check_stream(chunks: Iterable[pd.DataFrame], ctx: EventsContext, where: str = "events"
                 ) -> tuple[tuple[str, int], EventsOutcome]:
    """Every events check of one (host, rank)'s rows, given as prepared chunks in file order
    (`events_run`: numbers as int64, `file_name`), as `events_run` checks the group whole;
    raises `NeedsWhole` where it cannot (module docstring). Returns the (host, rank) too."""
    seen = _Pass(ctx)
    children: _Children | None = None
    try:
        for w in tree_windows(start_ordered(seen.watch(chunks), None, **SORT), WINDOW, where):
            if children is None and seen.key is not None and ctx.kinds:
                children = _Children(ctx.kinds, ctx.max_rows, seen.key[1])
            if children is not None:
                children.window(w)
    except ContractError as exc:  # an overlap in a window (`phase_tree`)
        raise NeedsWhole(str(exc)) from exc
    out = seen.outcome(children)
    assert seen.key is not None
    return seen.key, out
