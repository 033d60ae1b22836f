"""Energy attribution: trace x events -> per-phase energy (the `phases` contract).

Pure functions on tables; `attribute_files` is the only one that touches files.

Integrate. Each device's cumulative energy E(t) comes from its power readings, each taken as the
average over the interval since the previous reading (what NVML's window-averaged samples, RAPL
deltas and the utilisation-based estimate all are), or from its energy counter where it has no
power readings. A phase interval's inclusive energy is E(end) - E(start) (one vectorised `interp`
over all intervals); energy goes to the innermost phase (its exclusive energy = inclusive minus its
children's inclusive energy); what no top-level phase covers is `unattributed`. So, exactly,
sum(phases) + unattributed = E(last reading) - E(first reading).

Deconvolve. When phases are shorter than the sensor's averaging window, model reading i as
sum_p P_p * overlap(p, [t_i - w, t_i]) / w over phase names p (exclusive time; `unattributed` is a
name too) and solve least squares for one mean power per name, bounded below by the device's floor
(its lowest reading: a phase on a device that draws power never gets 0 J) and, where the trace has the
device's `power_limit_w`, above by the larger of that limit and the highest reading. A small ridge pulls names the readings
barely see toward the device's mean power (column `identifiability`: a name's share of the mean
diagonal of A'A; below 0.01 its power is mostly that prior, not a measurement). Such a name, or one
whose bootstrap interval collapsed onto a bound, has `identified` False and the interval of all
that is physically possible: floor x time to upper bound x time (the upper bound is the power
limit's, else the highest reading). Energy of a name is
P_p x its total exclusive time; the difference to the measured total is reported as the row
`deconvolution_residual`, so the energy still adds up. The 95% interval comes from a moving-block
bootstrap of (reading, overlap) pairs: contiguous blocks of readings are resampled with
replacement, which keeps the readings' autocorrelation.

Sensor response. The window above is a boxcar [t_i - w, t_i]. A real sensor weighs the past
differently: the H200's readings start to move ~5 ms after a step and settle only after ~40 ms
(results/reference/h200/attribution/). `SensorResponse` generalises the boxcar to piecewise-constant
weights over lag bins; `estimate_response` finds them from the run itself by alternating least
squares (powers given weights, weights given powers; weights >= 0, summing to 1), which needs
phases of varied length and order, as interleaved short phases have.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear, nnls

from .contracts import (META_FILE, PHASES_COLUMNS, UNATTRIBUTED, ContractError, RunMeta,
                        device_kind, read_events, read_meta, read_trace, refuse_overwrite,
                        write_table)

RESIDUAL = "deconvolution_residual"
ATTRIBUTED_KINDS = ("gpu", "cpu", "dram")
PROGRESS_MIN_READINGS = 2_000_000  # show a progress bar when a trace has more readings


def _progress(n_devices: int, n_readings: int, desc: str):
    """A tqdm bar over devices for large traces (stderr; silent when small or not a terminal)."""
    from tqdm.auto import tqdm

    return tqdm(total=n_devices, desc=desc, unit="device",
                disable=n_readings < PROGRESS_MIN_READINGS or None)


@dataclass
class DeviceSeries:
    """One device's readings and cumulative energy E at the reading times."""

    host: str
    device: str
    t_ns: np.ndarray
    energy_j: np.ndarray
    power_w: np.ndarray | None  # window-average power readings, if the device has them
    source: str
    max_power_w: float = np.inf  # upper bound of a phase's mean power in deconvolution
    floor_w: float = 0.0  # the lowest power the device was seen drawing (lower bound of a phase's)

    @property
    def upper_w(self) -> float:
        """The highest mean power a phase can have: the power-limit bound where the trace has one,
        else the highest power the device was seen drawing."""
        if np.isfinite(self.max_power_w):
            return float(self.max_power_w)
        if self.power_w is not None:
            return float(np.max(self.power_w))
        dt = np.diff(self.t_ns) / 1e9
        ok = dt > 0
        return float(np.max(np.diff(self.energy_j)[ok] / dt[ok])) if ok.any() else np.inf

    def rel(self, t_ns: np.ndarray) -> np.ndarray:
        """Seconds-scale float times relative to the first reading (epoch ns in float64 would
        lose precision: 2**-52 * 1.7e18 ns is hundreds of ns)."""
        return (np.asarray(t_ns, dtype=np.int64) - self.t_ns[0]).astype(np.float64)

    def energy_at(self, t_ns: np.ndarray) -> np.ndarray:
        return np.interp(self.rel(t_ns), self.rel(self.t_ns), self.energy_j)

    @property
    def spacing_s(self) -> float:
        return float(np.median(np.diff(self.t_ns))) / 1e9 if len(self.t_ns) > 1 else float("nan")


def device_series(trace: pd.DataFrame) -> list[DeviceSeries]:
    """Cumulative-energy series of every GPU/CPU/DRAM device in a trace."""
    out = []
    kinds = trace["device"].map(device_kind)
    sel = trace[kinds.isin(ATTRIBUTED_KINDS) & trace["metric"].isin(["power_w", "energy_j"])]
    limits = trace[trace["metric"] == "power_limit_w"].groupby(["host", "device"])["value"].max()
    for (host, dev), g in sel.groupby(["host", "device"], sort=True):
        limit = float(limits.get((host, dev), np.inf))
        power = g[g["metric"] == "power_w"]
        if len(power) >= 2:
            power = power.sort_values("t_ns", kind="stable").drop_duplicates("t_ns", keep="last")
            t = power["t_ns"].to_numpy(np.int64)
            p = power["value"].to_numpy(np.float64)
            e = np.concatenate([[0.0], np.cumsum(p[1:] * np.diff(t) / 1e9)])
            src = power["source"].mode().iat[0]
            # a burst may exceed the limit (the H200's 20 ms readings reach ~1.3x it): the highest
            # reading says how far this device went
            bound = max(limit, float(p.max())) if np.isfinite(limit) else np.inf
            floor = max(float(p[1:].min()), 0.0)  # p[0] has no window (not integrated)
            out.append(DeviceSeries(host, dev, t, e, p, src, bound, floor))
            continue
        energy = g[g["metric"] == "energy_j"].sort_values("t_ns", kind="stable")
        if len(energy) >= 2:
            t = energy["t_ns"].to_numpy(np.int64)
            e = energy["value"].to_numpy(np.float64)
            dt = np.diff(t) / 1e9
            ok = dt > 0
            floor = max(float(np.min(np.diff(e)[ok] / dt[ok])), 0.0) if ok.any() else 0.0
            out.append(DeviceSeries(host, dev, t, e - e[0], None, energy["source"].mode().iat[0],
                                    floor_w=floor))
    return out


