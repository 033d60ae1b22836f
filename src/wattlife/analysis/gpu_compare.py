"""Two GPU models side by side (issue 46: the H100 beside the H200), from committed runs.

Per run (`run_row`), from its events, trace, phases and summary:
- `throughput`: basis `step` (`analysis.performance`: rank 0's post-warm-up steps' items over their
  durations; the steps' own clock, `clock`);
- `mfu`, `mfu_causal`: that throughput x the summary's FLOPs per item over the summary's peak
  (`peak_tflops`: the GPU's dense bf16 datasheet peak the workload used); causal-LM runs only;
- `steady_power_w`, `j_per_item`: the GPU's energy over its post-warm-up steps themselves
  (`trace_segments.post_warmup_power`: the energy series at each step's bounds) over their
  seconds, and over the items those steps trained;
- `idle_w`: the GPU's mean power over the run's idle baseline, before the workload starts (no
  CUDA context of the run); `context_idle_w`: its idle floor while the run holds a CUDA context
  (`waiting.context_floor`), NaN where the trace shows no flat stretch;
- the PFI predictor's telemetry features over the training window (`trace_segments`'
  `partition_trace` by the steps, `training_aggregates`): `util_gpu`, `util_mem`, `dram_active`,
  `sm_active`, `tensor_active`, `sm_clock_mhz` means and the `dram_copy_product`;
- one `share:<phase>` column per phase: the phase's share of the run's GPU energy (its
  `idle_baseline` left out), from `phases.csv`.

`compare_cells` gives, per cell (workload, storage, checkpoint) and metric, and per workload over
all its cells pooled (storage and checkpoint `all`: the post-warm-up figures do not depend on the
cell, so the pooled runs are repeats of one measurement; the shares do, read them per cell),
each model's mean with its 95 % t interval across repeats (NaN bounds for n = 1) and the
difference (first model minus second) with Welch's 95 % interval; `within_noise` is True where
that interval spans zero and None where either side has fewer than 2 runs. Pure: tables in,
tables out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..contracts.kinds import GPU
from .performance import step_clock, step_throughput_from_events
from .repeats import significant, t_interval, welch_interval
from .trace_segments import partition_trace, post_warmup_power, training_aggregates
from .waiting import context_floor

CELL_KEYS = ["workload", "storage", "checkpoint"]
#: the per-run metrics compared, with their units (the table's `unit` column)
METRICS = {"throughput": "items/s", "mfu": "fraction", "mfu_causal": "fraction",
           "steady_power_w": "W", "j_per_item": "J/item", "idle_w": "W",
           "context_idle_w": "W", "util_gpu": "%", "util_mem": "%",
           "dram_active": "fraction", "sm_active": "fraction", "tensor_active": "fraction",
           "sm_clock_mhz": "MHz", "dram_copy_product": "fraction"}
TELEMETRY_FEATURES = ["util_gpu", "util_mem", "dram_active", "sm_active", "tensor_active",
                      "sm_clock_mhz", "dram_copy_product"]
SHARE_PREFIX = "share:"


def _gpu_rows(phases: pd.DataFrame) -> pd.DataFrame:
    return phases[phases["device_kind"] == GPU.name]


def phase_shares(phases: pd.DataFrame) -> dict[str, float]:
    """{`share:<phase>`: share of the run's GPU energy}, the idle baseline left out."""
    g = _gpu_rows(phases)
    g = g[g["phase"] != "idle_baseline"]
    by = g.groupby("phase")["energy_j"].sum()
    total = float(by.sum())
    return {f"{SHARE_PREFIX}{p}": float(e) / total for p, e in by.items()} if total > 0 else {}


def idle_power(phases: pd.DataFrame) -> float:
    """The GPU's mean power over the idle baseline (its `idle_baseline` rows), NaN without one."""
    g = _gpu_rows(phases)
    b = g[g["phase"] == "idle_baseline"]
    t = float(b["time_s"].sum())
    return float(b["energy_j"].sum()) / t if t > 0 else float("nan")


def _mfu(thr: float | None, summary: dict[str, Any]) -> tuple[float, float]:
    fpt, peak = summary.get("flops_per_token"), summary.get("peak_flops_per_gpu")
    attn = summary.get("attention_flops_per_token")
    world = int(summary.get("world_size") or 1)
    if thr is None or not fpt or not peak:
        return float("nan"), float("nan")
    mfu = thr * fpt / (peak * world)
    causal = thr * (fpt - attn / 2) / (peak * world) if attn else float("nan")
    return float(mfu), float(causal)


def run_row(meta: dict[str, Any], summary: dict[str, Any], events: pd.DataFrame,
            trace: pd.DataFrame, phases: pd.DataFrame, run: str) -> dict[str, Any]:
    """One run's figures (module docstring); `run` names it (its folder)."""
    cell = meta.get("cell") or {}
    world = int(summary.get("world_size") or 1)
    thr = step_throughput_from_events(events, world)
    mfu, causal = _mfu(thr, summary)
    pw = post_warmup_power(trace, events)
    st = pw.iloc[0] if len(pw) else None
    s = events[events["phase"] == "step"]
    items = _post_warmup_items(events)
    idle = meta.get("idle_baseline") or {}
    floor = context_floor(trace, idle.get("start_ns"), idle.get("end_ns"))
    peak = summary.get("peak_flops_per_gpu")
    row: dict[str, Any] = {
        "gpu_model": meta.get("gpu_model", ""), "run": run,
        **{k: str(cell.get(k, "")) for k in CELL_KEYS}, "repeat": str(cell.get("repeat", "")),
        "throughput": thr if thr is not None else float("nan"),
        "throughput_unit": str(summary.get("throughput_unit", "")).split(" (")[0],
        "clock": step_clock(events) if len(s) else "",
        "mfu": mfu, "mfu_causal": causal,
        "peak_tflops": float(peak) / 1e12 if peak else float("nan"),
        "steady_steps": int(st["steady_steps"]) if st is not None else 0,
        "steady_power_w": float(st["steady_mean_power_w"]) if st is not None else float("nan"),
        "j_per_item": (float(st["steady_energy_j"]) / items
                       if st is not None and items > 0 else float("nan")),
        "idle_w": idle_power(phases),
        "context_idle_w": (float(floor["context_idle_w"].iloc[0]) if len(floor)
                           else float("nan")),
        "gpu_source": _gpu_source(phases)}
    row.update(telemetry_features(trace, events))
    row.update(phase_shares(phases))
    return row


def telemetry_features(trace: pd.DataFrame, events: pd.DataFrame) -> dict[str, float]:
    """The first GPU's telemetry means over its training window (NaN where not recorded)."""
    agg = training_aggregates(trace, partition_trace(trace, events))
    first = agg.iloc[0] if len(agg) else None
    return {m: float(first[m]) if first is not None and m in first else float("nan")
            for m in TELEMETRY_FEATURES}


def _post_warmup_items(events: pd.DataFrame) -> float:
    """Items of rank 0's post-warm-up steps (the same steps `post_warmup_power` covers)."""
    from ..attribution.warmup import step_rows

    ranks = events["rank"] if "rank" in events else None
    ev = events[ranks == ranks.min()] if ranks is not None else events
    s = step_rows(ev)
    return float(s.loc[~s["warmup"], "items"].sum())


def _gpu_source(phases: pd.DataFrame) -> str:
    src = sorted(set(_gpu_rows(phases)["source"].dropna().astype(str)))
    return ",".join(src)


def compare_cells(runs: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """Per cell x metric: each model's n, mean, 95 % t bounds, and first − second with Welch's
    interval (module docstring). `first`/`second` are `gpu_model` values of `runs`."""
    metrics = list(METRICS) + sorted(c for c in runs.columns if c.startswith(SHARE_PREFIX))
    out = []
    pooled = runs.assign(storage="all", checkpoint="all")
    for keys, g in pd.concat([runs, pooled]).groupby(CELL_KEYS, sort=True):
        a, b = g[g["gpu_model"] == first], g[g["gpu_model"] == second]
        mine = runs[runs["workload"] == keys[CELL_KEYS.index("workload")]]
        for m in metrics:
            if m.startswith(SHARE_PREFIX) and mine[m].isna().all():
                continue  # a phase of another workload only: no row of zeros
            va = a[m].to_numpy(float) if m in a else np.array([])
            vb = b[m].to_numpy(float) if m in b else np.array([])
            if m.startswith(SHARE_PREFIX):
                va, vb = np.nan_to_num(va), np.nan_to_num(vb)
            na, ma, _, la, ha = t_interval(va)
            nb, mb, _, lb, hb = t_interval(vb)
            if na == 0 and nb == 0:
                continue
            d, dlo, dhi = welch_interval(va, vb)
            sig = significant(dlo, dhi)
            out.append({**dict(zip(CELL_KEYS, keys, strict=True)), "metric": m,
                        "unit": METRICS.get(m, "fraction"),
                        "first": first, "n_first": na, "mean_first": ma, "lo_first": la,
                        "hi_first": ha, "second": second, "n_second": nb, "mean_second": mb,
                        "lo_second": lb, "hi_second": hb, "diff": d, "diff_lo": dlo,
                        "diff_hi": dhi, "ratio": ma / mb if mb else float("nan"),
                        "within_noise": None if sig is None else not sig,
                        "interval": "t95 across repeats; diff: Welch t95"})
    return pd.DataFrame(out)
