"""Synthetic traces and events with known answers, shared by the tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

T0 = 1_700_000_000_000_000_000  # an epoch-ns origin


def averaging_sensor(edges_ns: np.ndarray, power_w: np.ndarray, t_read: np.ndarray,
                     window_ns: float) -> np.ndarray:
    """Readings of a piecewise-constant power (value power_w[k] on [edges[k], edges[k+1])) by a
    sensor that reports the exact average over [t - window, t]."""
    origin = int(edges_ns[0])
    e_rel = (np.asarray(edges_ns, dtype=np.int64) - origin).astype(float)
    t_rel = (np.asarray(t_read, dtype=np.int64) - origin).astype(float)
    cum = np.concatenate([[0.0], np.cumsum(power_w * np.diff(e_rel) / 1e9)])

    def energy(t):
        return np.interp(t, e_rel, cum)

    return (energy(t_rel) - energy(t_rel - window_ns)) / (window_ns / 1e9)


def trace_frame(t_ns: np.ndarray, values: np.ndarray, device: str = "gpu0", metric: str = "power_w",
                source: str = "nvml-samples", host: str = "h") -> pd.DataFrame:
    return pd.DataFrame({"t_ns": t_ns.astype(np.int64), "host": host, "device": device,
                         "metric": metric, "value": values, "source": source})


def events_frame(rows: list[tuple[str, int, int]], host: str = "h", rank: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"run_id": "r", "host": host, "rank": rank,
                         "phase": [r[0] for r in rows], "start_ns": [r[1] for r in rows],
                         "end_ns": [r[2] for r in rows], "step": 0, "items": np.nan})


def response_sensor(edges_ns: np.ndarray, power_w: np.ndarray, t_read: np.ndarray,
                    lag_edges_ms: list[float], weights: list[float]) -> np.ndarray:
    """Readings by a sensor that weighs lag bin [lag_edges[k], lag_edges[k+1]) ms by weights[k]
    (a delayed window with a tail, as the H200's)."""
    ms = 1_000_000
    return sum(w * averaging_sensor(edges_ns, power_w, np.asarray(t_read) - int(lo * ms),
                                    (hi - lo) * ms)
               for lo, hi, w in zip(lag_edges_ms[:-1], lag_edges_ms[1:], weights, strict=True))


def nested_steps(n_steps: int, seed: int = 0, scale_ms: int = 1, every: int = 5,
                 lead_ms: int = 0) -> pd.DataFrame:
    """One rank's events in the markers' end order (a child before its parent): `train` around
    steps of data_load / forward (a zero-length `compile` at its start, a `layer` inside) /
    backward / optimizer, steps meeting end to start, a `validate` after every `every` steps;
    durations of a few ms times `scale_ms`, from T0 + `lead_ms`."""
    ms = 1_000_000
    rng = np.random.default_rng(seed)
    rows, t = [], T0 + lead_ms * ms
    for i in range(n_steps):
        a = t + int(rng.integers(0, 3)) * ms  # 0: data_load starts with its step
        b = a + int(rng.integers(1, 9) * scale_ms) * ms
        c = b + int(rng.integers(2, 9) * scale_ms) * ms
        d = c + int(rng.integers(1, 9) * scale_ms) * ms
        e = d + int(rng.integers(0, 3) * scale_ms) * ms
        rows += [("data_load", a, b, 2), ("compile", b, b, 3), ("layer", b + ms, c - ms, 3),
                 ("forward", b, c, 2), ("backward", c, d, 2), ("optimizer", d, e, 2),
                 ("step", t, e, 1)]
        t = e
        if i % every == every - 1:
            rows.append(("validate", t, t + 7 * scale_ms * ms, 1))
            t += 7 * scale_ms * ms
    rows.append(("train", T0 + lead_ms * ms, t, 0))
    df = pd.DataFrame(rows, columns=["phase", "start_ns", "end_ns", "depth"])
    df = df.iloc[np.lexsort((-df["depth"].to_numpy(), df["end_ns"].to_numpy()))]
    return df.assign(run_id="r", host="h", rank=0, depth=df["depth"].astype(float)
                     ).reset_index(drop=True)


def end_order_events(n_steps: int, seed: int = 0) -> pd.DataFrame:
    """A rank's events as the markers write them (each phase when it ends, a child before its
    parent): steps of data_load / forward (a zero-length `compile` at its start, recorded one
    deeper) / backward / optimizer, a `mark` pair tying on every key, a checkpoint every 7
    steps, the recorded depth missing on some rows (never a `mark`'s)."""
    rng = np.random.default_rng(seed)
    rows = []
    t = T0
    for i in range(n_steps):
        fwd = t + int(rng.integers(1, 30)) * 1_000_000
        bwd = fwd + int(rng.integers(1, 20)) * 1_000_000
        opt = bwd + int(rng.integers(1, 40)) * 1_000_000
        end = opt + int(rng.integers(0, 5)) * 1_000_000  # 0: the optimizer ends with its step
        rows += [("data_load", t, fwd, 1), ("compile", fwd, fwd, 2), ("forward", fwd, bwd, 1),
                 ("mark", bwd, bwd, 2), ("mark", bwd, bwd, 2), ("backward", bwd, opt, 1),
                 ("optimizer", opt, end, 1), ("step", t, end, 0)]
        t = end
        if i % 7 == 6:
            rows.append(("checkpoint", t, t + 50 * 1_000_000, 0))
            t += 50 * 1_000_000
    df = pd.DataFrame(rows, columns=["phase", "start_ns", "end_ns", "depth"])
    keep = (rng.random(len(df)) > 0.1) | (df["phase"] == "mark").to_numpy()
    df["depth"] = df["depth"].astype(np.float64).where(keep)
    df = df.iloc[np.lexsort((-df["depth"].fillna(0).to_numpy(), df["end_ns"].to_numpy()))]
    return pd.DataFrame({"run_id": "r", "host": "h", "rank": 0,
                         "phase": df["phase"].to_numpy(), "start_ns": df["start_ns"].to_numpy(),
                         "end_ns": df["end_ns"].to_numpy(), "step": np.arange(len(df)) * 1.0,
                         "items": np.nan, "local_rank": 0.0, "depth": df["depth"].to_numpy()})


def write_check_side_files(run: Path, hosts: tuple[str, ...], ticks: int, window_end_ns: int,
                           steps: int, world: int, period_ns: int = 20_000_000) -> None:
    """A checked run's files beside its events: a trace of `ticks` readings of each host every
    `period_ns` (20 ms) from T0, a meta.json of an image_classification cell with its workload
    window [T0 + 1 s, `window_end_ns`], a compiled workload's summary counting `steps` with a
    step throughput."""
    trace = "".join(f"{T0 + k * period_ns},{h},gpu0,power_w,300.0,sim\n"
                    for k in range(ticks) for h in hosts)
    (run / "trace.csv").write_text("t_ns,host,device,metric,value,source\n" + trace)
    (run / "meta.json").write_text(json.dumps({
        "run_id": "r", "host": "h", "cell": {"kind": "image_classification"},
        "workload_start_ns": T0 + 10**9, "workload_end_ns": window_end_ns}))
    (run / "work").mkdir()
    (run / "work" / "summary.json").write_text(json.dumps({
        "steps": steps, "throughput": 5.0, "throughput_unit": "images/s", "compile": True,
        "step_clock": "host", "world_size": world}))
