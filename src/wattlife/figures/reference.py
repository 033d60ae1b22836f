"""The figures of the committed reference results (`results/reference`, no GPU): the H200 sampler
checks and attribution comparison (committed CSVs), and the figures of the tables
`analysis.reference.write_reference_tables` writes (read here, never computed here)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..contracts import A100_TABLES, H200_EXECUTION_TABLES
from .allocation import fig_allocation
from .common import read_figure_table, save_figure, seeded_jitter, style
from .lifecycle import fig_device_share, fig_phase_energy
from .pfi import fig_curves, fig_pfi, fig_pfi_published


def fig_h200_sampler(ref: Path, out: Path) -> list[Path]:
    """Sampler checks on the H200 (results/reference/h200/sampler): accuracy, resolution,
    overhead."""
    style()
    acc = pd.read_csv(ref / "accuracy_windows.csv")
    hist = pd.read_csv(ref / "resolution_histogram.csv")
    ovh = pd.read_csv(ref / "overhead_runs.csv")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    t = (acc["t_ns"] - acc["t_ns"].iloc[0]) / 1e9
    err = (acc["samples_j"] / acc["counter_j"] - 1) * 100
    ax = axes[0]
    ax.plot(t, acc["counter_j"] / 1000, label="total-energy counter", lw=2)
    ax.plot(t, acc["samples_j"] / 1000, label="∫ 20 ms driver samples", ls="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("cumulative GPU energy (kJ) — measured (NVML)")
    ax.set_title(f"accuracy: {err.iloc[-1]:+.2f} % after {t.iloc[-1]:.0f} s")
    ax.legend()
    ax = axes[1]
    ax.bar((hist["bin_lo_w"] + hist["bin_hi_w"]) / 2, hist["count"],
           width=hist["bin_hi_w"] - hist["bin_lo_w"], color="#2a7ab9")
    ax.set_xlabel("driver power sample (W) — measured (NVML samples)")
    ax.set_ylabel("samples")
    ax.set_title("resolution: 40 ms on / 40 ms off")
    ax = axes[2]
    with seeded_jitter():  # the same points on every redraw
        sns.stripplot(data=ovh, x="mode", y="images_per_s", ax=ax, size=7,
                      order=["bare", "sampler", "markers"])
    med = ovh.groupby("mode")["images_per_s"].median()
    for i, m in enumerate(["bare", "sampler", "markers"]):
        ax.hlines(med[m], i - 0.3, i + 0.3, color="black")
    ax.set_ylabel("ResNet-50 images/s (measured)")
    ax.set_title("overhead (5 interleaved runs each; bar = median)")
    fig.tight_layout()
    return save_figure(fig, out)


def fig_h200_attribution(ref: Path, out: Path) -> list[Path]:
    """Per-kind mean power: long phases (integrated) vs 5-20 ms phases (deconvolved with a
    boxcar window, 95% CI, and with the estimated sensor response), split into kinds the GPU's
    power cap leaves alone (the 5% criterion) and kinds it clock-limits (length-dependent)."""
    style()
    comparison = pd.read_csv(ref / "comparison.csv")
    comparison["label"] = (comparison["kind"] + "\n" + comparison["set"] + " r"
                           + comparison["run"].astype(str))
    limited = comparison[["long_limited_share", "short_limited_share"]].max(axis=1) >= 0.05
    parts = [(comparison[~limited], "not clock-limited (5 % criterion)"),
             (comparison[limited], "clock-limited by the power cap in some polls")]
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.8), gridspec_kw={"width_ratios": [
        max(len(parts[0][0]), 1), max(len(parts[1][0]), 1)]})
    for ax, (d, title) in zip(axes, parts, strict=True):
        x = np.arange(len(d))
        ax.bar(x - 0.27, d["long_integrated_w"], 0.27, label="long phases (1.5 s), integrated")
        ax.bar(x, d["short_deconvolved_w"], 0.27, label="5–20 ms phases, deconvolved (boxcar)",
               yerr=[d["short_deconvolved_w"] - d["short_lo_w"],
                     d["short_hi_w"] - d["short_deconvolved_w"]], capsize=2)
        ax.bar(x + 0.27, d["short_deconvolved_estimated_response_w"], 0.27,
               label="5–20 ms phases, deconvolved (estimated sensor response)")
        for xi, (_, r) in zip(x, d.iterrows(), strict=True):
            ax.annotate(f"{r['rel_error']:+.1%}\n{r['rel_error_estimated_response']:+.1%}",
                        (xi, max(r["short_hi_w"], r["long_integrated_w"],
                                 r["short_deconvolved_estimated_response_w"]) + 15),
                        ha="center", fontsize=6.5)
        ax.set_xticks(x, d["label"], fontsize=7, rotation=30, ha="right")
        ax.set_ylim(0, 1.2 * max(d[["long_integrated_w", "short_hi_w"]].max().max(), 1))
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("mean GPU power (W) — measured (NVML samples)")
    axes[1].legend(fontsize=7, loc="upper right")
    fig.suptitle("H200: per-kind power, long vs short phases (labels: error vs long, boxcar / "
                 "estimated response)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)


def draw_reference(ref_root: str | Path, out: str | Path) -> list[Path]:
    """Every figure of the committed reference results (no GPU), drawn from tables: the committed
    CSVs, and the tables `analysis.reference.write_reference_tables` wrote under `out` (its
    `H200_EXECUTION_TABLES` and `A100_TABLES` folders; `wattlife figures --reference` writes them
    first). A folder of tables that is not there is a figure not drawn."""
    ref_root, out = Path(ref_root), Path(out)
    made: list[Path] = []
    h200 = ref_root / "h200"
    if (h200 / "sampler" / "accuracy_windows.csv").exists():
        made += fig_h200_sampler(h200 / "sampler", out / "h200_sampler")
    if (h200 / "attribution" / "comparison.csv").exists():
        made += fig_h200_attribution(h200 / "attribution", out / "h200_attribution")
    execution, a100 = out / H200_EXECUTION_TABLES, out / A100_TABLES
    if (execution / "phase_summary.csv").exists():
        made += fig_phase_energy(read_figure_table(execution / "phase_summary.csv"),
                                 out / "h200_fig1_phase_energy_time")
        made += fig_device_share(read_figure_table(execution / "device_share.csv"),
                                 out / "h200_fig2_device_share")
    if (a100 / "curves.csv").exists():
        made += fig_curves(pd.read_csv(a100 / "curves.csv"), out / "a100_fig6_power_throughput")
        made += fig_pfi(pd.read_csv(a100 / "pfi.csv"), None, None, out / "a100_fig7_pfi")
        made += fig_allocation(pd.read_csv(a100 / "allocation_summary.csv"),
                               out / "a100_fig8_allocation")
    study = ref_root / "pfi-study"
    if (study / "allocation_summary.csv").exists():  # the committed tables of `wattlife pfi-study`
        made += fig_allocation(pd.read_csv(study / "allocation_summary.csv"),
                               out / "pfi_study_allocation_calibrated",
                               title="Allocation on the study's 25 jobs (curves SIMULATED, "
                                     "calibrated to the published PFIs)")
        made += fig_pfi_published(pd.read_csv(study / "pfi_calibrated.csv"),
                                  out / "pfi_study_pfi_vs_published")
    return made
