"""What `wattlife check` reports (`Finding`: severity, code, file, line, message), the capping of
repeated findings, and the epoch-ns clock checks every timestamped file shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import pandas as pd

ERROR, WARNING = "error", "warning"
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


def _capped(severity: str, code: str, file: str, lines: Iterable[Any], messages: Iterable[str],
            max_rows: int) -> list[Finding]:
    """One finding per offending row up to `max_rows`, then one saying how many more there are."""
    lines, messages = list(lines), list(messages)
    out = [Finding(severity, code, file, None if ln is None else int(ln), msg)
           for ln, msg in zip(lines[:max_rows], messages[:max_rows], strict=True)]
    if len(lines) > max_rows:
        out.append(Finding(severity, code, file, None,
                           f"... and {len(lines) - max_rows:,} more row(s) like the above"))
    return out


def _unit_guess(v: float) -> str:
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
        findings += _capped(ERROR, "clock.before-2000", file, lines[early],
                            [f"{col}={int(x)} is before 2000-01-01{_unit_guess(float(x))}"
                             for x in v[early].head(max_rows)], max_rows)
    late = (v > now_ns + FUTURE_SLACK_NS).to_numpy()
    if late.any():
        findings += _capped(ERROR, "clock.future", file, lines[late],
                            [f"{col}={int(x)} is {(x - now_ns) / 3.6e12:.1f} h in the future"
                             for x in v[late].head(max_rows)], max_rows)
    return findings
