"""`wattlife check`'s findings on compilation, warm-up and the `step` throughput (issue 26): the
rules of `attribution.warmup` and `analysis.performance` applied to one run's events and summary.

- `steps.no-steady` (warning): a rank has at most `WARMUP_STEPS` + 2 steps: none is left out
  as warm-up, so its `step` throughput and post-warm-up steps include warm-up (and any compilation);
- `events.compile-unmarked` (warning): the summary says `compile: true` but the events hold no
  `compile` row (recorded before the marker): attribution reads each rank's first forward and
  backward as `compile`;
- `summary.step-throughput` (warning): a summary that times its `step` basis on the events
  (`step_clock`) differs from the recomputation from the events by more than 0.1 %.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..analysis.performance import step_throughput_from_events
from ..contracts import COMPILE, STEP, WARMUP_STEPS, warmup_count

WARNING = "warning"
#: how far a summary's `step` throughput may be from the events' recomputation
STEP_THROUGHPUT_RTOL = 1e-3


def warmup_findings(ev: pd.DataFrame, summary: dict[str, Any] | None, events_file: str,
                    summary_file: str) -> list[tuple[str, str, str, str]]:
    """(severity, code, file, message) of each finding (module docstring)."""
    out = []
    steps = ev[ev["phase"] == STEP]
    for (host, rank), g in steps.groupby(["host", "rank"]):
        if warmup_count(len(g)) == 0:
            out.append((WARNING, "steps.no-steady", events_file,
                        f"host {host}, rank {rank}: {len(g)} steps, at most {WARMUP_STEPS + 2}: "
                        "none is left out as warm-up, so the step throughput and the steady "
                        "window include warm-up"))
    if not summary:
        return out
    if summary.get("compile") and not (ev["phase"] == COMPILE).any():
        out.append((WARNING, "events.compile-unmarked", events_file,
                     "the summary says compile: true but no `compile` phase is marked: "
                     "attribution reads each rank's first forward and backward as `compile`"))
    thr = summary.get("throughput")
    if "step_clock" in summary and isinstance(thr, (int, float)) and len(steps):
        got = step_throughput_from_events(ev, int(summary.get("world_size") or 1))
        if got and abs(thr / got - 1) > STEP_THROUGHPUT_RTOL:
            out.append((WARNING, "summary.step-throughput", summary_file,
                        f"throughput {thr:.6g} differs from the events' steady steps "
                        f"({got:.6g}) by {abs(thr / got - 1):.2%}"))
    return out
