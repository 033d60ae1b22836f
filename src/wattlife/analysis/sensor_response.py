"""NVML's power sensor characterised from readings around known loads (issue 46): the spacing of
the readings, the update periods of polled values, a boxcar fit of the averaging window around
power steps, and how much of a step's energy the integrated readings put across it. Tables in,
tables out; no GPU, no NVML (`benchmarks/nvml_sensor.py` measures;
tests/analysis/test_nvml_sensor.py checks these on synthetic data).

Conventions: times are epoch ns (int64) on the host clock, as the trace contract; a reading
stamped t averages the true power over [t - d - w, t - d] in the boxcar model (d: delay, w:
window width); a step's `frac` is the share of the new level a reading shows (0 before, 1 after).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..attribution.settle import SensorSettle

LEVEL_PRE_MS = (-500.0, -100.0)  # readings that average only the old level (relative to a step)
LEVEL_POST_MS = (300.0, 700.0)  # readings that average only the new level
FIT_SPAN_MS = (-100.0, 250.0)  # readings used in the fit
W_GRID_MS = np.arange(0.5, 150.01, 0.5)
D_GRID_MS = np.arange(-20.0, 80.01, 0.5)


def _stats(x: np.ndarray, prefix: str) -> dict[str, Any]:
    x = np.asarray(x, float)
    if len(x) == 0:
        return {f"{prefix}_median_ms": np.nan, f"{prefix}_p5_ms": np.nan,
                f"{prefix}_p95_ms": np.nan, f"{prefix}_mean_ms": np.nan}
    return {f"{prefix}_median_ms": float(np.median(x)),
            f"{prefix}_p5_ms": float(np.percentile(x, 5)),
            f"{prefix}_p95_ms": float(np.percentile(x, 95)), f"{prefix}_mean_ms": float(np.mean(x))}


def spacing_stats(t_ns: np.ndarray) -> dict[str, Any]:
    """Deltas between consecutive distinct timestamps (ms): median, p5, p95, mean, n readings."""
    t = np.unique(np.asarray(t_ns, np.int64))
    return {"n": int(len(t)), **_stats(np.diff(t) / 1e6, "spacing")}


def update_stats(t_ns: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """A value polled faster than it updates: poll spacing, the time between changes of value
    (the update period, known to one poll spacing) and the size of the changes (a counter's
    step: median and smallest non-zero change)."""
    t = np.asarray(t_ns, np.int64)
    v = np.asarray(values, float)
    out = {"n": int(len(t)), **_stats(np.diff(t) / 1e6, "poll")}
    if len(v) < 2:
        return {**out, "changes": 0, **_stats(np.array([]), "update"), "step_median": np.nan,
                "step_min": np.nan}
    dv = np.diff(v)
    ch = np.flatnonzero(dv != 0) + 1
    steps = np.abs(dv[dv != 0])
    return {**out, "changes": int(len(ch)), **_stats(np.diff(t[ch]) / 1e6, "update"),
            "step_median": float(np.median(steps)) if len(steps) else np.nan,
            "step_min": float(np.min(steps)) if len(steps) else np.nan}


def step_points(t_ns: np.ndarray, v: np.ndarray, step_ns: int, up: bool
                ) -> tuple[np.ndarray, np.ndarray, float, float] | None:
    """Readings around one step as (tau_ms, frac, old level, new level); None when a level has
    fewer than 2 readings or the two levels are less than 10 W apart."""
    tau = (np.asarray(t_ns, np.int64) - int(step_ns)) / 1e6
    v = np.asarray(v, float)
    pre = v[(tau >= LEVEL_PRE_MS[0]) & (tau <= LEVEL_PRE_MS[1])]
    post = v[(tau >= LEVEL_POST_MS[0]) & (tau <= LEVEL_POST_MS[1])]
    if len(pre) < 2 or len(post) < 2:
        return None
    old, new = float(np.median(pre)), float(np.median(post))
    if abs(new - old) < 10.0 or (new > old) != up:
        return None
    m = (tau >= FIT_SPAN_MS[0]) & (tau <= FIT_SPAN_MS[1])
    return tau[m], (v[m] - old) / (new - old), old, new


def boxcar_frac(tau_ms: np.ndarray, w_ms: float, d_ms: float) -> np.ndarray:
    """Share of the new level a boxcar of width w and delay d shows at tau after the step."""
    return np.clip((np.asarray(tau_ms, float) - d_ms) / w_ms, 0.0, 1.0)


def _grid_fit(tau: np.ndarray, f: np.ndarray, ws: np.ndarray, ds: np.ndarray
              ) -> tuple[float, float, float]:
    best = (np.inf, np.nan, np.nan)
    for w in ws:
        pred = np.clip((tau[None, :] - ds[:, None]) / w, 0.0, 1.0)
        rss = ((pred - f[None, :]) ** 2).sum(axis=1)
        k = int(np.argmin(rss))
        if rss[k] < best[0] - 1e-12:
            best = (float(rss[k]), float(w), float(ds[k]))
    return best


def fit_boxcar(tau_ms: np.ndarray, frac: np.ndarray) -> dict[str, Any]:
    """Least squares of the boxcar model to the pooled step readings: over a 2 ms grid of (w, d),
    then a 0.25 ms grid around the best."""
    tau = np.asarray(tau_ms, float)
    f = np.asarray(frac, float)
    if len(tau) < 4:
        return {"window_ms": np.nan, "delay_ms": np.nan, "rms": np.nan, "n_points": int(len(tau))}
    _, w0, d0 = _grid_fit(tau, f, W_GRID_MS[3::4], D_GRID_MS[::4])
    ws = np.arange(max(0.25, w0 - 4.0), w0 + 4.01, 0.25)
    rss, w, d = _grid_fit(tau, f, ws, np.arange(d0 - 4.0, d0 + 4.01, 0.25))
    return {"window_ms": w, "delay_ms": d, "rms": float(np.sqrt(rss / len(tau))),
            "n_points": int(len(tau))}


def isotonic(y: np.ndarray) -> np.ndarray:
    """Non-decreasing least-squares fit (pool adjacent violators)."""
    vals: list[float] = []
    wts: list[float] = []
    for x in np.asarray(y, float):
        vals.append(x)
        wts.append(1.0)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            w = wts[-2] + wts[-1]
            v = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / w
            vals[-2:] = [v]
            wts[-2:] = [w]
    return np.repeat(vals, np.asarray(wts, int))


def rise_times(tau_ms: np.ndarray, frac: np.ndarray) -> dict[str, Any]:
    """10 % and 90 % crossings of the monotone fit of frac against tau, and the 10-90 % rise."""
    o = np.argsort(tau_ms)
    t, f = np.asarray(tau_ms, float)[o], isotonic(np.asarray(frac, float)[o])
    if len(t) < 4 or f[-1] < 0.9 or f[0] > 0.1:
        return {"t10_ms": np.nan, "t90_ms": np.nan, "rise_10_90_ms": np.nan}
    t10 = float(t[np.argmax(f >= 0.1)])
    t90 = float(t[np.argmax(f >= 0.9)])
    return {"t10_ms": t10, "t90_ms": t90, "rise_10_90_ms": t90 - t10}


def window_table(t_ns: np.ndarray, v: np.ndarray, steps: list[tuple[int, int]],
                 spacing_ms: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The boxcar fit and rise time for the up steps (load starts), down steps (load ends) and
    both, from load intervals `steps` [(start_ns, end_ns)]; and the pooled points."""
    pts = []
    for k, (s, e) in enumerate(steps):
        for direction, at in (("up", s), ("down", e)):
            got = step_points(t_ns, v, at, direction == "up")
            if got is not None:
                tau, f, old, new = got
                pts.append(pd.DataFrame({"step": k, "direction": direction, "tau_ms": tau,
                                         "frac": f, "old_w": old, "new_w": new}))
    points = pd.concat(pts, ignore_index=True) if pts else pd.DataFrame(
        columns=["step", "direction", "tau_ms", "frac", "old_w", "new_w"])
    rows = []
    for which in ("up", "down", "both"):
        p = points if which == "both" else points[points["direction"] == which]
        fit = fit_boxcar(p["tau_ms"].to_numpy(float), p["frac"].to_numpy(float))
        rows.append({"direction": which, "steps": int(p["step"].nunique()) if len(p) else 0,
                     **fit, **rise_times(p["tau_ms"].to_numpy(float), p["frac"].to_numpy(float)),
                     "spacing_ms": spacing_ms,
                     "window_over_spacing": fit["window_ms"] / spacing_ms,
                     "idle_level_w": float(np.minimum(p["old_w"], p["new_w"]).median())
                     if len(p) else np.nan,
                     "load_level_w": float(np.maximum(p["old_w"], p["new_w"]).median())
                     if len(p) else np.nan})
    return pd.DataFrame(rows), points


