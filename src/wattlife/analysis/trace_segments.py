"""PFI trace segmentation (the study's measurement protocol): split a run's trace into warm-up,
start-up, training and tail.

Per GPU, from its telemetry (no markers needed, so it applies to any job):
- `warmup`: from the first reading until the GPU's memory first rises `mem_rise_b` above its value
  at the start (the process has not yet put the model on the GPU);
- `startup`: from then until utilisation first reaches `util_pct` (model load, compilation,
  tokenisation, the first steps' allocator growth);
- `training`: from then until the last reading with utilisation at or above `util_pct`;
- `tail`: after that (final evaluation, checkpoint, exit).
Aggregates (mean power, energy, mean telemetry, the DRAM-copy product) are then taken over
`training` only, as the study did.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..attribution import device_series, interval_energy
from ..contracts import POWER_W, device_kind
from .curves import dram_copy_product

SEGMENTS = ("warmup", "startup", "training", "tail")
#: telemetry metrics averaged over the training segment (a selection of the trace's)
TELEMETRY = ("util_gpu", "util_mem", "dram_active", "sm_active", "tensor_active", "sm_clock_mhz")


def partition_trace(trace: pd.DataFrame, mem_rise_b: float = 1 << 30,
                    util_pct: float = 50.0) -> pd.DataFrame:
    """One row per (host, device, segment) with start_ns and end_ns; see the module docstring.

    A GPU whose utilisation never reaches `util_pct` has no training segment (an error for the
    caller to report, not a silent zero)."""
    rows = []
    gpu = trace[trace["device"].map(device_kind) == "gpu"]
    for (host, dev), g in gpu.groupby(["host", "device"], sort=True):
        t0, t1 = int(g["t_ns"].min()), int(g["t_ns"].max())
        mem = g[g["metric"] == "mem_used_b"].sort_values("t_ns")
        util = g[g["metric"] == "util_gpu"].sort_values("t_ns")
        if util.empty:
            raise ValueError(f"{host}/{dev}: the trace has no util_gpu readings to partition by")
        t_mem = t0
        if not mem.empty:
            above = mem["value"].to_numpy() >= mem["value"].iat[0] + mem_rise_b
            t_mem = int(mem["t_ns"].to_numpy()[above.argmax()]) if above.any() else t0
        busy = (util["value"].to_numpy() >= util_pct) & (util["t_ns"].to_numpy() >= t_mem)
        if not busy.any():
            rows.append((host, dev, "warmup", t0, t_mem))
            rows.append((host, dev, "startup", t_mem, t1))
            continue
        ut = util["t_ns"].to_numpy()
        t_train, t_end = int(ut[busy.argmax()]), int(ut[len(busy) - 1 - busy[::-1].argmax()])
        rows += [(host, dev, "warmup", t0, t_mem), (host, dev, "startup", t_mem, t_train),
                 (host, dev, "training", t_train, t_end), (host, dev, "tail", t_end, t1)]
    return pd.DataFrame(rows, columns=["host", "device", "segment", "start_ns", "end_ns"])


def training_aggregates(trace: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """Per GPU over its training segment: seconds, mean power, energy, mean of each telemetry
    metric, and the DRAM-copy product (dram_active x util_mem / 100).

    Energy is the attribution's integration (`attribution.interval_energy` of the device's one
    cumulative series) between the first and last power reading inside the segment; mean power
    is that energy over the time between those two readings."""
    out = []
    series = {(s.host, s.device): s for s in device_series(trace) if s.power_w is not None}
    for seg in segments[segments["segment"] == "training"].itertuples(index=False):
        g = trace[(trace["host"] == seg.host) & (trace["device"] == seg.device)
                  & (trace["t_ns"] >= seg.start_ns) & (trace["t_ns"] <= seg.end_ns)]
        p = g[g["metric"] == POWER_W]
        row = {"host": seg.host, "device": seg.device,
               "training_s": (seg.end_ns - seg.start_ns) / 1e9,
               "source": p["source"].mode().iat[0] if len(p) else "missing"}
        s = series.get((seg.host, seg.device))
        e, dt = interval_energy(s, seg.start_ns, seg.end_ns) if s is not None else (np.nan, 0.0)
        if dt > 0:
            row.update(energy_j=e, mean_power_w=e / dt)
        for m in TELEMETRY:
            v = g.loc[g["metric"] == m, "value"]
            row[m] = float(v.mean()) if len(v) else np.nan
        row["dram_copy_product"] = dram_copy_product(row["dram_active"], row["util_mem"])
        out.append(row)
    return pd.DataFrame(out)
