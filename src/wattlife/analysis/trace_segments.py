"""PFI trace segmentation (the study's measurement protocol): split a run's trace into warm-up,
start-up, training (one or more windows, pauses between them) and tail.

Per GPU:
- `warmup`: from the first reading until the GPU's memory first rises `mem_rise_b` above its value
  at the start (the process has not yet put the model on the GPU);
- `training`: the training window, in one or more rows, found by `method`
  - `steps` (where the run's step events are given): the post-warm-up steps, after compilation and
    warm-up (`attribution.warmup`: the first `warmup_count(n)` steps left out) — one row per run
    of consecutive steps, split where a validation or checkpoint lies between two steps;
  - `telemetry` (no events, or none for this GPU): the plateau detector below;
- `pause`: between two training rows (evaluation, checkpoint, a dip);
- `startup`: from the memory rise until the first training row (model load, compilation,
  tokenisation, warm-up steps); `tail`: after the last one (final evaluation, checkpoint, exit).

Plateau detector (`plateau_mask`, telemetry only): the GPU's power readings averaged over a
centred `window_s` (5 s) window; the plateau is the 95th percentile of that rolling mean; a
reading is at plateau when its rolling mean is at least (1 - `tol`) x plateau (`tol` 0.15), and the
training rows are the runs of plateau readings that last at least `window_s`. A GPU whose plateau
is not well above its floor (the 5th percentile; plateau < floor + max(30 W, 25 %)) never
trained. Compilation and the first steps draw far less than the post-warm-up steps (a compiling
MoE run on the H200: 217 W against ~600 W), so unlike "the first reading with utilisation >= 50 %"
it does not start the window inside compilation. A GPU with no such run has no training row (an
error for the caller to report, not a silent zero).

Aggregates (`training_aggregates`, over the training rows only): mean power, energy, the mean of
each telemetry metric, the DRAM-copy product, and the study's own aggregate, named `top10_*`:
the mean of the top 10 % of the readings inside the training rows (the PFI study took the top
10 % of its 30-minute runs' training samples).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..attribution import device_series, interval_energy
from ..attribution.warmup import post_warmup_steps
from ..contracts import PAUSE_PHASES, POWER_W, GpuIdentity, device_index, is_per_rank
from ..errors import InputError
from .curves import dram_copy_product

SEGMENTS = ("warmup", "startup", "training", "pause", "tail")
#: telemetry metrics averaged over the training rows (a selection of the trace's)
TELEMETRY = ("util_gpu", "util_mem", "dram_active", "sm_active", "tensor_active", "sm_clock_mhz")
_PAUSES = PAUSE_PHASES
COLUMNS = ["host", "device", "segment", "start_ns", "end_ns", "method"]


def plateau_mask(t_ns: np.ndarray, power_w: np.ndarray, window_s: float = 5.0,
                 tol: float = 0.15) -> np.ndarray:
    """Readings of one GPU's power at its plateau (the module's detector), before the run-length
    rule."""
    s = pd.Series(power_w, index=pd.to_datetime(t_ns))
    fwd = s.rolling(pd.Timedelta(seconds=window_s / 2)).mean()
    bwd = s[::-1].rolling(pd.Timedelta(seconds=window_s / 2)).mean()[::-1]  # the window ahead
    roll = ((fwd + bwd) / 2).to_numpy()
    if not len(roll):
        return np.zeros(0, dtype=bool)
    plateau, floor = float(np.nanpercentile(roll, 95)), float(np.nanpercentile(roll, 5))
    if plateau < floor + max(30.0, 0.25 * floor):  # never well above its floor: no training
        return np.zeros(len(roll), dtype=bool)
    return np.asarray(roll >= (1 - tol) * plateau, dtype=bool)


def _runs(t_ns: np.ndarray, mask: np.ndarray, min_s: float) -> list[tuple[int, int]]:
    """[start, end] of each run of True lasting at least `min_s`."""
    out, i, n = [], 0, len(mask)
    while i < n:
        if not mask[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and mask[j + 1]:
            j += 1
        if (t_ns[j] - t_ns[i]) / 1e9 >= min_s:
            out.append((int(t_ns[i]), int(t_ns[j])))
        i = j + 1
    return out


def step_windows(events: pd.DataFrame) -> list[tuple[int, int]]:
    """The post-warm-up steps of one rank's events as [start, end] windows, split where a validation
    or checkpoint lies between two consecutive steps."""
    st = post_warmup_steps(events).sort_values("start_ns")
    if st.empty:
        return []
    pauses = np.sort(events.loc[events["phase"].isin(_PAUSES), "start_ns"].to_numpy())
    s0, e0 = st["start_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)
    out, a = [], int(s0[0])
    for k in range(len(s0) - 1):
        if np.searchsorted(pauses, e0[k]) != np.searchsorted(pauses, s0[k + 1]):
            out.append((a, int(e0[k])))
            a = int(s0[k + 1])
    out.append((a, int(e0[-1])))
    return out


def _rank_events(events: pd.DataFrame | None, host: str, dev: str,
                 gpus: Sequence[GpuIdentity] | None = None) -> pd.DataFrame | None:
    """The events of the rank driving GPU `dev`: the local rank meta.json's identity of `dev`
    names (`gpus`, `RunMeta.gpu_identities`), else local rank k drives gpu<k>."""
    if events is None or events.empty:
        return None
    col = "local_rank" if "local_rank" in events.columns else "rank"
    named = {g.device: g.local_rank for g in gpus or [] if g.local_rank is not None}
    k = named.get(dev, device_index(dev))
    own = events[events["host"] == host] if (events["host"] == host).any() else events
    own = own[own[col].fillna(own["rank"]) == k]
    return own if (own["phase"] == "step").any() else None


def partition_trace(trace: pd.DataFrame, events: pd.DataFrame | None = None,
                    mem_rise_b: float = 1 << 30, window_s: float = 5.0,
                    tol: float = 0.15, gpus: Sequence[GpuIdentity] | None = None
                    ) -> pd.DataFrame:
    """Rows (host, device, segment, start_ns, end_ns, method) per GPU; see the module docstring.
    `events`: the run's events (all ranks), for the `steps` method; `gpus`: meta.json's GPU
    identities, which say which local rank drives which device (default: rank k, gpu<k>)."""
    rows = []
    gpu = trace[trace["device"].isin([d for d in trace["device"].unique()
                                      if is_per_rank(str(d))])]
    for (host, dev), g in gpu.groupby(["host", "device"], sort=True):
        t0, t1 = int(g["t_ns"].min()), int(g["t_ns"].max())
        mem = g[g["metric"] == "mem_used_b"].sort_values("t_ns")
        t_mem = t0
        if not mem.empty:
            above = mem["value"].to_numpy() >= mem["value"].iat[0] + mem_rise_b
            t_mem = int(mem["t_ns"].to_numpy()[above.argmax()]) if above.any() else t0
        ev = _rank_events(events, str(host), str(dev), gpus)
        if ev is not None:
            method, wins = "steps", step_windows(ev)
        else:
            p = g[(g["metric"] == POWER_W) & (g["t_ns"] >= t_mem)].sort_values("t_ns")
            if p.empty:
                raise InputError(f"{host}/{dev}: the trace has no power_w readings to find a "
                                 "steady state in")
            t = p["t_ns"].to_numpy(np.int64)
            method = "telemetry"
            wins = _runs(t, plateau_mask(t, p["value"].to_numpy(float), window_s, tol), window_s)
        rows.append((host, dev, "warmup", t0, t_mem, method))
        if not wins:
            rows.append((host, dev, "startup", t_mem, t1, method))
            continue
        rows.append((host, dev, "startup", t_mem, wins[0][0], method))
        for k, (a, b) in enumerate(wins):
            if k:
                rows.append((host, dev, "pause", wins[k - 1][1], a, method))
            rows.append((host, dev, "training", a, b, method))
        rows.append((host, dev, "tail", wins[-1][1], t1, method))
    return pd.DataFrame(rows, columns=COLUMNS)


def post_warmup_power(trace: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: the seconds, energy and mean power over its rank's post-warm-up steps themselves
    (the energy series interpolated at each step's bounds, as attribution integrates a phase);
    columns `steady_steps`, `steady_s`, `steady_energy_j`, `steady_mean_power_w`, the names the
    committed reference tables use."""
    out = []
    for s in device_series(trace):
        if not is_per_rank(s.device) or s.power_w is None:
            continue
        ev = _rank_events(events, s.host, s.device)
        if ev is None:
            continue
        st = post_warmup_steps(ev)
        a, b = st["start_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)
        e = float(np.sum(s.energy_at(b) - s.energy_at(a)))
        dt = float(np.sum(b - a)) / 1e9
        out.append({"host": s.host, "device": s.device, "steady_steps": len(st),
                    "steady_s": dt, "steady_energy_j": e,
                    "steady_mean_power_w": e / dt if dt > 0 else np.nan})
    return pd.DataFrame(out)


def training_aggregates(trace: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """Per GPU over its training rows: seconds, mean power, energy, mean of each telemetry metric,
    the DRAM-copy product (dram_active x util_mem / 100), and the study's `top10_*` aggregates.

    Energy is the attribution's integration (`attribution.interval_energy` of the device's one
    cumulative series) between the first and last power reading inside each training row, summed;
    mean power is that energy over the time between those readings."""
    out = []
    series = {(s.host, s.device): s for s in device_series(trace) if s.power_w is not None}
    train = segments[segments["segment"] == "training"]
    for (host, dev), rows in train.groupby(["host", "device"], sort=True):
        g = trace[(trace["host"] == host) & (trace["device"] == dev)]
        inside = np.zeros(len(g), dtype=bool)
        e_sum, dt_sum = 0.0, 0.0
        s = series.get((host, dev))
        for r in rows.itertuples(index=False):
            inside |= g["t_ns"].between(r.start_ns, r.end_ns).to_numpy()
            if s is not None:
                e, dt = interval_energy(s, r.start_ns, r.end_ns)
                if dt > 0:
                    e_sum, dt_sum = e_sum + e, dt_sum + dt
        g = g[inside]
        p = g[g["metric"] == POWER_W]
        row = {"host": host, "device": dev,
               "training_s": float((rows["end_ns"] - rows["start_ns"]).sum() / 1e9),
               "windows": len(rows), "method": rows["method"].iat[0] if "method" in rows else "",
               "source": p["source"].mode().iat[0] if len(p) else "missing"}
        if dt_sum > 0:
            row.update(energy_j=e_sum, mean_power_w=e_sum / dt_sum)
        for m in (POWER_W, *TELEMETRY):
            v = g.loc[g["metric"] == m, "value"].to_numpy(float)
            if m != POWER_W:
                row[m] = float(v.mean()) if len(v) else np.nan
            top = np.sort(v)[-max(int(np.ceil(0.1 * len(v))), 1):] if len(v) else v
            row[f"top10_{m}"] = float(top.mean()) if len(top) else np.nan
        row["dram_copy_product"] = dram_copy_product(row["dram_active"], row["util_mem"])
        out.append(row)
    return pd.DataFrame(out)
