"""The trace contract's checks (`trace.csv`): its rows, and the events lying inside its span."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..attribution import (
    DeviceSeries,
    device_series,
)
from ..contracts import device_forms, device_pattern, sensor_source_ids
from .findings import ERROR, WARNING, Finding, capped, check_clock
from .stalls import Stalls, gap_record, gap_record_findings

#: the trace checks' codes in the order `check_trace` reports them (chunks' findings merged in it)
TRACE_CODES = ("clock.before-2000", "clock.future", "trace.value", "trace.source-missing",
               "trace.source-unknown", "trace.device-name", "trace.no-energy",
               "clock.not-monotone", "trace.energy-falls")


def check_trace(tr: pd.DataFrame, file: str, now_ns: int, max_rows: int = 5) -> list[Finding]:
    """Trace rows (numbers already converted): clock, finite values, sources, devices,
    time monotone per series (host, device, metric), cumulative energy never falling."""
    f = check_trace_rows(tr, file, now_ns, max_rows)
    if not tr["metric"].isin(["power_w", "energy_j"]).any():
        f.append(no_energy(file))
    return f + check_trace_series(tr, file, max_rows)


def no_energy(file: str) -> Finding:
    return Finding(ERROR, "trace.no-energy", file, None,
                   "no power_w or energy_j rows: nothing to attribute")


def check_trace_rows(tr: pd.DataFrame, file: str, now_ns: int, max_rows: int = 5
                     ) -> list[Finding]:
    """The checks of each row alone: clock, finite values, sources, device names."""
    f = check_clock(tr["t_ns"], tr["line_no"], "t_ns", file, now_ns, max_rows)
    bad_v = ~np.isfinite(tr["value"].to_numpy(float)) & tr["value"].notna().to_numpy()
    if bad_v.any():
        f += capped(ERROR, "trace.value", file, tr["line_no"][bad_v],
                     [f"value {x} is not finite" for x in tr["value"][bad_v].head(max_rows)],
                     max_rows)
    known = set(sensor_source_ids())  # the source registry's (`contracts.sources`)
    src = tr["source"]
    empty = src.isna().to_numpy() | src.isin([""]).to_numpy()
    if empty.any():
        f += capped(ERROR, "trace.source-missing", file, tr["line_no"][empty],
                     ["empty source: every reading says whether it is measured, estimated or "
                      "simulated"] * int(empty.sum()), max_rows)
    unknown = sorted(set(map(str, src[~empty].unique())) - known)
    for s in unknown:
        first = _first_line(tr["line_no"][(src == s).to_numpy()])
        f.append(Finding(WARNING, "trace.source-unknown", file, first,
                         f"source {s!r} is not one of {sorted(known)}"))
    devs = pd.Series([str(d) for d in tr["device"].unique()])
    for d in devs[~devs.str.match(device_pattern())]:
        first = _first_line(tr["line_no"][(tr["device"] == d).to_numpy()])
        f.append(Finding(WARNING, "trace.device-name", file, first,
                         f"device {d!r} is not {device_forms()}"))
    return f


def _first_line(lines: pd.Series) -> int | None:
    """The first of some rows' lines; None for a Parquet table's (it has no lines)."""
    ln = lines.iloc[0]
    return None if pd.isna(ln) else int(ln)


def check_trace_series(tr: pd.DataFrame, file: str, max_rows: int = 5) -> list[Finding]:
    """The checks along each series: time monotone per (host, device, metric), cumulative
    energy never falling (in chunks: the chunk after each series' last row of the one before)."""
    f: list[Finding] = []
    keys = ["host", "device", "metric"]
    back = (tr.groupby(keys, sort=False, observed=True)["t_ns"].diff() < 0).to_numpy()
    if back.any():
        f += capped(ERROR, "clock.not-monotone", file, tr["line_no"][back],
                     [f"t_ns goes back in time within series {r.host}/{r.device}/{r.metric}"
                      for r in tr[back].head(max_rows).itertuples()], max_rows)
    en = tr[tr["metric"] == "energy_j"]
    if len(en):
        fall = (en.groupby(["host", "device"], sort=False, observed=True)["value"].diff()
                < 0).to_numpy()
        if fall.any():
            f += capped(WARNING, "trace.energy-falls", file, en["line_no"][fall],
                         [f"cumulative energy_j of {r.host}/{r.device} falls to {r.value}"
                          for r in en[fall].head(max_rows).itertuples()], max_rows)
    return f


def check_gaps(tr: pd.DataFrame, file: str, stalls: Stalls | None = None) -> list[Finding]:
    """Sensor gaps (`attribution.gaps`) of a trace's rows (numbers already converted): its
    finite readings' device series (`device_series`) checked by `gap_findings`."""
    cols = ["t_ns", "host", "device", "metric", "value", "source"]
    ok = np.isfinite(tr["value"].to_numpy(float))
    plain = tr.loc[ok, cols].astype({c: str for c in ("host", "device", "metric", "source")})
    return gap_findings(device_series(plain), file, stalls)


def gap_findings(series: Iterable[DeviceSeries], file: str,
                 stalls: Stalls | None = None) -> list[Finding]:
    """Sensor gaps: a warning for each device whose readings stop for longer than
    `GAP_PERIODS` reading periods; an error when the energy bridged across them exceeds
    `MAX_INVENTED_SHARE` of the device's energy; gaps the sampler's recorded `stalls` cover
    a warning apart (`check.stalls`). `series`: the devices' series in
    (host, device) order, a list (`check_gaps`) or a trace read in chunks
    (`attribution.chunked.SpilledTrace`, one device at a time): the same findings."""
    return gap_record_findings((gap_record(s) for s in series), file, stalls)


def trace_span(tr: pd.DataFrame) -> pd.DataFrame:
    """Each host's first and last reading (index host, columns min, max)."""
    return tr.groupby("host", observed=True)["t_ns"].agg(["min", "max"])


def check_span(span: pd.DataFrame, ev: pd.DataFrame, trace_file: str,
               meta: dict[str, Any] | None, max_rows: int = 5) -> list[Finding]:
    """Every event lies inside its host's trace span (`trace_span`; else attribution has no
    energy for it), and inside the workload's window that meta.json records."""
    first = str(ev["file_name"].iloc[0]) if len(ev) else ""
    return (untraced_hosts(span, set(span_host_keys(span, ev)), first, trace_file)
            + span_findings(span, ev, meta, max_rows))


def span_host_keys(span: pd.DataFrame, ev: pd.DataFrame) -> pd.Series:
    """Each event's host as the trace names it (a one-host trace: its host, whatever the
    events call it)."""
    hosts = set(span.index.astype(str))
    if len(hosts) == 1:  # one-host run whose trace and events name the host differently
        return pd.Series(next(iter(hosts)), index=ev.index, dtype=object)
    return ev["host"].astype(str)


def untraced_hosts(span: pd.DataFrame, hosts: set[str], events_file: str,
                   trace_file: str) -> list[Finding]:
    """A warning for each of the events' `hosts` (`span_host_keys`) without trace rows."""
    return [Finding(WARNING, "events.host-untraced", events_file, None,
                    f"host {h!r} has events but no trace rows in {trace_file}")
            for h in sorted(hosts - set(span.index.astype(str)))]


def span_findings(span: pd.DataFrame, ev: pd.DataFrame, meta: dict[str, Any] | None,
                  max_rows: int = 5) -> list[Finding]:
    """`check_span` but the untraced hosts: per events file, the events outside their host's
    trace span, then those outside meta.json's workload window."""
    f: list[Finding] = []
    ev = ev.assign(host_key=span_host_keys(span, ev))
    e = ev[ev["host_key"].isin(set(span.index.astype(str)))]
    lo = e["host_key"].map(span["min"]).astype(np.int64)
    hi = e["host_key"].map(span["max"]).astype(np.int64)
    out = ((e["start_ns"] < lo) | (e["end_ns"] > hi)).to_numpy()
    bad = e[out]
    for file, g in bad.groupby("file_name", sort=False):
        f += capped(ERROR, "events.outside-trace", str(file), g["line_no"],
                     [f"phase '{r.phase}' [{r.start_ns}, {r.end_ns}] lies outside the trace span "
                      f"[{span.loc[r.host_key, 'min']}, {span.loc[r.host_key, 'max']}] "
                      f"of host {r.host_key}"
                      for r in g.head(max_rows).itertuples()], max_rows)
    w0, w1 = (meta or {}).get("workload_start_ns"), (meta or {}).get("workload_end_ns")
    if isinstance(w0, int) and isinstance(w1, int):
        outw = ((ev["start_ns"] < w0) | (ev["end_ns"] > w1)).to_numpy() & ~np.isin(
            ev.index, bad.index)
        for file, g in ev[outw].groupby("file_name", sort=False):
            f += capped(WARNING, "events.outside-workload", str(file), g["line_no"],
                         [f"phase '{r.phase}' lies outside meta.json's workload window "
                          f"[{w0}, {w1}]" for r in g.head(max_rows).itertuples()], max_rows)
    return f
