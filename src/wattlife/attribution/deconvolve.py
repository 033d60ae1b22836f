"""Deconvolution: one mean power per phase name when phases are shorter than the sensor's window.

Model reading i as sum_n P_n * A[i, n], A[i, n] the weight the reading's window (a
`SensorResponse`; a boxcar [t_i - w, t_i] by default) gives to phase name n's exclusive time
(`unattributed` is a name too), and solve least squares for one mean power per name, bounded
below by the device's floor (its lowest reading: a phase on a device that draws power never gets
0 J) and, where the trace has the device's `power_limit_w`, above by the larger of that limit and
the highest reading. A small ridge pulls names the readings barely see toward the device's mean
power (column `identifiability`: a name's share of the mean diagonal of A'A; below 0.01 its power
is mostly that prior, not a measurement). Such a name, or one whose bootstrap interval collapsed
onto a bound, has `identified` False and the interval of all that is physically possible: floor x
time to upper bound x time (the upper bound is the power limit's, else the highest reading).
Energy of a name is P_n x its total exclusive time; the difference to the measured total is
reported as the row `deconvolution_residual`, so the energy still adds up. The 95% interval comes
from a moving-block bootstrap of (reading, overlap) pairs: contiguous blocks of readings are
resampled with replacement, which keeps the readings' autocorrelation.

The estimators: `estimate_window` (the boxcar width that fits best), `estimate_response` (lag
weights by alternating least squares: powers given weights, weights given powers; weights >= 0,
summing to 1; needs phases of varied length and order, as interleaved short phases have), and
`choose_method` (deconvolve or integrate).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear, nnls

from ..contracts import RESIDUAL, UNATTRIBUTED
from ..errors import InputError
from .exact_sum import ExactSums
from .response import SensorResponse
from .segment_lookup import SegmentLookup, Segments
from .series import DeviceSeries
from .tree_spill import AnyTree, count_by_name, phase_count, tree_segments
from .windowed import kth_smallest

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
        result_: np.ndarray = lsq_linear(r, d, bounds=(lo, max_w), method="bvls").x
        return result_
    result: np.ndarray = nnls(r, d)[0]
    return result


def _normal_blocks(response: SensorResponse, segs: SegmentLookup, series: DeviceSeries,
                   n_blocks: int, chunk: int, windowed: bool = True
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A'A and A'P of each of `n_blocks` contiguous blocks of the readings after the first (the
    bootstrap's unit), built `chunk` readings at a time so that A never holds all readings at
    once; each chunk's rows of A from the segment index of its own time window
    (`Segments.window`, the same rows as the run's index bit for bit; `windowed` False: the
    run's index, all boundaries at once)."""
    k = len(segs.names)
    n = len(series.t_ns) - 1
    edges = np.linspace(0, n, n_blocks + 1).astype(int)
    g_blocks = np.zeros((n_blocks, k, k))
    h_blocks = np.zeros((n_blocks, k))
    reach = response.span_s * 1e9 + 1e3  # a reading's window, and a margin for rounding
    for b in range(n_blocks):
        for s in range(edges[b], edges[b + 1], chunk):
            e = min(s + chunk, edges[b + 1])
            t = series.rel(series.t_ns[1 + s:1 + e])  # the first reading has no window start
            index = segs.window(t[0] - reach, t[-1] + 1e3) if windowed else segs.index
            a = response.design(index, t)
            g_blocks[b] += a.T @ a
            h_blocks[b] += a.T @ series.power_w[1 + s:1 + e]  # type: ignore[index]
    return g_blocks, h_blocks


def _block_bootstrap(g_blocks: np.ndarray, h_blocks: np.ndarray, used: np.ndarray, mean_w: float,
                     cap: float, floor: float, n_boot: int, seed: int) -> np.ndarray:
    """Powers of `n_boot` replicates, blocks resampled with replacement (NaN: the replicate holds
    no reading of that name)."""
    n_blocks, k = h_blocks.shape
    rng = np.random.default_rng(seed)
    boots = np.full((n_boot, k), np.nan)
    for r in range(n_boot):
        wts = rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks)).astype(float)
        gb = np.tensordot(wts, g_blocks, axes=1)
        hb = np.tensordot(wts, h_blocks, axes=1)
        ok = used & (np.diag(gb) > 0)
        boots[r, ok] = _nnls_normal(gb[np.ix_(ok, ok)], hb[ok], mean_w, cap, floor)
    return boots


