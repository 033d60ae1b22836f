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

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..attribution.warmup import post_warmup_steps
from ..contracts import COMPILE, STEP, WARMUP_STEPS, warmup_count

WARNING = "warning"
#: how far a summary's `step` throughput may be from the events' recomputation
STEP_THROUGHPUT_RTOL = 1e-3


@dataclass
class WarmupTally:
    """What the warm-up findings need of a run's events, added up over groups of whole
    (host, rank)s (`check.events_run`): each one's step count, whether a `compile` row exists,
    and per rank the post-warm-up steps' count, items and nanoseconds (`step` throughput)."""

    steps: dict[tuple[str, int], int] = field(default_factory=dict)
    compiled: bool = False
    min_rank: int | None = None
    post: dict[int, tuple[int, float, int]] = field(default_factory=dict)

    def add(self, ev: pd.DataFrame) -> None:
        """The rows of some (host, rank)s, each (host, rank) whole in one call."""
        steps = ev[ev["phase"] == STEP]
        for key, n in steps.groupby(["host", "rank"]).size().items():
            self.steps[(str(key[0]), int(key[1]))] = int(n)
        self.compiled |= bool((ev["phase"] == COMPILE).any())
        if len(ev):
            lo = int(ev["rank"].min())
            self.min_rank = lo if self.min_rank is None else min(lo, self.min_rank)
        s = post_warmup_steps(steps)
        for rank, g in s.groupby("rank"):
            n0, items0, ns0 = self.post.get(int(rank), (0, 0.0, 0))
            self.post[int(rank)] = (n0 + len(g), items0 + float(g["items"].sum()),
                                    ns0 + int((g["end_ns"] - g["start_ns"]).sum()))

    def join(self, other: WarmupTally) -> None:
        """Add another group's tally (of other (host, rank)s)."""
        self.steps.update(other.steps)
        self.compiled |= other.compiled
        if other.min_rank is not None:
            self.min_rank = (other.min_rank if self.min_rank is None
                             else min(self.min_rank, other.min_rank))
        for rank, (n, items, ns) in other.post.items():
            n0, items0, ns0 = self.post.get(rank, (0, 0.0, 0))
            self.post[rank] = (n0 + n, items0 + items, ns0 + ns)

    def step_throughput(self, world: int) -> float | None:
        """`analysis.performance.step_throughput_from_events` of the rows added."""
        n, items, ns = self.post.get(-1 if self.min_rank is None else self.min_rank,
                                     (0, 0.0, 0))
        dt = ns / 1e9
        return float(items / dt * world) if n and dt > 0 else None


def warmup_findings(ev: pd.DataFrame, summary: dict[str, Any] | None, events_file: str,
                    summary_file: str) -> list[tuple[str, str, str, str]]:
    """(severity, code, file, message) of each finding (module docstring)."""
    tally = WarmupTally()
    tally.add(ev)
    return tally_findings(tally, summary, events_file, summary_file)


def tally_findings(tally: WarmupTally, summary: dict[str, Any] | None, events_file: str,
                   summary_file: str) -> list[tuple[str, str, str, str]]:
    """`warmup_findings` of the events a tally added up."""
    out = []
    for (host, rank), n in sorted(tally.steps.items()):
        if warmup_count(n) == 0:
            out.append((WARNING, "steps.no-steady", events_file,
                        f"host {host}, rank {rank}: {n} steps, at most {WARMUP_STEPS + 2}: "
                        "none is left out as warm-up, so the step throughput and the steady "
                        "window include warm-up"))
    if not summary:
        return out
    if summary.get("compile") and not tally.compiled:
        out.append((WARNING, "events.compile-unmarked", events_file,
                     "the summary says compile: true but no `compile` phase is marked: "
                     "attribution reads each rank's first forward and backward as `compile`"))
    thr = summary.get("throughput")
    if "step_clock" in summary and isinstance(thr, (int, float)) and tally.steps:
        got = tally.step_throughput(int(summary.get("world_size") or 1))
        if got and abs(thr / got - 1) > STEP_THROUGHPUT_RTOL:
            out.append((WARNING, "summary.step-throughput", summary_file,
                        f"throughput {thr:.6g} differs from the events' steady steps "
                        f"({got:.6g}) by {abs(thr / got - 1):.2%}"))
    return out