@dataclass(frozen=True)
class SensorResponse:
    """How a reading stamped t weighs the true power at t - lag: weight k on lag bin
    [edges_s[k], edges_s[k+1]); weights >= 0 sum to 1. A boxcar of width w is one bin [0, w)."""

    edges_s: tuple[float, ...]
    weights: tuple[float, ...]
    estimated: bool = False

    def __post_init__(self) -> None:
        e, w = np.asarray(self.edges_s, float), np.asarray(self.weights, float)
        if len(e) != len(w) + 1 or len(w) == 0:
            raise ValueError(f"sensor response: {len(w)} weights need {len(w) + 1} lag edges, "
                             f"got {len(e)}")
        if e[0] < 0 or np.any(np.diff(e) <= 0):
            raise ValueError(f"sensor response: lag edges must start at >= 0 and increase, got {e}")
        if np.any(w < 0) or not np.isclose(w.sum(), 1.0, atol=1e-6):
            raise ValueError(f"sensor response: weights must be >= 0 and sum to 1, got {w}")

    @classmethod
    def boxcar(cls, window_s: float) -> "SensorResponse":
        return cls((0.0, float(window_s)), (1.0,))

    @property
    def is_boxcar(self) -> bool:
        return len(self.weights) == 1 and self.edges_s[0] == 0.0

    @property
    def span_s(self) -> float:
        return float(self.edges_s[-1])

    @property
    def centroid_s(self) -> float:
        e = np.asarray(self.edges_s)
        return float(np.dot(self.weights, (e[:-1] + e[1:]) / 2))

    def describe(self) -> str:
        if self.is_boxcar:
            return f"boxcar {self.span_s * 1e3:.1f} ms"
        kind = "estimated" if self.estimated else "given"
        return (f"{kind} response: {len(self.weights)} lag bins to {self.span_s * 1e3:.0f} ms, "
                f"centroid {self.centroid_s * 1e3:.1f} ms")

    def design(self, index: "_SegmentIndex", t: np.ndarray) -> np.ndarray:
        """A[i, n] = the weight reading i gives to phase name n's time."""
        e = np.asarray(self.edges_s) * 1e9
        return sum(wk * index.overlap(t - e[k], e[k + 1] - e[k])
                   for k, wk in enumerate(self.weights) if wk > 0)

    def to_csv(self, path: str | Path) -> None:
        e = np.asarray(self.edges_s) * 1e3
        pd.DataFrame({"lag_lo_ms": e[:-1], "lag_hi_ms": e[1:], "weight": self.weights}).to_csv(
            path, index=False)

    @classmethod
    def from_csv(cls, path: str | Path) -> "SensorResponse":
        """Lag bins `lag_lo_ms,lag_hi_ms,weight`, contiguous, as `to_csv` writes them."""
        df = pd.read_csv(path)
        need = {"lag_lo_ms", "lag_hi_ms", "weight"}
        if not need <= set(df.columns):
            raise ValueError(f"{path}: expected columns {sorted(need)}, got {list(df.columns)}")
        lo, hi = df["lag_lo_ms"].to_numpy(float), df["lag_hi_ms"].to_numpy(float)
        gaps = np.flatnonzero(~np.isclose(lo[1:], hi[:-1]))
        if len(gaps):
            raise ValueError(f"{path}, line {gaps[0] + 3}: lag_lo_ms {lo[gaps[0] + 1]} does not "
                             f"continue the previous bin's lag_hi_ms {hi[gaps[0]]}")
        try:
            return cls(tuple(np.append(lo, hi[-1]) / 1e3), tuple(df["weight"].astype(float)))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


@dataclass
class PhaseTree:
    """Properly nested intervals of one rank, sorted by (start, -end), with their parents."""

    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    parent: np.ndarray  # index into the arrays, -1 for top level


#: cross-clock overlaps up to this are resolved by clamping (GPU-timeline boundaries mapped to
#: the host clock through different anchors disagree by ~0.1 ms; far below a sensor's resolution)
OVERLAP_TOL_NS = 1_000_000