def spacing_table(power: pd.DataFrame, polls: list[pd.DataFrame]) -> pd.DataFrame:
    rows = [{"quantity": "sample_buffer", "source": str(power["source"].mode().iat[0])
             if len(power) else "", **spacing_stats(power["t_ns"].to_numpy())}]
    for df in polls:
        if not len(df):
            continue
        st = update_stats(df["t_ns"].to_numpy(), df["value"].to_numpy())
        stamps = df["stamp_us"].to_numpy()
        stamp = spacing_stats(stamps[stamps > 0] * 1000) if (stamps > 0).any() else {}
        rows.append({"quantity": df["poller"].iat[0], **st,
                     "call_median_ms": float(((df["t1_ns"] - df["t0_ns"]) / 1e6).median()),
                     **{f"driver_stamp_{k}": v for k, v in stamp.items()}})
    return pd.DataFrame(rows)


def displaced_ms(points: pd.DataFrame, spacing_ms: float) -> pd.DataFrame:
    """Per step direction (and the larger of the two, `max`): how much of a step's energy, in
    ms x the step, the integrated readings place on the wrong side of it.

    `integrate` spreads a reading over the spacing before it, so a reading at tau after the step
    stands for tau - spacing/2 on average; the displaced time is then the area between a perfect
    step and the readings' monotone step response f: integral of f before spacing/2 plus of
    1 - f after it (f 0 before and 1 after the points' span). What `attribution.settle` widens a
    boundary's interval by, per watt of the step."""
    rows = []
    for which in ("up", "down"):
        p = points[points["direction"] == which].sort_values("tau_ms")
        if len(p) < 4:
            rows.append({"direction": which, "displaced_ms": np.nan, "points": int(len(p))})
            continue
        grid = np.arange(FIT_SPAN_MS[0], FIT_SPAN_MS[1] + 0.05, 0.1)
        f = np.interp(grid, p["tau_ms"].to_numpy(float), isotonic(p["frac"].to_numpy(float)),
                      left=0.0, right=1.0)
        after = grid >= spacing_ms / 2.0
        area = np.trapezoid(f[~after], grid[~after]) + np.trapezoid(1.0 - f[after], grid[after])
        rows.append({"direction": which, "displaced_ms": float(area), "points": int(len(p))})
    out = pd.DataFrame(rows)
    top = {"direction": "max", "displaced_ms": float(out["displaced_ms"].max()),
           "points": int(out["points"].sum())}
    return pd.concat([out, pd.DataFrame([top])], ignore_index=True)


def study_settle(window: pd.DataFrame, points: pd.DataFrame, model: str, basis: str
                 ) -> SensorSettle:
    """A GPU model's settling from a study's window table and step points: the larger
    direction's displaced time (`displaced_ms`), reached within the widest fitted window plus a
    reading spacing (rounded to 0.1 ms, as `attribution.settle.KNOWN` records them)."""
    spacing = float(window.set_index("direction").loc["both", "spacing_ms"])
    disp = displaced_ms(points, spacing).set_index("direction").loc["max", "displaced_ms"]
    reach = float(window["window_ms"].max()) + spacing
    return SensorSettle(model, round(float(disp), 1), round(reach, 1), basis)
