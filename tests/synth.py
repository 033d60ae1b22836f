"""Synthetic traces and events with known answers, shared by the tests."""

from __future__ import annotations

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
