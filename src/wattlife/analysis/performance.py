"""Training speed of committed runs as one table, each throughput with its basis.

Basis `step`: items over the training steps' own time (the first 3 steps, evaluation and
checkpoint pauses left out; the workloads' headline `throughput`). Basis `wall`: items over the
training loop's wall time, pauses and warm-up (with any compilation) included
(`throughput_wall`). Summaries written before the workloads excluded pauses from the step clock
(no `throughput_basis`, no `throughput_window`) hold a `throughput` with the pauses inside: it is
reported as `wall`, and the `step` figure is recomputed from the run's `step` events.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

PERFORMANCE_COLUMNS = ["run", "model", "task", "compile", "experts_impl", "throughput",
                       "throughput_unit", "basis", "mfu"]


def step_throughput_from_events(events: pd.DataFrame, warmup: int = 3) -> float | None:
    """Items over the `step` phases' own time, after `warmup` steps (rank 0's events; the
    workloads' `step` basis)."""
    s = events[events["phase"] == "step"]
    if "rank" in s:
        s = s[s["rank"] == s["rank"].min()]
    s = s.sort_values("start_ns").iloc[warmup:]
    dt = (s["end_ns"] - s["start_ns"]).sum() / 1e9
    return float(s["items"].sum() / dt) if len(s) and dt > 0 else None


def performance_rows(run: str, model: str, summary: dict[str, Any],
                     events: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """One row per basis: `step` and, where recorded, `wall` (see the module docstring)."""
    base = {"run": run, "model": model, "task": summary.get("task", "train"),
            "compile": bool(summary.get("compile", False)),
            "experts_impl": summary.get("experts_impl")
            or ("unrecorded" if summary.get("experts") else "none"),
            "throughput_unit": str(summary.get("throughput_unit", "")).split(" (")[0]}
    thr, mfu = summary.get("throughput"), summary.get("mfu")
    if "throughput_basis" not in summary and "throughput_window" not in summary:
        rows = [{**base, "throughput": thr, "basis": "wall", "mfu": mfu}]  # pauses inside
        step = step_throughput_from_events(events) if events is not None else None
        if step:
            rows.insert(0, {**base, "throughput": step, "basis": "step",
                            "mfu": mfu * step / thr if mfu and thr else None})
        return rows
    rows = [{**base, "throughput": thr, "basis": summary.get("throughput_basis", "step"),
             "mfu": mfu}]
    wall = summary.get("throughput_wall", summary.get("throughput_window"))
    if wall is not None:
        mfu_wall = summary.get("mfu_wall")
        if mfu_wall is None and mfu and thr:  # the same FLOPs per item over the wall time
            mfu_wall = mfu * wall / thr
        rows.append({**base, "throughput": wall, "basis": "wall", "mfu": mfu_wall})
    return rows


def performance_table(runs: list[tuple]) -> pd.DataFrame:
    """(run, model, summary[, events]) tuples -> the performance table (PERFORMANCE_COLUMNS)."""
    rows = [r for run in runs for r in performance_rows(*run)]
    return pd.DataFrame(rows, columns=PERFORMANCE_COLUMNS)
