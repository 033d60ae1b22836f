"""NVML's power sensor characterised from readings around known loads (issue 46): the spacing of
the readings, the update periods of polled values, a boxcar fit of the averaging window around
power steps, and how much of a step's energy the integrated readings put across it. Tables in,
tables out; no GPU, no NVML (`benchmarks/nvml_sensor.py` measures;
tests/analysis/test_nvml_sensor.py checks these on synthetic data).

Conventions: times are epoch ns (int64) on the host clock, as the trace contract; a reading
stamped t averages the true power over [t - d - w, t - d] in the boxcar model (d: delay, w:
window width); a step's `frac` is the share of the new level a reading shows (0 before, 1 after).

Energy against phase length (`length_block`, `length_rows`, `analyse_run`): the study's load
phases of known length between idle gaps, each one's energy from the integrated readings, the
energy counter and the suite's own attribution, against a truth (the load's power over long
phases' middles x the length); tests/results/test_h100_reference.py checks them on the committed
readings.
"""

from __future__ import annotations

import dataclasses
import traceback
import warnings
from typing import Any

import numpy as np
import pandas as pd

from ..attribution import attribute_energy, device_series
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


def interp_energy(t_ns: np.ndarray, e_j: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
    """Cumulative energy at `at_ns`, linear between readings (relative times: no float64 loss)."""
    t = np.asarray(t_ns, np.int64)
    base = t[0] if len(t) else 0
    result: np.ndarray = np.interp((np.asarray(at_ns, np.int64) - base).astype(float),
                                   (t - base).astype(float), np.asarray(e_j, float))
    return result


def block_events(loads: pd.DataFrame, start_ns: int, end_ns: int, host: str,
                 per_instance: bool, run_id: str = "nvml-sensor") -> pd.DataFrame:
    """Events (contract columns) of one block: each load phase (named by its `name`, or `load`),
    and `gap` over the time between them, so the block [start, end] is covered."""
    ld = loads.sort_values("start_ns")
    rows = []
    cursor = int(start_ns)
    for r in ld.itertuples():
        if int(r.start_ns) > cursor:
            rows.append(("gap", cursor, int(r.start_ns)))
        rows.append((str(r.name) if per_instance else "load", int(r.start_ns), int(r.end_ns)))
        cursor = int(r.end_ns)
    if int(end_ns) > cursor:
        rows.append(("gap", cursor, int(end_ns)))
    df = pd.DataFrame(rows, columns=["phase", "start_ns", "end_ns"])
    return df.assign(run_id=run_id, host=host, rank=0, step=np.nan, items=np.nan, local_rank=0)[
        ["run_id", "host", "rank", "phase", "start_ns", "end_ns", "step", "items", "local_rank"]]


def truth_power(series_t: np.ndarray, series_e: np.ndarray, counter_t: np.ndarray,
                counter_e: np.ndarray, intervals: list[tuple[int, int]], trim_ns: int
                ) -> tuple[float, float, float]:
    """Mean power of the load over the middles of long intervals (trimmed at both ends), from the
    integrated readings and from the energy counter; and the seconds used."""
    e_r = e_c = secs = 0.0
    for s, e in intervals:
        a, b = s + trim_ns, e - trim_ns
        if b <= a:
            continue
        er = interp_energy(series_t, series_e, np.array([a, b]))
        ec = interp_energy(counter_t, counter_e, np.array([a, b])) if len(counter_t) > 1 else \
            np.array([np.nan, np.nan])
        e_r += er[1] - er[0]
        e_c += ec[1] - ec[0]
        secs += (b - a) / 1e9
    if secs <= 0:
        return np.nan, np.nan, 0.0
    return e_r / secs, e_c / secs, secs


def _pct(x: Any, truth: Any) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        result: np.ndarray = 100.0 * (np.asarray(x, float) / np.asarray(truth, float) - 1.0)
        return result


SUITE_COLUMNS = ["phase", "device", "energy_j", "energy_lo_j", "energy_hi_j", "time_s", "method",
                 "window_ms", "identified"]


def _attribute(trace: pd.DataFrame, events: pd.DataFrame, n_boot: int, method: str = "auto",
               settles: dict[str, SensorSettle] | None = None
               ) -> tuple[pd.DataFrame, list[str]]:
    """The suite's phases rows of gpu0 and its warnings; on failure no rows and the error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ph = attribute_energy(trace, events, method=method, n_boot=n_boot, settles=settles)
        except Exception as exc:  # noqa: BLE001 - the other estimates still count
            return pd.DataFrame(columns=SUITE_COLUMNS), [f"{method}: {type(exc).__name__}: {exc}"]
    return ph[ph["device"] == "gpu0"], [str(w.message)[:300] for w in caught]


def _phase_frame(loads: pd.DataFrame, st: np.ndarray, ee: np.ndarray, counter_t: np.ndarray,
                 counter_e: np.ndarray, p_truth_w: float, p_truth_counter_w: float
                 ) -> pd.DataFrame:
    """Per load phase: measured length, truth (power x length), readings integrated over it and
    the counter's difference over it."""
    s_ns, e_ns = loads["start_ns"].to_numpy(np.int64), loads["end_ns"].to_numpy(np.int64)
    length_s = (e_ns - s_ns) / 1e9
    ph = pd.DataFrame({"L_ms": loads["L_ms"].to_numpy(), "name": loads["name"].to_numpy(),
                       "length_ms": length_s * 1e3, "truth_j": p_truth_w * length_s,
                       "truth_counter_j": p_truth_counter_w * length_s,
                       "integrated_j": interp_energy(st, ee, e_ns) - interp_energy(st, ee, s_ns)})
    ph["counter_j"] = (interp_energy(counter_t, counter_e, e_ns) -
                       interp_energy(counter_t, counter_e, s_ns)) if len(counter_t) > 1 else np.nan
    return ph


def _aggregated(row: dict[str, Any], key: str, tab: pd.DataFrame, t_sum: float,
                c_sum: float) -> None:
    """The `load` row of an attribution with one name for all phases, against the truth."""
    if "load" not in set(tab["phase"]):
        return
    r = tab.set_index("phase").loc["load"]
    row.update({f"{key}_method": str(r["method"]),
                f"{key}_err_pct": float(_pct(r["energy_j"], t_sum)),
                f"{key}_err_vs_counter_pct": float(_pct(r["energy_j"], c_sum)),
                f"{key}_covers_truth": bool(r["energy_lo_j"] <= t_sum <= r["energy_hi_j"]),
                f"{key}_halfwidth_pct": float(50.0 * (r["energy_hi_j"] - r["energy_lo_j"])
                                              / t_sum)})


def _suite_columns(ph: pd.DataFrame, inst: pd.DataFrame, prefix: str = "suite") -> None:
    """The per-instance attribution's energy, interval (and method) of each load phase."""
    got = inst.set_index("phase").reindex(ph["name"])
    for col in ("j", "lo_j", "hi_j"):
        ph[f"{prefix}_{col}"] = got[f"energy_{col}" if col != "j" else "energy_j"].to_numpy(float)
    if prefix == "suite":
        ph["suite_method"] = got["method"].to_numpy()
        ph["identified"] = got["identified"].to_numpy() if "identified" in got else np.nan


def _coverage(ph: pd.DataFrame, prefix: str, of: str = "truth_j") -> pd.Series:
    return (ph[f"{prefix}_lo_j"] <= ph[of]) & (ph[of] <= ph[f"{prefix}_hi_j"])


def _length_row(loads: pd.DataFrame, ph: pd.DataFrame, inst: pd.DataFrame, block: dict[str, Any],
                have_c: bool) -> dict[str, Any]:
    """One L's row: lengths, block conservation, each estimate's error against the truth and the
    per-instance intervals' coverage of it."""
    t = ph["truth_j"].to_numpy(float)
    err = {"suite": _pct(ph["suite_j"], t), "integrated": _pct(ph["integrated_j"], t),
           "counter": _pct(ph["counter_j"], ph["truth_counter_j"]),
           "suite_vs_counter": _pct(ph["suite_j"], ph["counter_j"]),
           "integrated_vs_counter": _pct(ph["integrated_j"], ph["counter_j"])}
    row = {"L_ms": float(loads["L_ms"].iloc[0]), "phases": int(len(ph)),
           "length_ms_mean": float(ph["length_ms"].mean()),
           "length_ms_sd": float(ph["length_ms"].std(ddof=0)),
           "load_s": float(ph["length_ms"].sum() / 1e3), **block,
           "block_err_pct": float(_pct(block["block_readings_j"], block["block_counter_j"])),
           "suite_method": ";".join(sorted(set(ph["suite_method"].dropna().astype(str)))),
           "suite_window_ms": float(inst["window_ms"].dropna().iloc[0])
           if inst["window_ms"].notna().any() else np.nan}
    for k, e in err.items():
        row[f"{k}_err_mean_pct"] = float(np.nanmean(e)) if np.isfinite(e).any() else np.nan
        row[f"{k}_err_sd_pct"] = float(np.nanstd(e)) if np.isfinite(e).any() else np.nan
    half = 50.0 * (ph["suite_hi_j"] - ph["suite_lo_j"]) / ph["truth_j"]
    row.update({"coverage_truth": float(_coverage(ph, "suite").mean()),
                "coverage_counter": float(_coverage(ph, "suite", "counter_j").mean())
                if have_c else np.nan, "identified_share": float(
                    pd.to_numeric(ph["identified"], errors="coerce").mean()),
                "interval_halfwidth_median_pct": float(half.median())})
    if "settle_j" in ph:
        row.update({"coverage_truth_settle": float(_coverage(ph, "settle").mean()),
                    "settle_halfwidth_median_pct": float(
                        (50.0 * (ph["settle_hi_j"] - ph["settle_lo_j"]) / ph["truth_j"]).median())})
    return row


def length_block(trace: pd.DataFrame, loads: pd.DataFrame, counter_t: np.ndarray,
                 counter_e: np.ndarray, p_truth_w: float, p_truth_counter_w: float,
                 n_boot: int = 200, settle: SensorSettle | None = None
                 ) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame, list[str]]:
    """One phase length's block: (table row, per-phase rows, the suite's phases rows, warnings).

    `trace`: gpu0's rows of the block's span; `loads`: its load phases (name, L_ms, start_ns,
    end_ns, block_start_ns, block_end_ns); counter: cumulative J at host ns. The suite's
    attribution runs three times: each phase its own name (method auto: the per-phase rows and
    their intervals), all phases one name `load` (auto), and that with deconvolution; with
    `settle`, a fourth: each phase its own name, intervals holding the sensor's settling
    (`settle_*` columns, `coverage_truth_settle`)."""
    bs, be = int(loads["block_start_ns"].iloc[0]), int(loads["block_end_ns"].iloc[0])
    series = [s for s in device_series(trace) if s.device == "gpu0"][0]
    host = str(trace["host"].iloc[0])
    st, ee = series.t_ns, series.energy_j
    have_c = len(counter_t) > 1
    span = np.array([st[0], st[-1]])  # block level, over the readings' own span inside the block
    block = {"block_s": (span[1] - span[0]) / 1e9,
             "block_readings_j": float(np.diff(interp_energy(st, ee, span))[0]),
             "block_counter_j": float(np.diff(interp_energy(counter_t, counter_e, span))[0])
             if have_c else np.nan}
    ph = _phase_frame(loads, st, ee, counter_t, counter_e, p_truth_w, p_truth_counter_w)
    per_instance = block_events(loads, bs, be, host, True)
    inst, warns = _attribute(trace, per_instance, n_boot)
    agg, warn2 = _attribute(trace, block_events(loads, bs, be, host, False), n_boot)
    dec, warn3 = _attribute(trace, block_events(loads, bs, be, host, False), n_boot, "deconvolve")
    _suite_columns(ph, inst)
    frames = [inst.assign(naming="per_instance"), agg.assign(naming="aggregated"),
              dec.assign(naming="aggregated_deconvolve")]
    if settle is not None:
        held, warn4 = _attribute(trace, per_instance, n_boot, settles={"gpu0": settle})
        _suite_columns(ph, held, "settle")
        frames.append(held.assign(naming="per_instance_settle"))
        warns = warns + warn4
    row = _length_row(loads, ph, inst, {**block, "truth_power_w": p_truth_w}, have_c)
    t_sum = float(ph["truth_j"].sum())
    for key, tab in (("agg", agg), ("agg_deconv", dec)):
        _aggregated(row, key, tab, t_sum, float(ph["counter_j"].sum()) if have_c else np.nan)
    suite_rows = pd.concat(frames, ignore_index=True).assign(L_ms=row["L_ms"])
    return row, ph, suite_rows, warns + warn2 + warn3