def nest(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nesting rule, on one rank's intervals already sorted by (start, -end): each interval's
    depth, parent (index, -1 at the top) and whether it overlaps that parent without nesting in it.

    Depth = intervals sorted before me still open at my start. The one implementation of the rule:
    `phase_tree`, `resolve_overlaps` and `check.nesting` all call it."""
    n = len(start)
    idx = np.arange(n)
    # intervals open at my start = those sorted before me minus those of them already ended.
    # Every interval ending at or before my start counts as ended, except zero-length ones that
    # start at my instant and sort at or after me (myself included): they are not before me.
    closed = np.searchsorted(np.sort(end), start, side="right")
    zl = (end == start).astype(np.int64)
    if zl.any():
        new_group = np.concatenate([[True], start[1:] != start[:-1]])
        cum = np.concatenate([[0], np.cumsum(zl)])
        g_end = np.append(np.flatnonzero(new_group)[1:], n)[np.cumsum(new_group) - 1]
        closed -= cum[g_end] - cum[idx]  # zero-length intervals of my instant at or after me
    depth = np.maximum(idx - closed, 0)
    parent = np.full(n, -1, dtype=np.int64)
    for d in range(1, int(depth.max(initial=0)) + 1):
        child = idx[depth == d]
        up = idx[depth == d - 1]
        pos = np.searchsorted(up, child) - 1
        parent[child] = up[np.maximum(pos, 0)]
    has_parent = parent >= 0
    over = np.zeros(n, dtype=bool)
    over[has_parent] = end[has_parent] > end[parent[has_parent]]
    return depth, parent, over


def resolve_overlaps(start: np.ndarray, end: np.ndarray, tol_ns: int = OVERLAP_TOL_NS
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clamp one rank's overlaps of at most `tol_ns` (any order of rows): an interval that starts
    inside another and ends after it starts at the other's end when their common part is the
    smaller (siblings whose boundary the two clocks placed differently), else ends at the
    other's end (a child sticking out of its parent). Returns (start, end, clamp_ns): the new
    bounds and how far each row moved. Larger overlaps are left for `nest` to report."""
    start = np.asarray(start, dtype=np.int64).copy()
    end = np.asarray(end, dtype=np.int64).copy()
    clamp = np.zeros(len(start), dtype=np.int64)
    for _ in range(256):  # each pass settles one nesting level of a clamped boundary
        order = np.lexsort((-end, start))
        s, e = start[order], end[order]
        _, parent, over = nest(s, e)
        i = np.flatnonzero(over)
        if not len(i):
            break
        j = parent[i]
        inter, protr = e[j] - s[i], e[i] - e[j]
        # a wrong parent (inter <= 0) is the echo of an overlap before it: settled by that one
        small = (inter > 0) & (np.minimum(inter, protr) <= tol_ns)
        if not small.any():
            break
        i, j, inter, protr = i[small], j[small], inter[small], protr[small]
        at_start = inter <= protr
        rows = order[i]
        start[rows[at_start]] = e[j[at_start]]
        end[rows[~at_start]] = e[j[~at_start]]
        clamp[rows] += np.minimum(inter, protr)
    return start, end, clamp


def clamp_events(events: pd.DataFrame, tol_ns: int = OVERLAP_TOL_NS,
                 where: str = "events") -> pd.DataFrame:
    """Events with overlaps of at most `tol_ns` per (host, rank) clamped (`resolve_overlaps`), a
    `clamp_ns` column (plus what the markers already clamped) and a warning counting them."""
    if not len(events):
        return events
    ev = events.copy()
    prior = ev["clamp_ns"].fillna(0).astype(np.int64) if "clamp_ns" in ev.columns else 0
    ev["clamp_ns"] = 0
    for _, g in ev.groupby(["host", "rank"], sort=False):
        s, e, c = resolve_overlaps(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), tol_ns)
        if c.any():
            ev.loc[g.index, "start_ns"], ev.loc[g.index, "end_ns"] = s, e
            ev.loc[g.index, "clamp_ns"] = c
    moved = ev["clamp_ns"] > 0
    if moved.any():
        n = int(moved.sum())
        warnings.warn(f"{where}: {n} phase boundar{'y' if n == 1 else 'ies'} overlapping a "
                      f"neighbour by at most {tol_ns / 1e6:g} ms clamped (largest "
                      f"{ev['clamp_ns'].max() / 1e3:.1f} us, total "
                      f"{ev['clamp_ns'].sum() / 1e3:.1f} us): GPU-timeline boundaries mapped to "
                      "the host clock through different anchors", stacklevel=2)
    ev["clamp_ns"] = ev["clamp_ns"] + prior
    return ev


def phase_tree(events: pd.DataFrame, where: str = "events") -> PhaseTree:
    """Sort one rank's intervals and find each one's parent (vectorised over depth levels).
    An overlap is an error naming the rows' file and line (columns `file_name`, `line_no`)."""
    order = np.lexsort((-events["end_ns"].to_numpy(), events["start_ns"].to_numpy()))
    start = events["start_ns"].to_numpy(np.int64)[order]
    end = events["end_ns"].to_numpy(np.int64)[order]
    name = events["phase"].to_numpy(object)[order]
    depth, parent, over = nest(start, end)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        j = int(parent[i])

        def at(k: int) -> str:
            if "file_name" not in events.columns or "line_no" not in events.columns:
                return ""
            r = events.iloc[order[k]]
            return f" ({r['file_name']}:{r['line_no']})" if pd.notna(r["line_no"]) else ""
        raise ContractError(
            f"{where}: phase '{name[i]}'{at(i)} [{start[i]}, {end[i]}] overlaps '{name[j]}'{at(j)} "
            f"[{start[j]}, {end[j]}] by {(end[j] - start[i]) / 1e6:.3f} ms without nesting inside "
            "it; phases of one rank must nest")
    return PhaseTree(name, start, end, depth, parent)


def _exclusive(tree: PhaseTree, inclusive: np.ndarray) -> np.ndarray:
    child_sum = np.bincount(tree.parent[tree.parent >= 0],
                            weights=inclusive[tree.parent >= 0], minlength=len(inclusive))
    return inclusive - child_sum