def _name_times(series: DeviceSeries, tree: AnyTree, segs: SegmentLookup
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per name: exclusive time (s) inside the trace's span (time outside every phase goes to
    `unattributed`) and number of intervals; summed a piece of the segments at a time
    (correctly rounded: the same bits however the pieces are cut)."""
    t0, t1 = series.t_ns[0], series.t_ns[-1]
    names = segs.names
    by_name, total = ExactSums(1), ExactSums(1)
    for bounds, code in segs.pieces():
        seg_dt = (np.clip(bounds[1:], t0, t1) - np.clip(bounds[:-1], t0, t1)) / 1e9
        named = code >= 0  # by name (its first index in names)
        by_name.add(code[named], seg_dt[named])
        total.add(None, seg_dt)
    time_by = by_name.totals(len(names))[0]
    span = (t1 - t0) / 1e9
    count_by = count_by_name(tree)
    times = np.array([float(time_by[names.index(nm)])
                      + (span - float(total.totals(1)[0][0]) if nm == UNATTRIBUTED else 0.0)
                      for nm in names])
    return times, np.array([int(count_by.get(nm, 0)) for nm in names])


def _fit_with_bootstrap(series: DeviceSeries, g_blocks: np.ndarray, h_blocks: np.ndarray,
                        n_boot: int, seed: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(powers, bootstrap replicates, names some reading saw, replicates that held each name,
    A'A) of all readings; a name no reading saw keeps the device's mean power, in the fit and in
    every replicate."""
    g_all, h_all = g_blocks.sum(0), h_blocks.sum(0)
    used = np.diag(g_all) > 0
    mean_w = series.p_mean(1)  # the readings after the first (the first has no window)
    beta = np.zeros(h_blocks.shape[1])
    floor, cap = series.floor_w, series.max_power_w
    beta[used] = _nnls_normal(g_all[np.ix_(used, used)], h_all[used], mean_w, cap, floor)
    boots = _block_bootstrap(g_blocks, h_blocks, used, mean_w, cap, floor, n_boot, seed)
    # a name no reading saw keeps the device's mean power; the bootstrap says nothing about it
    beta[~used] = np.clip(mean_w, floor, cap)
    seen_boot = np.isfinite(boots).sum(axis=0)
    boots[:, seen_boot == 0] = beta[seen_boot == 0]
    return beta, boots, used, seen_boot, g_all


def _name_intervals(series: DeviceSeries, g_all: np.ndarray, beta: np.ndarray,
                    boots: np.ndarray, used: np.ndarray, seen_boot: np.ndarray, n_boot: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, identifiability, identified) of each name's power: the bootstrap's 95 % where
    the name is identified, else the floor to the device's upper bound."""
    k = len(beta)
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
    floor, upper = series.floor_w, series.upper_w
    constant = not floor < upper
    collapsed = ((hi - lo) <= 1e-6 * np.maximum(np.abs(hi), 1.0)) & (not constant)
    # a name absent from most replicates (one long phase in one block) is barely resampled
    identified = used & (seen >= MIN_IDENTIFIABILITY) & ~collapsed & (seen_boot >= n_boot / 2)
    lo = np.where(identified, lo, floor)
    hi = np.where(identified, hi, np.maximum(upper, beta) if np.isfinite(upper) else np.inf)
    return lo, hi, seen, identified


