"""Training speed of committed runs as one table, rebuilt from their events, each throughput
with its basis, clock and MFU on two attention conventions.

Basis `step`: items over the sum of the post-warm-up `step` rows' durations (the first
`contracts.warmup_count(n)` steps of rank 0 left out; evaluation and checkpoint pauses lie
between steps), times the world size. The `step` rows are GPU-timed where the events say
`clock=cuda`; `clock` names it. The workloads' summary `throughput` is the same sum over the same
rows, so the two agree (a summary written before it was, on the host's clock, does not: it is not
used here). Basis `wall`: all steps' items over the training loop's wall time in the events, from
the first step's start to the start of `finalize` (else the last step, evaluation or checkpoint's
end): compilation, warm-up and pauses included. A run whose events hold no `step` rows gives no
row. MFU = throughput x FLOPs per token / (peak x world) with the summary's
`flops_per_token` and `peak_flops_per_gpu` (attention counted in full), and `mfu_causal` with
attention halved for causal masking (the summary's `attention_flops_per_token`, else the value
passed in).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..attribution.warmup import step_rows
from ..contracts import PAUSE_PHASES, STEP

PERFORMANCE_COLUMNS = ["run", "model", "task", "compile", "experts_impl", "throughput",
                       "throughput_unit", "basis", "clock", "mfu", "mfu_causal"]
_LOOP_END = (STEP, *PAUSE_PHASES)


def _rank0(events: pd.DataFrame) -> pd.DataFrame:
    return events[events["rank"] == events["rank"].min()] if "rank" in events else events


def step_throughput_from_events(events: pd.DataFrame, world: int = 1) -> float | None:
    """Basis `step` from the events (module docstring): rank 0's post-warm-up steps' items over the
    sum of their durations, times `world`."""
    s = step_rows(_rank0(events))
    s = s[~s["warmup"]]
    dt = (s["end_ns"] - s["start_ns"]).sum() / 1e9
    return float(s["items"].sum() / dt * world) if len(s) and dt > 0 else None


def wall_throughput_from_events(events: pd.DataFrame, world: int = 1) -> float | None:
    """Basis `wall` from the events (module docstring)."""
    ev = _rank0(events)
    steps = ev[ev["phase"] == "step"]
    if steps.empty:
        return None
    t0 = int(steps["start_ns"].min())
    fin = ev[(ev["phase"] == "finalize") & (ev["start_ns"] >= t0)]
    loop = ev[ev["phase"].isin(_LOOP_END) & (ev["start_ns"] >= t0)]
    t1 = int(fin["start_ns"].min()) if len(fin) else int(loop["end_ns"].max())
    dt = (t1 - t0) / 1e9
    return float(steps["items"].sum() / dt * world) if dt > 0 else None


def step_clock(events: pd.DataFrame) -> str:
    """The clock of rank 0's `step` rows (`cuda`, `host`; `host` when the events lack it)."""
    s = _rank0(events)
    s = s[s["phase"] == "step"]
    if "clock" not in s.columns or s["clock"].isna().all():
        return "host"
    return ",".join(sorted(set(s["clock"].dropna().astype(str))))


def performance_rows(run: str, model: str, summary: dict[str, Any], events: pd.DataFrame,
                     attention_flops: float | None = None) -> list[dict[str, Any]]:
    """One row per basis that the events give (`step`, `wall`; module docstring)."""
    world = int(summary.get("world_size") or 1)
    base = {"run": run, "model": model, "task": summary.get("task", "train"),
            "compile": bool(summary.get("compile", False)),
            "experts_impl": summary.get("experts_impl")
            or ("unrecorded" if summary.get("experts") else "none"),
            "throughput_unit": str(summary.get("throughput_unit", "")).split(" (")[0],
            "clock": step_clock(events)}
    fpt, peak = summary.get("flops_per_token"), summary.get("peak_flops_per_gpu")
    attn = summary.get("attention_flops_per_token", attention_flops)
    rows = []
    for basis, thr in (("step", step_throughput_from_events(events, world)),
                       ("wall", wall_throughput_from_events(events, world))):
        if thr is None:
            continue
        mfu = thr * fpt / (peak * world) if fpt and peak else None
        causal = thr * (fpt - attn / 2) / (peak * world) if fpt and peak and attn else None
        rows.append({**base, "throughput": thr, "basis": basis, "mfu": mfu, "mfu_causal": causal})
    return rows


def step_world(events: pd.DataFrame) -> int:
    """How many (host, rank) pairs marked `step` rows: the world the events' items are over."""
    s = events[events["phase"] == "step"]
    keys = [k for k in ("host", "rank") if k in s.columns]
    return max(1, len(s.drop_duplicates(keys))) if keys and len(s) else 1


def items_from_events(events: pd.DataFrame, post_warmup: bool) -> float | None:
    """Items trained, all ranks, from the `step` rows' `items` (`markers.step(items=...)`): the
    post-warm-up steps only when `post_warmup` (a phase table with `warmup` rows: its per-step
    phases cover only those), else every step. None when the events mark no step with items."""
    s = step_rows(events)
    if s.empty or s["items"].isna().all():
        return None
    if post_warmup:
        s = s[~s["warmup"]]
    return float(s["items"].sum())


def performance_table(runs: list[tuple[Any, ...]]) -> pd.DataFrame:
    """(run, model, summary, events[, attention_flops]) tuples -> the performance table
    (PERFORMANCE_COLUMNS)."""
    rows = [r for run in runs for r in performance_rows(*run)]
    return pd.DataFrame(rows, columns=PERFORMANCE_COLUMNS)
