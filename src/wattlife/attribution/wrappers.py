"""The intervals `wattlife run` itself knows of a rank, added to its marked phases (the idle
baseline, the command's start-up and exit): from meta.json and the rank's first start and last
end, so the whole frame (`prepared_frame`) and the windows (`prepare_windows`) add the same
rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contracts import IDLE_BASELINE, PROCESS_EXIT, PROCESS_STARTUP, RunMeta
from .warmup import label_warmup


def wrapper_events(events: pd.DataFrame, meta: RunMeta) -> pd.DataFrame:
    """Intervals `wattlife run` itself knows, per (host, rank): the idle baseline before the
    command, the command's start-up until its first marked phase (interpreter, imports, CUDA
    context) and its exit after its last one. Without them that time is `unattributed`. An
    unmarked command (no events) gets the idle baseline alone, on rank 0 of meta.json's host.
    Bounds in int64 ns, as the events'."""
    rows = []
    ib = meta.idle_baseline or {}
    w0, w1 = meta.workload_start_ns, meta.workload_end_ns
    has_baseline = bool(ib) and ib.get("end_ns", 0) > ib.get("start_ns", 0)
    if not len(events):  # an unmarked command: only the idle baseline is known (rank 0's host)
        if meta.host and has_baseline:
            rows.append({"run_id": meta.run_id, "host": meta.host, "rank": 0, "local_rank": 0,
                         "step": np.nan, "items": np.nan, "phase": IDLE_BASELINE,
                         "start_ns": ib["start_ns"], "end_ns": min(ib["end_ns"],
                                                                   w0 or ib["end_ns"])})
        return _ns(pd.DataFrame(rows))
    for (host, rank), g in events.groupby(["host", "rank"]):
        first, last = int(g["start_ns"].min()), int(g["end_ns"].max())
        base = {"run_id": g["run_id"].iloc[0], "host": host, "rank": rank, "step": np.nan,
                "items": np.nan}
        if "local_rank" in g.columns:
            base["local_rank"] = g["local_rank"].iloc[0]
        if has_baseline and ib["end_ns"] <= first:
            rows.append({**base, "phase": IDLE_BASELINE, "start_ns": ib["start_ns"],
                         "end_ns": min(ib["end_ns"], w0 or ib["end_ns"])})
        if w0 and w0 < first:
            rows.append({**base, "phase": PROCESS_STARTUP,
                         "start_ns": max(w0, ib.get("end_ns", w0)), "end_ns": first})
        if w1 and w1 > last:
            rows.append({**base, "phase": PROCESS_EXIT, "start_ns": last, "end_ns": w1})
    return _ns(pd.DataFrame(rows))


def _ns(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows' bounds as the events' int64 nanoseconds (none: as they are)."""
    return rows.astype({"start_ns": "int64", "end_ns": "int64"}) if len(rows) else rows


def prepared_frame(events_df: pd.DataFrame, meta: RunMeta, has_meta: bool, warmup_labels: bool,
                   compiled: bool) -> pd.DataFrame:
    """The events as attribution takes them: warm-up labels (`label_warmup`), plus the
    intervals `wattlife run` knows (`wrapper_events`) where there is a meta.json."""
    if warmup_labels and len(events_df):
        events_df = label_warmup(events_df, compiled=compiled)
    if has_meta:
        extra = wrapper_events(events_df, meta)
        if len(extra):
            events_df = pd.concat([events_df, extra], ignore_index=True)
    return events_df
