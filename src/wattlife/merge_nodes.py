"""Multi-node runs: one sampler per node writes its own trace; merge them into one run, each
node's timestamps aligned by the clock mapping it recorded (`node_clocks`), and check that the
nodes' clocks agree.

Clock check: data-parallel ranks leave each training step together (the gradient all-reduce
inside it is a barrier), so the end of step k on one node and on another differ only by their
clocks' offset plus a little all-reduce skew. Per host: offset = median over common steps of
(its step end - the reference host's step end), with the interquartile range as its spread.
An offset above `warn_ms` is reported (it shifts phase boundaries against the other node's
power readings)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from .contracts import (
    TRACE_COLUMNS,
    TRACE_HEADER,
    ZSTD_SUFFIX,
    StreamUnreadable,
    atomic_path,
    events_files,
    iter_trace,
    read_events,
    read_trace,
    write_csv,
)
from .contracts.compact import as_categories, concat_compact
from .contracts.zstd_frames import FrameWriter
from .errors import ContractError
from .node_clocks import alignment, checked, node_metas, read_node_clock, shift_hosts


def clock_offsets(events: pd.DataFrame, warn_ms: float = 5.0) -> pd.DataFrame:
    """host, offset_ms vs the first host (sorted by name), iqr_ms, steps compared, warn."""
    st = events[events["phase"] == "step"]
    if st.empty or st["host"].nunique() < 2:
        return pd.DataFrame(columns=["host", "offset_ms", "iqr_ms", "steps", "warn"])
    # each host's step end: the earliest rank's (ranks of one node share its clock)
    ends = st.groupby(["host", "step"])["end_ns"].min().unstack("host")
    hosts = sorted(ends.columns)
    ref = ends[hosts[0]]
    rows = []
    for h in hosts:
        d = (ends[h] - ref).dropna().to_numpy(np.float64) / 1e6
        q1, med, q3 = np.percentile(d, [25, 50, 75]) if len(d) else (np.nan,) * 3
        rows.append({"host": h, "offset_ms": med, "iqr_ms": q3 - q1, "steps": len(d),
                     "warn": bool(abs(med) > warn_ms) if len(d) else True})
    out = pd.DataFrame(rows)
    bad = out[out["warn"]]
    if len(bad):
        warnings.warn("node clocks disagree: " + ", ".join(
            f"{r.host} {r.offset_ms:+.1f} ms (over {r.steps} steps)" for r in bad.itertuples())
            + f" vs {hosts[0]} (threshold {warn_ms} ms): synchronise them (chrony/PTP) or read "
            "cross-node phase energies with that uncertainty", stacklevel=2)
    return out


def _copy_traces(traces: list[str | Path], out_trace: str | Path,
                 shifts: dict[str, int] | None = None) -> None:
    """The node traces written one after the other into `out_trace` (CSV, or zstd frames for a
    `.zst` name), read and written in chunks (`contracts.iter_trace`), each host's `t_ns` moved
    by its shift (`node_clocks`), atomically: nothing is written when two of them name one
    host. Raises StreamUnreadable as `iter_trace` does."""
    hosts: list[list[str]] = []
    with atomic_path(out_trace) as tmp, open(tmp, "wb") as fh:
        frames = FrameWriter(fh) if Path(out_trace).suffix == ZSTD_SUFFIX else None
        if frames is None:
            fh.write(TRACE_HEADER.encode())
        else:
            frames.write(TRACE_HEADER)
        for t in traces:
            seen: dict[str, None] = {}
            for df in iter_trace(t):
                _write_rows(shift_hosts(df, shifts or {}, ["t_ns"]), fh, frames, seen)
            hosts.append(list(seen))
        if frames is not None:
            frames.flush()
        _refuse_shared_hosts(hosts, len(traces))


def _write_rows(df: pd.DataFrame, fh: IO[bytes], frames: FrameWriter | None,
                seen: dict[str, None]) -> None:
    """One chunk's rows as CSV (the contract's columns), its hosts noted in `seen`."""
    for h in df["host"].unique():
        seen.setdefault(str(h), None)
    text = df[TRACE_COLUMNS].to_csv(index=False, header=False, lineterminator="\n")
    if frames is None:
        fh.write(text.encode())
    else:
        frames.write(text)
        frames.flush()


def merge_node_runs(traces: list[str | Path], events: list[str | Path], out_trace: str | Path,
                    out_events: str | Path, warn_ms: float = 5.0,
                    metas: list[str | Path] | None = None) -> pd.DataFrame:
    """Concatenate per-node traces and events (each row keeps its host) into one run, each
    node's timestamps aligned by its recorded clock mapping (`node_clocks`; `metas`: each
    node's meta.json, else the one beside its trace); returns the clock table, also written
    beside the merged trace as `clock_offsets.csv`. The traces are copied in chunks, node after
    node (each node's rows in its file's order: attribution and the checks take each device's
    series in time order whatever the interleaving), in bounded memory; the events are read
    one file at a time, held with their text as categories (`_read_events_compact`),
    and sorted by (start, host, rank)."""
    ev = _read_events_compact(events)
    align = _alignment(ev, traces, metas)
    shifts = dict(zip(align["host"], align["shift_ns"].astype(int), strict=True))
    try:
        _copy_traces(traces, out_trace, shifts)
    except StreamUnreadable:
        node_traces = [shift_hosts(read_trace(t), shifts, ["t_ns"]) for t in traces]
        _refuse_shared_hosts([t["host"].unique().tolist() for t in node_traces], len(traces))
        write_csv(pd.concat(node_traces, ignore_index=True), out_trace)
    ev = shift_hosts(ev, shifts, ["start_ns", "end_ns"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        after = clock_offsets(ev, warn_ms)
    check = checked(align, after, warn_ms) if len(after) else after
    write_csv(ev.sort_values(["start_ns", "host", "rank"], kind="stable"), out_events)
    write_csv(check, Path(out_trace).with_name("clock_offsets.csv"))
    return check


def _alignment(ev: pd.DataFrame, traces: list[str | Path], metas: list[str | Path] | None
               ) -> pd.DataFrame:
    """Each host's shift onto the reference's clock by the nodes' recorded mappings
    (`node_clocks.alignment`; none where a node recorded none)."""
    clocks = [c for m in node_metas(traces, metas) if m is not None
              for c in [read_node_clock(m)] if c is not None]
    return alignment(ev, clocks)


def _read_events_compact(events: list[str | Path]) -> pd.DataFrame:
    """Every node's events file and its rank siblings (`read_events`), one file at a time, each
    held with its text columns as categories (`contracts.compact`): the rows `pd.concat` of
    `read_events` gives, in the same order, written as the same text, without a string a
    cell (a day of 8 ranks: ~11 M rows)."""
    frames = []
    for e in events:
        files = [p for p in events_files(e) if p.exists()]
        if not files:
            raise FileNotFoundError(f"{e}: no such file")
        frames += [as_categories(read_events(p, siblings=False)) for p in files]
    return concat_compact(frames)


def _refuse_shared_hosts(hosts_per_file: list[list[str]], n_traces: int) -> None:
    """Two node traces naming one host: an error."""
    if len({h for hs in hosts_per_file for h in hs}) < n_traces:
        raise ContractError(f"two node traces share a host name ({hosts_per_file}): each node's "
                         "sampler must write its own host")
