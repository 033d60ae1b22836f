"""Timestamps are epoch nanoseconds: a trace or events file stamped in s, ms or us (as other tools
write them) is told apart by its magnitude and refused, naming the unit it looks like."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contracts import ContractError

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
