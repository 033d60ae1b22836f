"""What `wattlife check` reports (`Finding`: severity, code, file, line, message), the capping of
repeated findings, and the epoch-ns clock checks every timestamped file shares."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pandas as pd

ERROR, WARNING = "error", "warning"
INFO = "info"  # what a run was (e.g. its Slurm step): said, never counted as a problem
#: 2000-01-01T00:00:00Z in epoch ns: anything earlier is not an epoch-ns timestamp of a run
MIN_EPOCH_NS = 946_684_800 * 10**9
#: how far past the checking machine's clock a timestamp may lie (clock skew between machines)
FUTURE_SLACK_NS = 3600 * 10**9


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a run: `line` is the CSV line (header = 1), None for a whole file."""

    severity: str
    code: str
    file: str
    line: int | None
    message: str

    def text(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{self.severity}: {where}: {self.message} [{self.code}]"


def capped(severity: str, code: str, file: str, lines: Iterable[Any], messages: Iterable[str],
            max_rows: int) -> list[Finding]:
    """One finding per offending row up to `max_rows`, then one saying how many more there are.
    A line None or missing (a Parquet table's rows): the whole file."""
    lines, messages = list(lines), list(messages)
    out = [Finding(severity, code, file, None if ln is None or ln is pd.NA else int(ln), msg)
           for ln, msg in zip(lines[:max_rows], messages[:max_rows], strict=True)]
    if len(lines) > max_rows:
        out.append(Finding(severity, code, file, None,
                           f"... and {len(lines) - max_rows:,} more row(s) like the above"))
    return out


_MORE = re.compile(r"^\.\.\. and ([\d,]+) more row\(s\) like the above$")
_COLUMN = re.compile(r"^column '([^']+)'")
#: codes reported once per kind (the message names it, the line is its first row): sorted by
#: message (source-unknown: by source name) or by line (device-name: first appearance)
ONCE_BY = {"trace.source-unknown": "message", "trace.device-name": "line"}


def merge_capped(findings: Iterable[Finding], max_rows: int, order: Iterable[str] = (),
                 columns: Iterable[str] = ()) -> list[Finding]:
    """Findings of the chunks of one file, in file order, merged as one pass over the whole
    file gives them: per code (in `order`, then as first seen; one code's findings on several
    columns, "column 'c' ...", in the order of `columns`) the first `max_rows` rows and one
    finding counting the rest (`capped`); the `ONCE_BY` codes once per message."""
    by: dict[tuple[str, str], list[Finding]] = {}
    group = ("", "")
    for x in findings:  # a `capped` count follows its rows: it joins their group
        if not _MORE.match(x.message) or x.code != group[0]:
            col = _COLUMN.match(x.message)
            group = (x.code, col.group(1) if col else "")
        by.setdefault(group, []).append(x)
    order, cols = list(order), list(columns)
    out: list[Finding] = []
    keys = sorted(by, key=lambda k: (order.index(k[0]) if k[0] in order else len(order),
                                     cols.index(k[1]) if k[1] in cols else len(cols)))
    for key in keys:
        code = key[0]
        if code in ONCE_BY:
            first: dict[str, Finding] = {}
            for x in by[key]:
                first.setdefault(x.message, x)
            how = ONCE_BY[code]
            out += sorted(first.values(), key=lambda x: (x.message if how == "message"
                                                         else x.line or 0))
            continue
        rows = [x for x in by[key] if not _MORE.match(x.message)]
        more = sum(int(m.group(1).replace(",", "")) for x in by[key]
                   if (m := _MORE.match(x.message)))
        out += rows[:max_rows]
        extra = len(rows) - max_rows + more
        if extra > 0:
            out.append(Finding(by[key][0].severity, code, by[key][0].file, None,
                               f"... and {extra:,} more row(s) like the above"))
    return out


def _line_order(x: Finding) -> tuple[bool, int]:
    """A row finding's place in its file: by line, a row without one (Parquet) after."""
    return x.line is None, x.line or 0


class CappedTally:
    """Capped findings of a file's chunks (`capped` lists) gathered as `capped` of all the rows
    gives them, per (code, file, part): the first `max_rows` rows by line and a count of the
    rest. Chunks in file order, or several ranks' findings of one file (`check.events_parts`),
    whose rows interleave: the rows are kept sorted by line. `part` tells one check's findings
    apart within a file (the clock's column); `findings` gives the groups in the order a key
    function sorts them."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._by: dict[tuple[str, str, str], tuple[list[Finding], int]] = {}

    def add(self, found: Iterable[Finding], part: Callable[[Finding], str] | None = None
            ) -> None:
        """One chunk's findings; `part(finding)`: its part (none by default)."""
        key: tuple[str, str, str] | None = None
        for x in found:
            more = _MORE.match(x.message)
            if more and key is not None and key[:2] == (x.code, x.file):
                rows, n = self._by[key]
                self._by[key] = (rows, n + int(more.group(1).replace(",", "")))
                continue
            key = (x.code, x.file, part(x) if part is not None else "")
            rows, n = self._by.get(key, ([], 0))
            rows.append(x)
            if len(rows) > 1 and _line_order(rows[-2]) > _line_order(x):
                rows.sort(key=_line_order)  # stable: rows without a line keep their order
            del rows[self.max_rows:]
            self._by[key] = (rows, n + 1)

    def findings(self, order: Callable[[tuple[str, str, str]], Any]) -> list[Finding]:
        """Every group's rows and count (`capped`), groups sorted by `order((code, file, part))`."""
        out: list[Finding] = []
        for key in sorted(self._by, key=order):
            rows, n = self._by[key]
            out += rows
            if n > self.max_rows:
                out.append(Finding(rows[0].severity, key[0], key[1], None,
                                   f"... and {n - self.max_rows:,} more row(s) like the above"))
        return out


def unit_guess(v: float) -> str:
    for unit, scale in (("seconds", 1e9), ("milliseconds", 1e6), ("microseconds", 1e3)):
        if MIN_EPOCH_NS / scale <= v <= 4.2e18 / scale:
            return f"; looks like epoch {unit} (the contract is epoch nanoseconds)"
    return ""


def check_clock(t: pd.Series, lines: pd.Series, col: str, file: str, now_ns: int,
                max_rows: int = 5) -> list[Finding]:
    """Epoch-ns sanity: not before 2000 (seconds/ms/µs misread as ns) and not in the future."""
    v = pd.to_numeric(t, errors="coerce")
    findings: list[Finding] = []
    early = (v < MIN_EPOCH_NS).to_numpy()
    if early.any():
        findings += capped(ERROR, "clock.before-2000", file, lines[early],
                            [f"{col}={int(x)} is before 2000-01-01{unit_guess(float(x))}"
                             for x in v[early].head(max_rows)], max_rows)
    late = (v > now_ns + FUTURE_SLACK_NS).to_numpy()
    if late.any():
        findings += capped(ERROR, "clock.future", file, lines[late],
                            [f"{col}={int(x)} is {(x - now_ns) / 3.6e12:.1f} h in the future"
                             for x in v[late].head(max_rows)], max_rows)
    return findings
