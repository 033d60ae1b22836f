"""Multi-node runs: one sampler per node writes its own trace; merge them into one run, each
node's timestamps aligned by the clock mapping it recorded (below), and check that the nodes'
clocks agree.

Clock check: data-parallel ranks leave each training step together (the gradient all-reduce
inside it is a barrier), so the end of step k on one node and on another differ only by their
clocks' offset plus a little all-reduce skew. Per host: offset = median over common steps of
(its step end - the reference host's step end), with the interquartile range as its spread.
An offset above `warn_ms` is reported (it shifts phase boundaries against the other node's
power readings).

Aligning the nodes by the clock mappings each recorded (issue 41): each node's timestamps are its
monotonic clock mapped to wall time once, at its start (`contracts.clock`: epoch = monotonic +
`offset_ns`, known to ± `uncertainty_ns`); meta.json's `clock` records the mapping and every
wall-clock step seen during the run (`wall_steps`). A step is taken for what time synchronisation
makes it, a correction of the node's wall clock (NTP, a resumed VM catching up): the mapping, made
before it, was off by it. So a node's timestamps are moved by the steps it saw (their sum) less
those the reference node saw (the first host by name, whose files, and the merged meta.json of
`launch-node --merge-meta`, stay as written): every node lands on the reference's mapped clock,
whatever each node's boot time (its monotonic clock's origin) and wall steps. The uncertainty of
that alignment is the two mappings' uncertainties plus `WALL_STEP_TOL_NS` for each step (a step is
seen to that).

A node without a recorded mapping (a run before issue 41, no meta.json beside its trace), or beside
a reference without one, is left as written (`aligned_by`: `as written`), its files byte for byte
those of the merge before issue 41. The step ends (`clock_offsets`: data-parallel ranks end each
step together) are the check on every node, never a shift: after alignment their median offset from
the reference should lie within `warn_ms` (all-reduce skew) plus the alignment's uncertainty; beyond
it, a warning names the node and how it wasaligned."""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass
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
    iter_trace,
    read_trace,
    write_csv,
)
from .contracts.clock import WALL_STEP_TOL_NS
from .contracts.compact import concat_compact
from .contracts.zstd_frames import FrameWriter
from .errors import ContractError, InputError
from .merge_events import events_paths, read_compact, spill_events, write_sorted


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
    by its shift (the clock alignment above), atomically: nothing is written when two of them
    name one host. Raises StreamUnreadable as `iter_trace` does."""
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
    node's timestamps aligned by its recorded clock mapping (`alignment`; `metas`: each
    node's meta.json, else the one beside its trace); returns the clock table, also written
    beside the merged trace as `clock_offsets.csv`. The traces are copied in chunks, node after
    node (each node's rows in its file's order: attribution and the checks take each device's
    series in time order whatever the interleaving), in bounded memory; the events are read in
    chunks and spilled, then sorted by (start, host, rank) by an external sort as they are
    written (`merge_events`): memory of a chunk and a sorted run, not of a file or the run."""
    with tempfile.TemporaryDirectory(prefix="wattlife-merge-") as tmp:
        spill = spill_events(events_paths(events), Path(tmp))
        align = _alignment(pd.DataFrame({"host": spill.hosts}), traces, metas)
        shifts = dict(zip(align["host"], align["shift_ns"].astype(int), strict=True))
        try:
            _copy_traces(traces, out_trace, shifts)
        except StreamUnreadable:
            node_traces = [shift_hosts(read_trace(t), shifts, ["t_ns"]) for t in traces]
            _refuse_shared_hosts([t["host"].unique().tolist() for t in node_traces],
                                 len(traces))
            write_csv(pd.concat(node_traces, ignore_index=True), out_trace)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            after = clock_offsets(shift_hosts(spill.steps, shifts, ["end_ns"]), warn_ms)
        check = checked(align, after, warn_ms) if len(after) else after
        write_sorted(spill, out_events,
                     lambda df: shift_hosts(df, shifts, ["start_ns", "end_ns"]))
    write_csv(check, Path(out_trace).with_name("clock_offsets.csv"))
    return check


def _alignment(ev: pd.DataFrame, traces: list[str | Path], metas: list[str | Path] | None
               ) -> pd.DataFrame:
    """Each host's shift onto the reference's clock by the nodes' recorded mappings
    (`alignment`; none where a node recorded none)."""
    clocks = [c for m in node_metas(traces, metas) if m is not None
              for c in [read_node_clock(m)] if c is not None]
    return alignment(ev, clocks)


def _read_events_compact(events: list[str | Path]) -> pd.DataFrame:
    """Every node's events file and its rank siblings (`read_events`), each held with its text
    columns as categories (`contracts.compact`), joined: the rows `pd.concat` of `read_events`
    gives, in the same order (the in-memory form the merged file is compared with)."""
    return concat_compact([read_compact(p) for p in events_paths(events)])


