"""The tables of benchmarks/decode_rates.py (issue 30), apart from its runs: a cell's row from
its attributed phases and summary (`phase_row`), how busy the host and the GPU were over its steady
steps (`steady_busy`), the per-setting summary over repeats with 95 % intervals
(`settings_summary`), which `decode: gpu` setting a screening round picks for the confirming
rounds (`select_best`), and a synthetic run's rate from its per-step record (`steps_rate`). Pure
functions of tables and a cell's files, tested on hand-made tables.
"""

import json
from pathlib import Path
from typing import Any

import pandas as pd

#: one row of a decode-rate table: column -> value
Row = dict[str, Any]


def steady_busy(cell_dir: Path) -> dict[str, Any]:
    """Median and 90th percentile over a cell's steady steps (rank 0's steps after warm-up, the
    step basis's) of the host's busy share, % of all its cores (`util_cpu`: psutil's, the CPU
    estimate's input), and the GPU's `sm_active` (NVML GPM, a fraction); None where not traced."""
    from wattlife.attribution.warmup import post_warmup_steps
    from wattlife.contracts import read_events, read_trace

    ev = read_events(cell_dir / "events.csv")
    steps = post_warmup_steps(ev[ev["rank"] == ev["rank"].min()])
    trace = read_trace(cell_dir / "trace.csv.gz")
    win = trace[trace["t_ns"].between(steps["start_ns"].min(), steps["end_ns"].max())]
    row: dict[str, Any] = {}
    for metric, name in (("util_cpu", "host_busy_pct"), ("sm_active", "sm_active")):
        v = win.loc[win["metric"] == metric, "value"]
        row[f"{name}_median"] = float(v.median()) if len(v) else None
        row[f"{name}_p90"] = float(v.quantile(0.9)) if len(v) else None
    return row


def steps_rate(steps_csv: Path, batch: int = 128) -> float:
    """images/s of a synthetic run from its steps file (`train_loop.py --steps-csv`: each timed
    step's GPU ms): the batch times the steps over their summed time."""
    ms = pd.read_csv(steps_csv)["gpu_ms"]
    return batch * len(ms) / (float(ms.sum()) / 1e3)


def phase_row(out: Path, name: str, r: dict[str, Any], synthetic: float | None) -> dict[str, Any]:
    """The table row of one cell from its attributed phases and summary."""
    c = out / "cells" / name
    if "error" in r:
        return {"cell": name, "error": r["error"][-500:]}
    ph = pd.read_csv(c / "phases.csv")
    s = json.loads((c / "work" / "summary.json").read_text())
    ph = ph[ph["phase"] != "deconvolution_residual"]
    by = ph.groupby(["device_kind", "phase"])[["energy_j", "time_s"]].sum()
    steps = ["data_load", "h2d", "forward", "backward", "optimizer"]
    gpu = by.loc["gpu"] if "gpu" in by.index.get_level_values(0) else pd.DataFrame()
    t_step = float(gpu.reindex(steps)["time_s"].fillna(0).sum()) if len(gpu) else float("nan")
    items = float(s["steps"] * s.get("batch_size", 128) - s.get("skipped_items", 0))
    row = {"cell": name, "decode": s.get("decode"), "cuda_graphs_ran": s.get("cuda_graphs"),
           "cuda_graphs_fallback": s.get("cuda_graphs_fallback"),
           "images_per_s_step": r["throughput"],
           "images_per_s_wall": r["throughput_wall"],
           "share_of_synthetic": r["throughput"] / synthetic if synthetic else None,
           "step_clock": r.get("step_clock"), "steps": s["steps"],
           "data_load_share_of_step_time": float(gpu["time_s"].get("data_load", 0)) / t_step
           if t_step else None,
           "decode_batches": json.dumps(s.get("decode_batches")),
           "decode_stage_ms": json.dumps(s.get("decode_stage_ms")), **steady_busy(c),
           "decode_fallback": s.get("decode_fallback")}
    for kind in ("gpu", "cpu"):
        if kind in by.index.get_level_values(0):
            k = by.loc[kind]
            row[f"{kind}_data_load_j"] = float(k["energy_j"].get("data_load", 0))
            row[f"{kind}_training_j_per_image"] = float(k.reindex(steps)["energy_j"].sum()) / items
    row["gpu_source"] = ",".join(sorted(set(ph.loc[ph["device_kind"] == "gpu", "source"])))
    row["cpu_source"] = ",".join(sorted(set(ph.loc[ph["device_kind"] == "cpu", "source"])))
    return row


def settings_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting over its repeats: n, the mean step rate and share of synthetic (each run over
    its own round's synthetic rate) with 95 % t intervals, and each `decode: gpu` setting's
    difference from `cpu` (Welch's 95 % interval; `within noise` where it spans zero)."""
    from wattlife.analysis.repeats import significant, t_interval, welch_interval

    rows = []
    for name, g in table.groupby("setting", sort=False):
        n, rate, _, lo, hi = t_interval(g["images_per_s_step"])
        _, share, _, s_lo, s_hi = t_interval(g["share_of_synthetic"].astype(float))
        row = {"setting": name, "n": n, "images_per_s_step": rate, "rate_lo": lo, "rate_hi": hi,
               "share_of_synthetic": share, "share_lo": s_lo, "share_hi": s_hi,
               "gpu_data_load_j": float(g["gpu_data_load_j"].mean())}
        eager = g.get("share_of_eager_synthetic")
        if eager is not None and eager.notna().any():  # against the eager ceiling, where measured
            _, e_share, _, e_lo, e_hi = t_interval(g["share_of_eager_synthetic"].astype(float))
            row.update(share_of_eager_synthetic=e_share, eager_share_lo=e_lo, eager_share_hi=e_hi)
        if name != "cpu" and "cpu" in set(table["setting"]):
            base = table.loc[table["setting"] == "cpu", "images_per_s_step"]
            d, d_lo, d_hi = welch_interval(g["images_per_s_step"], base)
            sig = significant(d_lo, d_hi)
            row.update(vs_cpu=d, vs_cpu_lo=d_lo, vs_cpu_hi=d_hi,
                       vs_cpu_reading="n = 1" if sig is None else
                       ("differs" if sig else "within noise"))
        rows.append(row)
    return pd.DataFrame(rows)


def select_best(table: pd.DataFrame) -> dict[str, Any] | None:
    """The `decode: gpu` setting (a name starting `gpu`) of the highest mean over `table`'s rows
    (the screening rounds) of its share of synthetic (over the synthetic rate of its kind), or of
    its step rate where a candidate has no share (a CPU rehearsal measures no synthetic rate);
    failed cells are left out. None when no `gpu` setting ran. The rounds that confirm it are
    separate runs, so their interval is not biased by this choice (the winner's curse)."""
    if "images_per_s_step" not in table:
        return None
    ok = table[table["setting"].str.startswith("gpu") & table["images_per_s_step"].notna()]
    if ok.empty:
        return None
    shares = pd.to_numeric(ok.get("share_of_synthetic", pd.Series(dtype=float)), errors="coerce")
    basis = "share_of_synthetic" if len(shares) and shares.notna().all() else "images_per_s_step"
    means = pd.to_numeric(ok[basis], errors="coerce").groupby(ok["setting"], sort=False).mean()
    best = str(means.idxmax())
    return {"setting": best, "basis": basis, "value": float(means[best]),
            "by_setting": {str(k): float(v) for k, v in means.items()}}
