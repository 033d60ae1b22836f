"""Warm-up: which of a run's steps are warm-up (the rest are its post-warm-up steps), which calls
compiled, and the events as the phase tables read them (compile and warm-up as their own names,
forward/backward over the post-warm-up steps only).

Rules (docs/CONTRACTS.md, "Compilation and warm-up"):
- warm-up: the first `warmup_count(n)` `step` rows of each (host, rank) by start time (3 when
  the rank has more than 5 steps), the same steps the `step` throughput leaves out;
- compile: rows named `compile` (the workloads mark the first forward and backward of a
  `torch.compile`d model so, nested inside them); a compiled run recorded before that marker
  existed has its first `forward` and first `backward` of each rank read as `compile` (a child
  with the same bounds: the first call of a compiled module is the compiling call). Recompiles
  later in a run (a new shape, a guard failure) are not visible in the events and stay inside
  their forward/backward;
- `label_warmup`: every row inside a warm-up step (the step itself included) is renamed
  `warmup`, except `compile` rows and the concurrent phases (a background checkpoint write keeps
  its name: `tree.timeline` leaves it out, its time stays with the phases it overlaps; renamed,
  it joined the timeline and overlapped the step's phases, an error). The raw events files are
  never rewritten: attribution applies this when it reads them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contracts import BACKWARD, COMPILE, CONCURRENT_PHASES, FORWARD, STEP, WARMUP, warmup_count
from .tree import OVERLAP_TOL_NS

_KEYS = ["host", "rank"]


def step_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The `step` rows, sorted by (host, rank, start), with a boolean column `warmup`."""
    keys = [k for k in _KEYS if k in events.columns]
    s = events[events["phase"] == STEP].sort_values(keys + ["start_ns"]).copy()
    by = s.groupby(keys) if keys else s.groupby(lambda _: 0)
    order = by.cumcount()
    n = by["start_ns"].transform("size")
    s["warmup"] = order < n.map(warmup_count)
    return s


def post_warmup_steps(events: pd.DataFrame) -> pd.DataFrame:
    """The steps after warm-up (rows of `step_rows` with `warmup` False)."""
    s = step_rows(events)
    return s[~s["warmup"]]


def with_compile_rows(events: pd.DataFrame, compiled: bool) -> pd.DataFrame:
    """`events` plus, for a compiled run whose events hold no `compile` row, a `compile` child
    of the first `forward` and the first `backward` of each (host, rank) (see the module rule;
    of two at the same start, the one the file lists first, as `prepare_windows` takes it)."""
    if not compiled or (events["phase"] == COMPILE).any():
        return events
    first = (events[events["phase"].isin([FORWARD, BACKWARD])]  # ties: the file's first
             .sort_values("start_ns", kind="stable")
             .groupby(_KEYS + ["phase"], sort=False).head(1).copy())
    if first.empty:
        return events
    return pd.concat([events, compile_copies(first)], ignore_index=True)


def compile_copies(first: pd.DataFrame) -> pd.DataFrame:
    """The `compile` rows of a compiled run that marks none: each first `forward` and
    `backward` of a rank copied, renamed `compile`, one level deeper (its child)."""
    out = first.assign(phase=COMPILE)
    if "depth" in out.columns:
        out["depth"] = out["depth"] + 1
    return out


def label_warmup(events: pd.DataFrame, compiled: bool = False) -> pd.DataFrame:
    """The events as the phase tables read them (module docstring): compile rows added where a
    compiled run lacks them, every row of a warm-up step renamed `warmup` (`in_warmup_steps`)."""
    ev = with_compile_rows(events, compiled)
    warm = step_rows(ev)
    warm = warm[warm["warmup"]]
    if warm.empty:
        return ev
    ev = ev.copy()
    inside = np.zeros(len(ev), dtype=bool)
    for (host, rank), w in warm.groupby(_KEYS):
        own = ((ev["host"] == host) & (ev["rank"] == rank)).to_numpy()
        inside[own] = in_warmup_steps(ev[own], w[["start_ns", "end_ns"]].to_numpy())
    ev.loc[inside, "phase"] = WARMUP
    return ev


def in_warmup_steps(rows: pd.DataFrame, warm: np.ndarray) -> np.ndarray:
    """Which of one rank's rows `label_warmup` renames: those inside one of the warm-up steps
    `warm` ((start, end) rows) within `tree.OVERLAP_TOL_NS`, but `compile` rows and the
    concurrent phases (module docstring)."""
    s0, e0 = rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()
    inside = np.zeros(len(rows), dtype=bool)
    for a, b in warm:
        inside |= (s0 >= a - OVERLAP_TOL_NS) & (e0 <= b + OVERLAP_TOL_NS)
    inside &= ~rows["phase"].isin([COMPILE, *CONCURRENT_PHASES]).to_numpy()
    return inside