def _refuse_shared_hosts(hosts_per_file: list[list[str]], n_traces: int) -> None:
    """Two node traces naming one host: an error."""
    if len({h for hs in hosts_per_file for h in hs}) < n_traces:
        raise ContractError(f"two node traces share a host name ({hosts_per_file}): each node's "
                         "sampler must write its own host")


@dataclass(frozen=True)
class NodeClock:
    """One node's recorded mapping: its uncertainty and the wall steps it saw (sum, count)."""

    host: str
    uncertainty_ns: int
    steps_ns: int
    n_steps: int


def read_node_clock(meta: Path) -> NodeClock | None:
    """The mapping a node's meta.json records (`clock`), None where it has none (runs before
    issue 41). A meta.json that is not JSON, or whose `clock` is malformed, is an error naming
    the file."""
    try:
        doc = json.loads(meta.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{meta}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    clock = doc.get("clock")
    if not clock:
        return None
    try:
        steps = [int(s["step_ns"]) for s in clock.get("wall_steps", [])]
        return NodeClock(str(doc["host"]), int(clock["uncertainty_ns"]), sum(steps), len(steps))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{meta}: key clock: a mapping needs host, uncertainty_ns and "
                         f"wall_steps[].step_ns as integers ({type(exc).__name__}: {exc})"
                         ) from None


def node_metas(traces: list[str | Path], metas: list[str | Path] | None) -> list[Path | None]:
    """Each node's meta.json: the ones given, else the meta.json beside each trace if present."""
    if metas is not None:
        if len(metas) != len(traces):
            raise InputError(f"--metas: {len(metas)} file(s) for {len(traces)} trace(s): give "
                             "one meta.json per node, in the traces' order")
        return [Path(m) for m in metas]
    found = [Path(t).with_name("meta.json") for t in traces]
    return [m if m.exists() else None for m in found]


def alignment(events: pd.DataFrame, clocks: list[NodeClock]) -> pd.DataFrame:
    """Per host: `shift_ns` (added to its timestamps), `aligned_by` (reference, mapping, as
    written) and `uncertainty_ms` (NaN where not by mapping)."""
    hosts = sorted(events["host"].astype(str).unique())
    by_host = {c.host: c for c in clocks}
    ref = by_host.get(hosts[0]) if hosts else None
    rows: list[tuple[str, str, int, float]] = []
    for h in hosts:
        c = by_host.get(h)
        if h == hosts[0]:
            rows.append((h, "reference", 0, 0.0))
        elif c is not None and ref is not None:
            unc = (c.uncertainty_ns + ref.uncertainty_ns
                   + WALL_STEP_TOL_NS * (c.n_steps + ref.n_steps))
            rows.append((h, "mapping", c.steps_ns - ref.steps_ns, unc / 1e6))
        else:
            rows.append((h, "as written", 0, float("nan")))
    return pd.DataFrame(rows, columns=["host", "aligned_by", "shift_ns", "uncertainty_ms"])


def shift_hosts(df: pd.DataFrame, shifts: dict[str, int], columns: list[str]) -> pd.DataFrame:
    """`df` with each host's `columns` moved by its shift (ns; integers stay integers)."""
    if not any(shifts.values()):
        return df
    by = df["host"].astype(str).map(shifts).fillna(0).astype("int64")
    return df.assign(**{c: df[c] + by for c in columns})


def checked(align: pd.DataFrame, after: pd.DataFrame, warn_ms: float) -> pd.DataFrame:
    """The clock table (`clock_offsets.csv`): the alignment beside the step-end check after it
    (`offset_ms`, `iqr_ms`, `steps`); `warn` where the step ends still disagree by more than
    `warn_ms` plus the alignment's uncertainty, said in one warning."""
    out = align.merge(after.drop(columns=["warn"], errors="ignore"), on="host", how="left")
    out["shift_ms"] = out.pop("shift_ns") / 1e6
    allowed = warn_ms + out["uncertainty_ms"].fillna(0.0)
    out["warn"] = (out["offset_ms"].abs() > allowed).fillna(False).astype(bool)
    bad = out[out["warn"]]
    if len(bad):
        warnings.warn("node clocks disagree after alignment: " + ", ".join(
            f"{r.host} {r.offset_ms:+.1f} ms over {r.steps} steps (aligned by {r.aligned_by})"
            for r in bad.itertuples()) + f" vs {out['host'].iloc[0]} (allowed: {warn_ms} ms + "
            "the mappings' uncertainty): the nodes' wall clocks disagreed when each mapped its "
            "clock; synchronise them (chrony/PTP) or read cross-node phase energies with that "
            "uncertainty", stacklevel=3)
    return out[["host", "aligned_by", "shift_ms", "uncertainty_ms", "offset_ms", "iqr_ms",
                "steps", "warn"]]
