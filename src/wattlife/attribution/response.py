"""The sensor response: how a reading stamped t weighs the true power at t - lag, and its CSV.

The plain window is a boxcar [t_i - w, t_i]. A real sensor weighs the past differently: the
H200's readings start to move ~5 ms after a step and settle only after ~40 ms
(results/reference/h200/attribution/). `SensorResponse` generalises the boxcar to
piecewise-constant weights over lag bins (`deconvolve.estimate_response` finds them from a run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import ContractError, InputError

if TYPE_CHECKING:
    from .segment_lookup import SegmentIndex

#: columns of a sensor-response CSV (`SensorResponse.to_csv` / `from_csv`)
RESPONSE_COLUMNS = ["lag_lo_ms", "lag_hi_ms", "weight"]

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
            raise InputError(f"sensor response: {len(w)} weights need {len(w) + 1} lag edges, "
                             f"got {len(e)}")
        if e[0] < 0 or np.any(np.diff(e) <= 0):
            raise InputError(f"sensor response: lag edges must start at >= 0 and increase, got {e}")
        if np.any(w < 0) or not np.isclose(w.sum(), 1.0, atol=1e-6):
            raise InputError(f"sensor response: weights must be >= 0 and sum to 1, got {w}")

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

    def design(self, index: "SegmentIndex", t: np.ndarray) -> np.ndarray:
        """A[i, n] = the weight reading i gives to phase name n's time."""
        e = np.asarray(self.edges_s) * 1e9
        if self.is_boxcar and self.weights[0] == 1.0:  # what 0 + 1.0 x overlap is, exactly
            return index.overlap(t - e[0], e[1] - e[0])
        return np.asarray(sum(wk * index.overlap(t - e[k], e[k + 1] - e[k])
                              for k, wk in enumerate(self.weights) if wk > 0))

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
            raise ContractError(f"{path}: expected columns {sorted(need)}, got {list(df.columns)}")
        lo, hi = df["lag_lo_ms"].to_numpy(float), df["lag_hi_ms"].to_numpy(float)
        gaps = np.flatnonzero(~np.isclose(lo[1:], hi[:-1]))
        if len(gaps):
            raise InputError(f"{path}, line {gaps[0] + 3}: lag_lo_ms {lo[gaps[0] + 1]} does not "
                             f"continue the previous bin's lag_hi_ms {hi[gaps[0]]}")
        try:
            return cls(tuple(np.append(lo, hi[-1]) / 1e3), tuple(df["weight"].astype(float)))
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None
