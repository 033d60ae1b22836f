"""Figures of the PFI study's allocation sensitivity (`analysis.sensitivity`): tables in, files
out."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .figures import _save, style  # noqa: E402

SERIES = [("gap_pfi_predicted", "PFI-aware, predicted PFI", "tab:blue", "o"),
          ("gap_pfi_measured", "PFI-aware, measured (= published) PFI", "tab:green", "s"),
          ("gap_pmax_tmax", "P_max/T_max alone (no PFI)", "tab:orange", "^")]


def fig_sensitivity(grid: pd.DataFrame, out: Path, paper: float | None = None) -> list[Path]:
    """Share of the equal->oracle gap recovered at every grid point (`sensitivity_grid`), one
    panel per (mix, cut); x: the ratio of the dense to the MoE MFU factor (what moves the result;
    scaling both alike changes nothing); every fine-tuning share of the production mix drawn at
    its x. The caption says the throughputs are assumed and how many workloads each point ran."""
    style()
    mixes = [m for m in ("production", "random") if m in set(grid["mix"])]
    cuts = sorted(grid["cut"].unique())
    fig, axes = plt.subplots(len(mixes), len(cuts), figsize=(4.2 * len(cuts), 3.8 * len(mixes)),
                             squeeze=False, sharey=True)
    for r, mix in enumerate(mixes):
        for c, cut in enumerate(cuts):
            ax = axes[r, c]
            d = grid[(grid["mix"] == mix) & np.isclose(grid["cut"], cut)]
            x = d["mfu_dense_factor"] / d["mfu_moe_factor"]
            for k, (col, label, colour, marker) in enumerate(SERIES):
                jitter = 1 + 0.03 * (k - 1)
                ax.scatter(x * jitter, d[col], s=14, color=colour, marker=marker, alpha=0.6,
                           label=label)
            if paper is not None and mix == "production" and np.isclose(cut, 0.3):
                ax.axhline(paper, color="black", ls="--", lw=1)
                ax.text(x.min(), paper, f" paper {paper:.2f}", va="bottom", fontsize=8)
            ax.set_xscale("log")
            ticks = [t for t in (1 / 3, 0.5, 1, 2, 3) if x.min() - 1e-9 <= t <= x.max() + 1e-9]
            ax.set_xticks(ticks, [f"{t:.2g}" for t in ticks], fontsize=8)
            ax.minorticks_off()
            ax.set_title(f"{mix} mix, {cut:.0%} cut", fontsize=10)
            ax.set_xlabel("MFU factor dense / MoE (assumed)")
            if c == 0:
                ax.set_ylabel("share of equal→oracle gap recovered")
    axes[0, 0].legend(fontsize=7, loc="lower left")
    ft = sorted(grid["ft_share"].dropna().unique())
    n = int(grid["n_workloads"].iloc[0])
    src = grid["throughput_source"].str.extract(r"MFU dense ([\d.]+), MoE ([\d.]+)").astype(float)
    fig.text(0.01, -0.01,
             "throughput_source = assumed (MFU dense "
             f"{src[0].min():.2f}–{src[0].max():.2f}, MoE {src[1].min():.2f}–{src[1].max():.2f}: "
             f"{grid['mfu_dense_factor'].min():g}–{grid['mfu_dense_factor'].max():g} × "
             "0.40 / 0.20; tokens/s estimated from model size). Curves SIMULATED "
             "(calibrated to the published PFIs). Production mix: fine-tuning share of the jobs "
             f"{', '.join(f'{v:.3g}' for v in ft)} at each x. {n} workloads × "
             f"{int(grid['n_jobs'].iloc[0])} jobs per point (the headline runs 500).",
             fontsize=8, ha="left", va="top", wrap=True)
    fig.tight_layout()
    fig.suptitle("Allocation headline vs its assumptions (absolute tokens/s, ASSUMED)", y=1.02)
    return _save(fig, out)
