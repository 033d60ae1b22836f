"""Printing of `nvml_sensor.py`'s results (issue 46); the analysis itself is the package's
(`wattlife.analysis.nvml_sensor`)."""

from __future__ import annotations

import json
from typing import Any

from wattlife.analysis.nvml_sensor import analyse_run

__all__ = ["analyse_run", "findings", "print_table"]


def findings(summary: dict[str, Any], tables: dict[str, Any]) -> None:
    w = tables.get("window")
    if w is not None and len(w):
        r = w.set_index("direction").loc["both"]
        ratio = float(r["window_over_spacing"])
        summary["window_finding"] = (
            f"boxcar fit: window {r['window_ms']:.1f} ms, delay {r['delay_ms']:.1f} ms, readings "
            f"{r['spacing_ms']:.1f} ms apart: window/spacing {ratio:.2f} ("
            + ("the readings average only part of each update period" if ratio < 0.9 else
               "the readings cover each update period")
            + f"); 10-90 % rise {r['rise_10_90_ms']:.1f} ms")
    st = summary.get("settle")
    if st:
        summary["settle_finding"] = (
            f"settling: {st['displaced_ms']:.1f} ms x the step per boundary put across it by "
            f"integrate (the larger of up and down steps), read within {st['reach_ms']:.1f} ms; "
            "attribution.settle.KNOWN takes it for this GPU model once committed")


def print_table(tables: dict[str, Any], summary: dict[str, Any]) -> None:
    keys = ("gpu", "driver", "load", "kernel_ms", "kernel_full_gpu_matmul_ms", "spacing_ms",
            "counter_update_ms", "truth", "window_finding", "settle_finding",
            "dropped_lengths_ms", "poll_errors", "gpu_s", "total_s")
    print(json.dumps({k: summary[k] for k in keys if k in summary}, indent=1, default=str))
    for k in ("spacing", "window"):
        if k in tables and len(tables[k]):
            print(tables[k].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    t = tables.get("lengths")
    if t is not None and len(t):
        cols = [c for c in ("L_ms", "phases", "suite_method", "block_err_pct",
                            "integrated_err_mean_pct", "integrated_err_sd_pct",
                            "counter_err_mean_pct", "suite_err_mean_pct", "suite_err_sd_pct",
                            "coverage_truth", "coverage_truth_settle", "agg_err_pct",
                            "agg_covers_truth",
                            "agg_deconv_err_pct", "agg_deconv_covers_truth") if c in t]
        print(t[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print("errors:", sorted(summary.get("errors", {})) or "none")
