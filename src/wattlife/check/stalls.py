"""Sensor gaps against stalls of the sampler: which of a device's gaps (`attribution.sensor_gaps`,
readings more than `GAP_PERIODS` periods apart) a sensor left, and which the sampler did.

A sensor that stops answering leaves a hole in its own device's readings; a sampler thread that
is not scheduled for a while (an overloaded machine, a slow flush) leaves a hole in every device
it polls. The sampler records the windows in which it was late by more than `STALL_TICKS` ticks
outside its polls (a sensor that hangs in its poll is not a stall) in meta.json's
`sampler.stalls`, on the polls' own timestamps; a gap of the sampler's host that such windows
cover for at least half its length is a *stall*. Without the record (runs before issue 41, a
trace checked without its meta.json) every gap is a sensor gap: the cautious reading.

`wattlife check`: sensor gaps bridging more than `MAX_INVENTED_SHARE` of a device's energy are
an error (`trace.gap-energy`), fewer a warning (`trace.gap`); stalls are a warning of their own
(`trace.stall`), never an error: the run is as its machine let it be measured, and the phases
they touch carry `gap_s` and a widened interval all the same (attribution flags every gap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..attribution import GAP_PERIODS, MAX_INVENTED_SHARE, DeviceSeries, sensor_gaps
from .findings import ERROR, WARNING, Finding


@dataclass
class GapRecord:
    """One device's gaps, kept small (bounds and energy per gap) once its series is read."""

    host: str
    device: str
    source: str
    averaging: bool
    t0: int
    t1: int
    start_ns: np.ndarray
    end_ns: np.ndarray
    joules: np.ndarray  # energy bridged across each gap
    energy_j: float  # the device's energy over its series


def gap_record(s: DeviceSeries) -> GapRecord:
    """`s`'s gaps (`sensor_gaps`) as a `GapRecord`: from the gaps' own readings and the
    series' ends, so that a series kept on disk (`windowed.WindowedSeries`) is never read
    whole."""
    g = sensor_gaps(s)
    n = len(s.t_ns)
    t0, t1 = (int(s.t_ns[0]), int(s.t_ns[-1])) if n else (0, 0)
    return GapRecord(s.host, s.device, s.source, g.averaging, t0, t1, g.start_ns, g.end_ns,
                     g.each_j, float(s.energy_j[-1] - s.energy_j[0]) if n else 0.0)


#: the sampler's stall windows: host, and [from, to] ns pairs (meta.json `sampler.stalls`)
Stalls = tuple[str, list[list[int]]]


def sampler_stalls(meta: dict[str, Any] | None) -> Stalls | None:
    """The sampler's host and recorded stall windows from a meta.json document; None where it
    has none (before issue 41) or they are malformed."""
    if not meta:
        return None
    windows = (meta.get("sampler") or {}).get("stalls")
    if not isinstance(windows, list) or not all(
            isinstance(w, list) and len(w) == 2 and all(isinstance(x, int) for x in w)
            for w in windows):
        return None
    return str(meta.get("host", "")), windows


def stall_mask(r: GapRecord, stalls: Stalls | None) -> np.ndarray:
    """Which of `r`'s gaps the sampler's recorded stalls cover for at least half their length."""
    if stalls is None or stalls[0] != r.host or not stalls[1] or not len(r.start_ns):
        return np.zeros(len(r.start_ns), bool)
    w = np.asarray(stalls[1], dtype=np.int64).reshape(-1, 2)
    a, b = r.start_ns[:, None], r.end_ns[:, None]
    cover = np.clip(np.minimum(w[None, :, 1], b) - np.maximum(w[None, :, 0], a), 0, None)
    result: np.ndarray = cover.sum(axis=1) >= (r.end_ns - r.start_ns) / 2
    return result


def gap_record_findings(records: Iterable[GapRecord], file: str,
                        stalls: Stalls | None = None) -> list[Finding]:
    """The findings of every device's gaps, sensor gaps and stalls apart (module docstring)."""
    f: list[Finding] = []
    for r in records:
        if not len(r.start_ns):
            continue
        stall = stall_mask(r, stalls)
        if (~stall).any():
            f.append(_sensor_finding(r, ~stall, file))
        if stall.any():
            f.append(Finding(WARNING, "trace.stall", file, None,
                             f"{_describe(r, stall)}: the sampler itself stalled then "
                             "(meta.json sampler.stalls: an overloaded machine or a slow "
                             "flush); the energy there is bridged, and the phases touched carry "
                             "gap_s and a widened interval"))
    return f


def _sensor_finding(r: GapRecord, m: np.ndarray, file: str) -> Finding:
    share = float(r.joules[m].sum()) / r.energy_j if r.energy_j > 0 else 1.0
    src = (f"source {r.source}: its next reading may average the gap, if the sensor kept "
           "counting" if r.averaging else f"source {r.source}: point readings")
    if share > MAX_INVENTED_SHARE:
        return Finding(ERROR, "trace.gap-energy", file, None,
                       f"{_describe(r, m)}: {share:.1%} of the device's energy lies in gaps, "
                       f"not read ({src}; limit {MAX_INVENTED_SHARE:.0%})")
    return Finding(WARNING, "trace.gap", file, None,
                   f"{_describe(r, m)}: {share:.1%} of the device's energy lies in gaps "
                   f"(readings > {GAP_PERIODS} periods apart; {src}); the phases touched "
                   "carry gap_s and a widened interval")


def _describe(r: GapRecord, m: np.ndarray) -> str:
    """'host/device: N gap(s) ..., S s in all (longest L s from t_ns T), J bridged'."""
    d = r.end_ns[m] - r.start_ns[m]
    k = int(np.argmax(d))
    return (f"{r.host}/{r.device}: {int(m.sum())} gap(s) in its readings, "
            f"{d.sum() / 1e9:.3f} s in all (longest {d[k] / 1e9:.3f} s from t_ns "
            f"{int(r.start_ns[m][k])}), {float(r.joules[m].sum()):.1f} J bridged")