def _segments(tree: PhaseTree) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries b_k and the innermost interval index active on [b_k, b_k+1) (-1: none)."""
    n = len(tree.start)
    times = np.concatenate([tree.start, tree.end])
    label = np.concatenate([np.arange(n), tree.parent])
    is_start = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])
    # at equal times: ends (innermost first) before starts (outermost first)
    tie = np.concatenate([tree.depth, -tree.depth])
    order = np.lexsort((tie, is_start, times))
    return times[order], label[order]


IDLE = "idle"  # the phase of a GPU that no rank uses


def gpu_mapping(meta: RunMeta) -> list[int] | None:
    """Local rank -> the GPU's number in the trace's device names (`gpu<N>`), from meta.json.

    `wattlife run` records `gpus: [{device, local_rank, cuda_ordinal, nvml_index, ...}]`; its trace
    names each GPU by CUDA ordinal, so rank k drives `device` of the entry whose local_rank is k.
    An explicit `cuda_to_nvml` list (top level or under `gpu_mapping`) is for traces named by NVML
    index. None if meta.json has neither (then rank k drives gpu k)."""
    gpus = meta.gpus
    if isinstance(gpus, list) and gpus and all(isinstance(g, dict) for g in gpus):
        try:
            by_rank = {int(g["local_rank"]): int(str(g["device"]).removeprefix("gpu")) for g in gpus}
        except (KeyError, TypeError, ValueError) as exc:
            raise ContractError(f"meta.json: gpus entries need device 'gpu<N>' and local_rank, "
                                f"got {gpus!r}") from exc
        if sorted(by_rank) == list(range(len(by_rank))):
            return [by_rank[k] for k in range(len(by_rank))]
    m = meta.get("cuda_to_nvml")
    if m is None and isinstance(meta.get("gpu_mapping"), dict):
        m = meta["gpu_mapping"].get("cuda_to_nvml")
    if m is None:
        return None
    if not isinstance(m, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in m):
        raise ContractError(f"meta.json: cuda_to_nvml must be a list of NVML indices (non-negative "
                            f"integers), got {m!r}")
    return list(m)


def _phase_map(events: pd.DataFrame,
               cuda_to_nvml: list[int] | None = None) -> dict[tuple[str, str], pd.DataFrame]:
    """Which rank's events each (host, device) takes: the GPU of local rank k is CUDA device k,
    i.e. NVML index cuda_to_nvml[k] (k itself without a mapping); CPU/DRAM <- the lowest rank on
    the host (it drives the host's work)."""
    ev = events.copy()
    if "local_rank" not in ev.columns or ev["local_rank"].isna().any():
        ev["local_rank"] = ev.groupby("host")["rank"].rank(method="dense").astype(int) - 1
    out: dict[tuple[str, str], pd.DataFrame] = {}
    for host, g in ev.groupby("host"):
        for lr, gg in g.groupby("local_rank"):
            k = int(lr)
            if cuda_to_nvml is not None and k >= len(cuda_to_nvml):
                raise ContractError(f"events: local rank {k} on {host} has no GPU in meta.json's "
                                    f"cuda_to_nvml {cuda_to_nvml}")
            out[(host, f"gpu{cuda_to_nvml[k] if cuda_to_nvml is not None else k}")] = gg
        low = g[g["rank"] == g["rank"].min()]
        out[(host, "host")] = low
    return out


def _idle_events(series: DeviceSeries, run_id: str) -> pd.DataFrame:
    """One `idle` interval over the whole trace: a GPU that no rank used."""
    return pd.DataFrame({"run_id": [run_id], "host": [series.host], "rank": [-1], "phase": [IDLE],
                         "start_ns": [int(series.t_ns[0])], "end_ns": [int(series.t_ns[-1])],
                         "step": [np.nan], "items": [np.nan]})


def _events_for(series: DeviceSeries, pmap: dict, events: pd.DataFrame) -> pd.DataFrame:
    """The events of the rank that drives this device; for a GPU no rank uses, one `idle`
    interval (never another rank's phases)."""
    kind = device_kind(series.device)
    run_id = str(events["run_id"].iloc[0]) if len(events) else "run"
    key = (series.host, series.device if kind == "gpu" else "host")
    if key in pmap:
        return pmap[key]
    hosts = {h for h, _ in pmap}
    if series.host not in hosts and len(hosts) == 1:
        # one-host run whose trace and events name the host differently (e.g. container names)
        only = next(iter(hosts))
        key = (only, series.device if kind == "gpu" else "host")
        if key in pmap:
            return pmap[key]
        if kind != "gpu":
            return pmap[(only, "host")]
    if kind == "gpu":
        return _idle_events(series, run_id)
    return events.iloc[:0]


def choose_method(series: DeviceSeries, tree: PhaseTree, window_s: float) -> str:
    """`deconvolve` when the typical innermost segment is shorter than two sensor windows."""
    if series.power_w is None or len(tree.start) == 0:
        return "integrate"
    seg_len = np.diff(_segments(tree)[0]) / 1e9
    seg_len = seg_len[seg_len > 0]
    if len(seg_len) == 0:
        return "integrate"
    period = max(series.spacing_s, window_s)
    return "deconvolve" if np.median(seg_len) < 2 * period else "integrate"


def integrate(series: DeviceSeries, tree: PhaseTree) -> pd.DataFrame:
    """Per-interval exclusive energy/time by integration, aggregated per phase name."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    start = np.clip(tree.start, t0, t1)
    end = np.clip(tree.end, t0, t1)
    e_incl = series.energy_at(end) - series.energy_at(start)
    t_incl = (end - start) / 1e9
    e_ex = _exclusive(tree, e_incl)
    t_ex = _exclusive(tree, t_incl)
    total_e = float(series.energy_j[-1] - series.energy_j[0])
    top = tree.parent < 0
    df = pd.DataFrame({"phase": tree.name, "energy_j": e_ex, "time_s": t_ex, "n": 1})
    g = df.groupby("phase", sort=False).agg(energy_j=("energy_j", "sum"), time_s=("time_s", "sum"),
                                            count=("n", "sum")).reset_index()
    un = pd.DataFrame({"phase": [UNATTRIBUTED], "energy_j": [total_e - e_incl[top].sum()],
                       "time_s": [(t1 - t0) / 1e9 - t_incl[top].sum()], "count": [0]})
    g = pd.concat([g, un], ignore_index=True)
    # 95% interval from boundary timing: each boundary is known to the sensor's spacing, so it
    # moves energy by sigma_P * spacing / sqrt(12) (uniform timing error), independently.
    sigma_p = float(np.std(series.power_w)) if series.power_w is not None else \
        float(np.std(np.diff(series.energy_j) / (np.diff(series.t_ns) / 1e9)))
    per_boundary = sigma_p * series.spacing_s / np.sqrt(12.0)
    boundaries = 2.0 * g["count"].clip(lower=1).to_numpy()
    half = 1.96 * per_boundary * np.sqrt(boundaries)
    # no phase draws less than the device's floor (its lowest reading). The upper end is left
    # alone: a reading at the device's highest value is not a bound on the phase's true power
    # (an estimate saturates, a sensor averages), and clamping it would give a zero-width interval.
    t_pos = g["time_s"].clip(lower=0.0).to_numpy()
    e = g["energy_j"].to_numpy()
    g["energy_lo_j"] = np.minimum(np.maximum(e - half, series.floor_w * t_pos), e)
    g["energy_hi_j"] = e + half
    g["identified"] = True
    g["method"] = "integrate"
    g["window_ms"] = np.nan
    return g


class _SegmentIndex:
    """Per phase name, cumulative exclusive time up to each segment boundary."""

    def __init__(self, bounds: np.ndarray, seg_name: np.ndarray, names: list[str]) -> None:
        self.bounds = bounds.astype(np.float64)
        self.seg_len = np.diff(self.bounds)
        self.names = names
        self.in_name = [seg_name == nm for nm in names]
        self.cum = [np.concatenate([[0.0], np.cumsum(np.where(m, self.seg_len, 0.0))])
                    for m in self.in_name]

    def overlap(self, t_ns: np.ndarray, window_ns: float) -> np.ndarray:
        """A[i, n] = share of reading i's window [t_i - w, t_i] spent in phase name n."""
        nseg = len(self.seg_len)
        t_lo = t_ns - window_ns
        ks = [np.searchsorted(self.bounds, t, side="right") - 1 for t in (t_ns, t_lo)]
        kk = [np.clip(k, 0, max(nseg - 1, 0)) for k in ks]
        valid = [(k >= 0) & (k < nseg) for k in ks]
        kc = [np.clip(k, 0, nseg) for k in ks]
        off = [t - self.bounds[k] for t, k in zip((t_ns, t_lo), kk)]
        a = np.empty((len(t_ns), len(self.names)))
        for j in range(len(self.names)):
            m, cum = self.in_name[j], self.cum[j]
            hi = cum[kc[0]] + np.where(valid[0] & m[kk[0]], off[0], 0.0)
            lo = cum[kc[1]] + np.where(valid[1] & m[kk[1]], off[1], 0.0)
            a[:, j] = (hi - lo) / window_ns
        # time outside every boundary (before the first, after the last) counts as unattributed
        if UNATTRIBUTED in self.names:
            j = self.names.index(UNATTRIBUTED)
            a[:, j] = np.clip(1.0 - (a.sum(axis=1) - a[:, j]), 0.0, 1.0)
        return a


def _segment_index(tree: PhaseTree, series: DeviceSeries) -> tuple[_SegmentIndex, np.ndarray, np.ndarray]:
    """Segment index on times relative to the series' first reading."""
    bounds, label = _segments(tree)
    seg_name = np.where(label[:-1] >= 0, tree.name[np.maximum(label[:-1], 0)], UNATTRIBUTED)
    names = sorted(set(tree.name)) + [UNATTRIBUTED]
    return _SegmentIndex(series.rel(bounds), seg_name, names), bounds, seg_name


MIN_IDENTIFIABILITY = 0.01  # below it a name's power is mostly the ridge prior (see deconvolve)
SHRINK = 1e-3  # ridge weight, relative to the mean diagonal of A'A (see _nnls_normal)


def _nnls_normal(g: np.ndarray, h: np.ndarray, prior_w: float = 0.0,
                 max_w: float = np.inf, min_w: float = 0.0) -> np.ndarray:
    """argmin ||A b - P||^2 + lam ||b - prior_w||^2, min_w <= b <= max_w, from G = A'A and h = A'P.

    The lower bound is the device's floor (its lowest reading): a phase on a device that draws
    power never gets 0 W, which least squares alone would give a phase the readings barely see.

    The upper bound (see `device_series`) keeps a collinear pair of phases (a 3 ms copy that
    always precedes a forward pass) from trading watts without physical limit.

    The small ridge (lam = SHRINK x mean diagonal of G) pulls a phase that the readings barely
    see (a 0.3 ms host-to-device copy inside 20 ms windows) toward the device's mean power
    instead of letting it take any value; phases with a real share of the time are unaffected
    (their diagonal is ~1/SHRINK times larger)."""
    lam = SHRINK * np.trace(g) / len(g) if prior_w > 0 else 1e-12 * np.trace(g) + 1e-300
    r = np.linalg.cholesky(g + lam * np.eye(len(g))).T
    d = np.linalg.solve(r.T, h + lam * prior_w)
    if np.isfinite(max_w) or min_w > 0:
        lo = min(max(min_w, 0.0), max_w)
        if lo == max_w:  # a device that never varied: one possible power
            return np.full(len(h), lo)
        return lsq_linear(r, d, bounds=(lo, max_w), method="bvls").x
    return nnls(r, d)[0]


def deconvolve(series: DeviceSeries, tree: PhaseTree, window_s: float | None = None,
               n_boot: int = 200, n_blocks: int = 100, seed: int = 0,
               chunk: int = 500_000, response: SensorResponse | None = None) -> pd.DataFrame:
    """Mean power per phase name by NNLS over all readings (see the module docstring); the
    readings' window is `response`, else a boxcar of `window_s`, else of the reading spacing."""
    if series.power_w is None:
        raise ValueError(f"{series.device}: deconvolution needs power readings, the trace has only "
                         "an energy counter")
    index, bounds, seg_name = _segment_index(tree, series)
    names = index.names
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    if response is None:
        response = SensorResponse.boxcar(window_s if window_s else series.spacing_s)
    w_ns = response.span_s * 1e9
    t = series.rel(series.t_ns[1:])  # the first reading has no defined window start
    p = series.power_w[1:]
    k = len(names)
    n_blocks = max(1, min(n_blocks, len(t) // 10))
    edges = np.linspace(0, len(t), n_blocks + 1).astype(int)
    g_blocks = np.zeros((n_blocks, k, k))
    h_blocks = np.zeros((n_blocks, k))
    for b in range(n_blocks):
        for s in range(edges[b], edges[b + 1], chunk):
            e = min(s + chunk, edges[b + 1])
            a = response.design(index, t[s:e])
            g_blocks[b] += a.T @ a
            h_blocks[b] += a.T @ p[s:e]
    g_all, h_all = g_blocks.sum(0), h_blocks.sum(0)
    used = np.diag(g_all) > 0
    mean_w = float(np.mean(p))
    beta = np.zeros(k)
    floor, cap = series.floor_w, series.max_power_w
    beta[used] = _nnls_normal(g_all[np.ix_(used, used)], h_all[used], mean_w, cap, floor)
    rng = np.random.default_rng(seed)
    boots = np.full((n_boot, k), np.nan)  # NaN: the replicate holds no reading of that name
    for r in range(n_boot):
        wts = rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks)).astype(float)
        gb = np.tensordot(wts, g_blocks, axes=1)
        hb = np.tensordot(wts, h_blocks, axes=1)
        ok = used & (np.diag(gb) > 0)
        boots[r, ok] = _nnls_normal(gb[np.ix_(ok, ok)], hb[ok], mean_w, cap, floor)
    # a name no reading saw keeps the device's mean power; the bootstrap says nothing about it
    beta[~used] = np.clip(mean_w, floor, cap)
    seen_boot = np.isfinite(boots).sum(axis=0)
    boots[:, seen_boot == 0] = beta[seen_boot == 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanpercentile(boots, [2.5, 97.5], axis=0)
    # how well the readings see each name: its share of the mean diagonal of A'A
    seen = np.diag(g_all) / max(np.trace(g_all) / k, 1e-300)
    # Identified: the readings see the name (identifiability >= MIN_IDENTIFIABILITY) and its
    # bootstrap interval has not collapsed (a zero-width interval means every replicate hit the
    # same bound: the data pushed the estimate against a physical limit). Otherwise the interval
    # is everything physically possible, the device's floor to its upper bound.
    # A device that read one value throughout (e.g. a utilisation estimate saturated at its
    # maximum) has floor == upper: every phase drew that power, and a point is all there is.
    upper = series.upper_w
    constant = not floor < upper
    collapsed = ((hi - lo) <= 1e-6 * np.maximum(np.abs(hi), 1.0)) & (not constant)
    # a name absent from most replicates (one long phase in one block) is barely resampled
    identified = used & (seen >= MIN_IDENTIFIABILITY) & ~collapsed & (seen_boot >= n_boot / 2)
    lo = np.where(identified, lo, floor)
    hi = np.where(identified, hi, np.maximum(upper, beta) if np.isfinite(upper) else np.inf)
    # exclusive time per name inside the trace span
    seg_t0 = np.clip(bounds[:-1], t0, t1)
    seg_t1 = np.clip(bounds[1:], t0, t1)
    seg_dt = (seg_t1 - seg_t0) / 1e9
    time_by = pd.Series(seg_dt).groupby(seg_name).sum()
    covered = float(seg_dt.sum())
    span = (t1 - t0) / 1e9
    count_by = pd.Series(tree.name).value_counts()
    rows = []
    for j, nm in enumerate(names):
        ts = float(time_by.get(nm, 0.0))
        if nm == UNATTRIBUTED:
            ts += span - covered
        rows.append({"phase": nm, "energy_j": beta[j] * ts, "energy_lo_j": lo[j] * ts,
                     "energy_hi_j": hi[j] * ts, "time_s": ts,
                     "count": int(count_by.get(nm, 0)), "method": "deconvolve",
                     "window_ms": w_ns / 1e6, "identifiability": float(seen[j]),
                     "identified": bool(identified[j]),
                     "sensor_response": response.describe()})
    df = pd.DataFrame(rows)
    total = float(series.energy_j[-1] - series.energy_j[0])
    resid = total - df["energy_j"].sum()
    df = pd.concat([df, pd.DataFrame([{"phase": RESIDUAL, "energy_j": resid, "energy_lo_j": resid,
                                       "energy_hi_j": resid, "time_s": 0.0, "count": 0,
                                       "method": "deconvolve", "window_ms": w_ns / 1e6,
                                       "identified": True,
                                       "sensor_response": response.describe()}])],
                   ignore_index=True)
    return df


def estimate_window(series: DeviceSeries, tree: PhaseTree,
                    factors: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0),
                    max_readings: int = 200_000) -> float:
    """The averaging window (s) among `factors` x spacing whose deconvolution fits best."""
    n = min(len(series.t_ns), max_readings)
    sub = DeviceSeries(series.host, series.device, series.t_ns[:n], series.energy_j[:n],
                       series.power_w[:n], series.source, series.max_power_w)
    index = _segment_index(tree, series)[0]
    best, best_rss = series.spacing_s, np.inf
    for f in factors:
        w = f * sub.spacing_s
        a = index.overlap(sub.rel(sub.t_ns[1:]), w * 1e9)
        beta = nnls(a, sub.power_w[1:])[0]
        rss = float(np.sum((a @ beta - sub.power_w[1:]) ** 2))
        if rss < best_rss:
            best, best_rss = w, rss
    return best


def estimate_response(series: DeviceSeries, tree: PhaseTree, bin_s: float = 0.005,
                      max_lag_s: float | None = None, iters: int = 50,
                      max_readings: int = 200_000) -> SensorResponse:
    """The sensor's lag weights (bins of `bin_s` up to `max_lag_s`, default 3 reading spacings)
    that, with one power per phase name, fit the readings best: alternating non-negative least
    squares, starting from a boxcar of one spacing. Needs short phases of varied length and
    order; with long phases only, the readings say little about the weights."""
    n = min(len(series.t_ns), max_readings)
    index = _segment_index(tree, series)[0]
    t, p = series.rel(series.t_ns[1:n]), series.power_w[1:n]
    max_lag = max_lag_s if max_lag_s else 3 * series.spacing_s
    edges = np.arange(0.0, max_lag + bin_s / 2, bin_s)
    overlaps = np.stack([index.overlap(t - edges[k] * 1e9, bin_s * 1e9)
                         for k in range(len(edges) - 1)])  # bins x readings x names
    h = (edges[1:] <= series.spacing_s + 1e-12).astype(float)
    h /= h.sum()
    big = 1e3 * np.sqrt(len(p))  # weight of the sum-to-one row
    for _ in range(iters):
        beta = nnls(np.tensordot(h, overlaps, axes=1), p)[0]
        per_bin = overlaps @ beta  # bins x readings
        h_new = nnls(np.vstack([per_bin.T, np.full(len(h), big)]), np.append(p, big))[0]
        h_new /= h_new.sum()
        done = np.max(np.abs(h_new - h)) < 1e-5
        h = h_new
        if done:
            break
    keep = len(h) - int(np.argmax(h[::-1] > 0))  # drop all-zero bins at the long end
    return SensorResponse(tuple(map(float, edges[:keep + 1])),
                          tuple(map(float, h[:keep] / h[:keep].sum())), estimated=True)


def idle_power(series: DeviceSeries, start_ns: int, end_ns: int) -> float:
    """Mean power of a device over [start, end] (the idle baseline window)."""
    dt = (end_ns - start_ns) / 1e9
    if dt <= 0:
        return float("nan")
    e = series.energy_at(np.array([start_ns, end_ns]))
    return float((e[1] - e[0]) / dt)


def _coverage(series: DeviceSeries, tree: PhaseTree) -> tuple[pd.Series, float, float]:
    """Per phase name, the share of its (exclusive) time inside the trace's span; the share of
    all phases' time inside it; the seconds outside it."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    full = (tree.end - tree.start) / 1e9
    inside = (np.clip(tree.end, t0, t1) - np.clip(tree.start, t0, t1)) / 1e9
    ex_full, ex_in = _exclusive(tree, full), _exclusive(tree, inside)
    by = pd.DataFrame({"phase": tree.name, "full": ex_full, "inside": ex_in}).groupby("phase").sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = pd.Series(np.where(by["full"] > 0, by["inside"] / by["full"], 1.0), index=by.index)
    top = tree.parent < 0
    tot_full, tot_in = float(full[top].sum()), float(inside[top].sum())
    overall = tot_in / tot_full if tot_full > 0 else 1.0
    return frac.clip(0.0, 1.0), overall, tot_full - tot_in


# Plausible epoch range (years 2000-2100) in seconds, and the factor of each unit to it.
_EPOCH_S = (9.4e8, 4.2e9)
_UNITS = {"ns": 1e9, "us": 1e6, "ms": 1e3, "s": 1.0}


def time_unit(values: np.ndarray) -> str | None:
    """The unit in which `values` read as an epoch timestamp of 2000-2100 (None: neither)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return None
    mid = float(np.median(v))
    for unit, f in _UNITS.items():
        if _EPOCH_S[0] <= mid / f <= _EPOCH_S[1]:
            return unit
    return None


def check_time_units(trace: pd.DataFrame, events: pd.DataFrame, trace_name: str = "trace",
                     events_name: str = "events") -> None:
    """Every timestamp is epoch nanoseconds: a trace or events file stamped in s, ms or us (as
    other tools write them) is an error that says which unit it looks like."""
    cols = {trace_name + " column t_ns": trace["t_ns"].to_numpy()}
    if len(events):
        cols[events_name + " column start_ns"] = events["start_ns"].to_numpy()
    for where, values in cols.items():
        unit = time_unit(values)
        if unit is not None and unit != "ns":
            raise ContractError(
                f"{where}: timestamps look like epoch {'seconds' if unit == 's' else unit} "
                f"(median {np.median(values):.4g}); expected epoch nanoseconds (time.time_ns(), "
                f"~1.7e18): multiply by {int(1e9 / _UNITS[unit]):,}")


def attribute_energy(trace: pd.DataFrame, events: pd.DataFrame, method: str = "auto",
                     window_s: float | None = None, run_id: str | None = None,
                     idle_window: tuple[int, int] | None = None,
                     n_boot: int = 200,
                     response: SensorResponse | str | None = None,
                     strict: bool = False, cuda_to_nvml: list[int] | None = None,
                     where: str = "") -> pd.DataFrame:
    """trace x events -> phases table (contract columns plus host, window_ms, identified,
    covered_fraction, and, with an idle window, idle_power_w / static_j / dynamic_j).

    Phases' time outside the trace's span cannot be attributed: `covered_fraction` is the share
    of each phase's time inside it, and an uncovered share is a warning naming it (an error with
    `strict`). A GPU that no rank uses (`cuda_to_nvml`: CUDA ordinal -> NVML index, from
    meta.json) gets one `idle` phase. `where` names the inputs in messages.

    `response` shapes deconvolution's reading window: None, a boxcar (`window_s`, else
    estimated); a `SensorResponse`, the GPU sensor's weights (for GPUs; CPU and DRAM keep the
    boxcar); "estimate", weights estimated per device from the run (`estimate_response`). The
    responses used are in `out.attrs["sensor_responses"]` ({(host, device): SensorResponse})."""
    if isinstance(response, str) and response != "estimate":
        raise ValueError(f"response must be a SensorResponse, 'estimate' or None, got {response!r}")
    if method not in ("auto", "integrate", "deconvolve"):
        raise ValueError(f"method must be auto, integrate or deconvolve, got {method!r}")
    if run_id is None:
        ids = events["run_id"].astype(str).unique() if len(events) else []
        run_id = ids[0] if len(ids) == 1 else "run"
    check_time_units(trace, events)
    events = clamp_events(events, where=where or "events")
    pmap = _phase_map(events, cuda_to_nvml)
    frames = []
    used: dict[tuple[str, str], SensorResponse] = {}
    uncovered: list[str] = []
    series = device_series(trace)
    bar = _progress(len(series), sum(len(x.t_ns) for x in series), "attribute")
    for s in series:
        ev = _events_for(s, pmap, events)
        tree = phase_tree(ev, where=f"events of {s.host}/{s.device}")
        frac, overall, outside_s = _coverage(s, tree)
        # within a reading spacing of the trace's ends is what any sampler leaves (it starts
        # and stops around the command): only more is worth a warning
        if overall < 1.0 - 1e-9 and not outside_s <= 2 * np.nan_to_num(s.spacing_s):
            uncovered.append(f"{s.host}/{s.device} {1 - overall:.1%} ({outside_s:.3f} s)")
        m = method
        if m == "deconvolve" and s.power_w is None:
            warnings.warn(f"{s.device}: only an energy counter, integrating instead of deconvolving")
            m = "integrate"
        w = window_s
        if m == "auto":
            m = choose_method(s, tree, window_s or s.spacing_s)
        if m == "deconvolve":
            if response == "estimate":
                r = estimate_response(s, tree)
            elif isinstance(response, SensorResponse) and device_kind(s.device) == "gpu":
                r = response
            else:
                r = SensorResponse.boxcar(w or estimate_window(s, tree))
            df = deconvolve(s, tree, n_boot=n_boot, response=r)
            used[(s.host, s.device)] = r
        else:
            df = integrate(s, tree)
        df["covered_fraction"] = df["phase"].map(frac).where(df["phase"] != RESIDUAL)
        df.loc[df["phase"] == UNATTRIBUTED, "covered_fraction"] = 1.0
        df["device"], df["host"] = s.device, s.host
        df["device_kind"] = device_kind(s.device)
        df["source"] = s.source
        if idle_window is not None:
            p_idle = idle_power(s, *idle_window)
            df["idle_power_w"] = p_idle
            df["static_j"] = np.where(df["phase"] == RESIDUAL, 0.0, p_idle * df["time_s"])
            df["dynamic_j"] = df["energy_j"] - df["static_j"]
        frames.append(df)
        bar.update(1)
    bar.close()
    if not frames:
        raise ContractError(f"{where or 'trace'}: no GPU, CPU or DRAM power/energy readings to "
                            "attribute")
    if uncovered:
        msg = (f"{where + ': ' if where else ''}part of the phases' time lies outside the trace's "
               f"span and is not attributed (uncovered share: {', '.join(uncovered)}); "
               "column covered_fraction gives each phase's covered share")
        if strict:
            raise ContractError(msg)
        warnings.warn(msg, stacklevel=2)
    out = pd.concat(frames, ignore_index=True)
    out["run_id"] = run_id
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean_power_w"] = np.where(out["time_s"] > 0, out["energy_j"] / out["time_s"], np.nan)
    out = out[PHASES_COLUMNS + [c for c in out.columns if c not in PHASES_COLUMNS]]
    out.attrs["sensor_responses"] = used
    return out


WRAPPER_PHASES = ("idle_baseline", "process_startup", "process_exit")


def wrapper_events(events: pd.DataFrame, meta: RunMeta) -> pd.DataFrame:
    """Intervals `wattlife run` itself knows, per (host, rank): the idle baseline before the
    command, the command's start-up until its first marked phase (interpreter, imports, CUDA
    context) and its exit after its last one. Without them that time is `unattributed`."""
    rows = []
    ib = meta.idle_baseline or {}
    w0, w1 = meta.workload_start_ns, meta.workload_end_ns
    for (host, rank), g in events.groupby(["host", "rank"]):
        first, last = int(g["start_ns"].min()), int(g["end_ns"].max())
        base = {"run_id": g["run_id"].iloc[0], "host": host, "rank": rank, "step": np.nan,
                "items": np.nan}
        if "local_rank" in g.columns:
            base["local_rank"] = g["local_rank"].iloc[0]
        if ib and ib.get("end_ns", 0) > ib.get("start_ns", 0) and ib["end_ns"] <= first:
            rows.append({**base, "phase": "idle_baseline", "start_ns": ib["start_ns"],
                         "end_ns": min(ib["end_ns"], w0 or ib["end_ns"])})
        if w0 and w0 < first:
            rows.append({**base, "phase": "process_startup", "start_ns": max(w0, ib.get("end_ns", w0)),
                         "end_ns": first})
        if w1 and w1 > last:
            rows.append({**base, "phase": "process_exit", "start_ns": last, "end_ns": w1})
    return pd.DataFrame(rows)


def attribute_files(trace: str | Path, events: str | Path, out: str | Path, method: str = "auto",
                    window_ms: float | None = None, idle_split: bool = False,
                    n_boot: int = 200, sensor_response: str = "boxcar",
                    strict: bool = False) -> pd.DataFrame:
    """Read trace, events and meta.json beside the trace; write phases.csv (refused if it is
    one of the inputs). `strict`: phases' time outside the trace is an error, not a warning.

    `sensor_response`: "boxcar", "estimate" (the estimated weights are written beside the output
    as `<stem>.<host>.<device>.sensor_response.csv`, reusable on other runs), or such a CSV."""
    refuse_overwrite(out, [trace, events] + ([sensor_response] if sensor_response not in
                                              ("boxcar", "estimate") else []))
    response: SensorResponse | str | None = None
    if sensor_response == "estimate":
        response = "estimate"
    elif sensor_response != "boxcar":
        response = SensorResponse.from_csv(sensor_response)
    trace_df = read_trace(trace)
    events_df = read_events(events, lines=True)
    if not len(events_df):
        warnings.warn(f"{events}: no phases (header only): the whole trace is `unattributed` "
                      "(GPUs: `idle`)")
    meta_path = Path(trace).with_name(META_FILE)
    has_meta = meta_path.exists()
    meta = read_meta(meta_path) if has_meta else RunMeta()
    check_time_units(trace_df, events_df, str(trace), str(events))
    idle = None
    if idle_split:
        idle = meta.idle_window
        if idle is None:
            raise ValueError(f"--idle-split needs an idle baseline window in {meta_path} "
                             "(sampler.idle_baseline_s > 0)")
    window_s = window_ms / 1000.0 if window_ms else None  # None: estimated per device
    if has_meta and len(events_df):
        extra = wrapper_events(events_df, meta)
        if len(extra):
            events_df = pd.concat([events_df, extra.astype({"start_ns": "int64", "end_ns": "int64"})],
                                  ignore_index=True)
    df = attribute_energy(trace_df, events_df, method, window_s, meta.run_id, idle, n_boot,
                          response, strict=strict, cuda_to_nvml=gpu_mapping(meta),
                          where=f"{trace} x {events}")
    write_table(df, out, PHASES_COLUMNS)
    out = Path(out)
    for (host, device), r in df.attrs["sensor_responses"].items():
        if r.estimated:
            r.to_csv(out.with_name(f"{out.stem}.{host}.{device}.sensor_response.csv"))
    return df