def deconvolve(series: DeviceSeries, tree: AnyTree, window_s: float | None = None,
               n_boot: int = 200, n_blocks: int = 100, seed: int = 0,
               chunk: int = 500_000, response: SensorResponse | None = None,
               segs: SegmentLookup | None = None, windowed: bool = True) -> pd.DataFrame:
    """Mean power per phase name by NNLS over all readings (see the module docstring); the
    readings' window is `response`, else a boxcar of `window_s`, else of the reading spacing.
    `segs`: `tree_segments(tree, series)` when the caller has it. `chunk` readings at a time,
    each with the segment index of its time window only (`windowed`; False: the run's index,
    the same numbers bit for bit, its memory growing with the run)."""
    if series.power_w is None:
        raise InputError(f"{series.device}: deconvolution needs power readings, the trace has only "
                         "an energy counter")
    segs = segs or tree_segments(tree, series)
    names = segs.names
    if response is None:
        response = SensorResponse.boxcar(window_s if window_s else series.spacing_s)
    w_ns = response.span_s * 1e9
    n_p = len(series.power_w) - 1  # the first reading has no defined window start
    n_blocks = max(1, min(n_blocks, n_p // 10))
    g_blocks, h_blocks = _normal_blocks(response, segs, series, n_blocks, chunk, windowed)
    beta, boots, used, seen_boot, g_all = _fit_with_bootstrap(series, g_blocks, h_blocks,
                                                              n_boot, seed)
    lo, hi, seen, identified = _name_intervals(series, g_all, beta, boots, used, seen_boot,
                                               n_boot)
    ts, counts = _name_times(series, tree, segs)
    common = {"method": "deconvolve", "window_ms": w_ns / 1e6,
              "sensor_response": response.describe()}
    df = pd.DataFrame({"phase": names, "energy_j": beta * ts, "energy_lo_j": lo * ts,
                       "energy_hi_j": hi * ts, "time_s": ts, "count": counts, **common,
                       "identifiability": seen.astype(float), "identified": identified})
    df = df[["phase", "energy_j", "energy_lo_j", "energy_hi_j", "time_s", "count", "method",
             "window_ms", "identifiability", "identified", "sensor_response"]]
    total = float(series.energy_j[-1] - series.energy_j[0])
    resid = total - df["energy_j"].sum()
    return pd.concat([df, pd.DataFrame([{"phase": RESIDUAL, "energy_j": resid,
                                         "energy_lo_j": resid, "energy_hi_j": resid,
                                         "time_s": 0.0, "count": 0, **common,
                                         "identified": True}])],
                     ignore_index=True)


def estimate_window(series: DeviceSeries, tree: AnyTree,
                    factors: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0),
                    max_readings: int = 200_000, segs: SegmentLookup | None = None) -> float:
    """The averaging window (s) among `factors` x spacing whose deconvolution fits best
    (`segs`: `tree_segments(tree, series)` when the caller has it)."""
    if series.power_w is None:
        raise InputError(f"{series.device}: estimating a window needs power readings")
    n = min(len(series.t_ns), max_readings)
    sub = DeviceSeries(series.host, series.device, series.t_ns[:n], series.energy_j[:n],
                       series.power_w[:n], series.source, series.max_power_w)
    segs = segs or tree_segments(tree, series)
    best, best_rss = series.spacing_s, np.inf
    windows = [f * sub.spacing_s for f in factors]
    t = sub.rel(sub.t_ns[1:])  # the first readings only: the index of their time window
    index = segs.window(t[0] - max(windows) * 1e9 - 1e3, t[-1] + 1e3) if len(t) else segs.index
    for w, a in zip(windows, index.overlaps(t, [w * 1e9 for w in windows]), strict=True):
        beta = nnls(a, series.power_w[1:n])[0]
        rss = float(np.sum((a @ beta - series.power_w[1:n]) ** 2))
        if rss < best_rss:
            best, best_rss = w, rss
    return best


def estimate_response(series: DeviceSeries, tree: AnyTree, bin_s: float = 0.005,
                      max_lag_s: float | None = None, iters: int = 50,
                      max_readings: int = 200_000, segs: SegmentLookup | None = None
                      ) -> SensorResponse:
    """The sensor's lag weights (bins of `bin_s` up to `max_lag_s`, default 3 reading spacings)
    that, with one power per phase name, fit the readings best: alternating non-negative least
    squares, starting from a boxcar of one spacing. Needs short phases of varied length and
    order; with long phases only, the readings say little about the weights (`segs`:
    `tree_segments(tree, series)` when the caller has it)."""
    if series.power_w is None:
        raise InputError(f"{series.device}: estimating a response needs power readings")
    n = min(len(series.t_ns), max_readings)
    t, p = series.rel(series.t_ns[1:n]), series.power_w[1:n]
    max_lag = max_lag_s if max_lag_s else 3 * series.spacing_s
    edges = np.arange(0.0, max_lag + bin_s / 2, bin_s)
    segs = segs or tree_segments(tree, series)  # the first readings' time window only
    index = (segs.window(t[0] - (edges[-1] + bin_s) * 1e9 - 1e3, t[-1] + 1e3) if len(t)
             else segs.index)
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


def choose_method(series: DeviceSeries, tree: AnyTree, window_s: float,
                  segs: SegmentLookup | None = None) -> str:
    """`deconvolve` when the typical innermost segment is shorter than two sensor windows:
    the median of the segments' positive lengths (`_median_segment_s`: segments on disk by an
    exact selection over their pieces, never all lengths at once; `segs`:
    `tree_segments(tree, series)` when the caller has it)."""
    if series.power_w is None or phase_count(tree) == 0:
        return "integrate"
    median_s = _median_segment_s(segs or tree_segments(tree, series))
    if median_s is None:
        return "integrate"
    period = max(series.spacing_s, window_s)
    return "deconvolve" if median_s < 2 * period else "integrate"


def _median_segment_s(segs: SegmentLookup) -> float | None:
    """np.median of the segments' positive lengths (s), None where there is none: of the
    whole array where the segments are held, else selected exactly over the pieces (the same
    value: the middle one or the mean of the middle two, each length in ns / 1e9)."""
    if isinstance(segs, Segments):
        held = np.diff(segs.bounds) / 1e9
        held = held[held > 0]
        return float(np.median(held)) if len(held) else None

    def lengths() -> Iterator[np.ndarray]:
        for bounds, _ in segs.pieces():
            d = np.diff(bounds)
            yield d[d > 0]

    m = sum(len(d) for d in lengths())
    if m == 0:
        return None
    mid = kth_smallest(lengths, [m // 2] if m % 2 else [m // 2 - 1, m // 2])
    return sum(x / 1e9 for x in mid) / len(mid)  # np.median's mean of the middle ones