def length_rows(g: pd.DataFrame, loads: pd.DataFrame, ct: np.ndarray, ce: np.ndarray,
                summary: dict[str, Any], n_boot: int, long_ms: float,
                settle: SensorSettle | None = None
                ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The phase-length table (one row per L), the per-phase rows and the suite's phases rows,
    from gpu0's trace rows `g`, every load phase and the counter (J at host ns). The truth's
    power (into summary["truth"]) comes from the loads of >= `long_ms`; a failing L is recorded
    in summary["errors"]. With `settle`, each L's intervals are also given holding it."""
    s = [x for x in device_series(g) if x.device == "gpu0"][0]
    long = loads[loads["L_ms"] >= long_ms]
    p_r, p_c, secs = truth_power(s.t_ns, s.energy_j, ct, ce, list(zip(
        long["start_ns"], long["end_ns"], strict=True)), 200_000_000)
    summary["truth"] = {"power_readings_w": p_r, "power_counter_w": p_c, "seconds": secs,
                        "from": f"middles (200 ms trimmed) of every load phase >= {long_ms:g} ms"}
    rows, phases, suite = [], [], []
    upd = summary.get("counter_update_ms", float("nan"))
    for L, blk in loads[loads["part"] == "lengths"].groupby("L_ms"):
        try:
            bs, be = int(blk["block_start_ns"].iat[0]), int(blk["block_end_ns"].iat[0])
            tr = g[(g["t_ns"] >= bs) & (g["t_ns"] <= be)]
            row, ph, srows, warns = length_block(tr, blk, ct, ce, p_r, p_c, n_boot, settle)
            row.update(counter_update_ms=upd, counter_ok=bool(L >= 10 * upd))
            rows.append(row)
            phases.append(ph)
            suite.append(srows)
            if warns:
                summary.setdefault("attribution_warnings", {})[f"{L:g}"] = warns[:5]
        except Exception:  # noqa: BLE001 - the other lengths still count
            summary.setdefault("errors", {})[f"lengths_{L:g}ms"] = traceback.format_exc()[-2000:]
    return (pd.DataFrame(rows), pd.concat(phases) if phases else pd.DataFrame(),
            pd.concat(suite) if suite else pd.DataFrame())


def analyse_run(g: pd.DataFrame, loads: pd.DataFrame, polls: dict[str, pd.DataFrame],
                summary: dict[str, Any], n_boot: int, long_ms: float
                ) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """The three tables from gpu0's trace rows `g`, the load phases and the polls (the energy
    counter's in mJ), and the raw frames to keep ({file name: frame}); a part's failure is
    recorded in summary["errors"] and its table left out. The sensor's settling measured at the
    window steps (`study_settle`, into summary["settle"]) widens the lengths' intervals a second
    time (`coverage_truth_settle`): the known-answer check of `attribution.settle`."""
    settle = None
    tables: dict[str, pd.DataFrame] = {}
    extra: dict[str, pd.DataFrame] = {}
    power = g[g["metric"] == "power_w"].sort_values("t_ns")
    cnt = polls.get("energy_counter", pd.DataFrame(columns=["t_ns", "value"]))
    ct = cnt["t_ns"].to_numpy(np.int64)
    ce = (cnt["value"].to_numpy(float) - (cnt["value"].iat[0] if len(cnt) else 0.0)) / 1e3
    for part in ("spacing", "window", "lengths"):
        try:
            if part == "spacing":
                tables["spacing"] = spacing_table(power, list(polls.values()))
                sp = tables["spacing"].set_index("quantity")
                summary["spacing_ms"] = float(sp.loc["sample_buffer", "spacing_median_ms"])
                summary["counter_update_ms"] = float(sp.loc["energy_counter", "update_median_ms"]) \
                    if "energy_counter" in sp.index else float("nan")
            elif part == "window":
                st = loads[loads["part"] == "window"]
                tables["window"], extra["window_points.csv"] = window_table(
                    power["t_ns"].to_numpy(), power["value"].to_numpy(),
                    list(zip(st["start_ns"], st["end_ns"], strict=True)),
                    summary.get("spacing_ms", float("nan")))
                settle = study_settle(tables["window"], extra["window_points.csv"],
                                      str(summary.get("gpu", "")), "this run's window steps")
                summary["settle"] = dataclasses.asdict(settle)
            else:
                tables["lengths"], ph, suite = length_rows(g, loads, ct, ce, summary, n_boot,
                                                           long_ms, settle)
                extra.update({"phases_per_instance.csv": ph, "suite_phases.csv": suite})
        except Exception:  # noqa: BLE001 - keep the other parts
            summary.setdefault("errors", {})[f"analysis_{part}"] = traceback.format_exc()[-3000:]
    return tables, extra
