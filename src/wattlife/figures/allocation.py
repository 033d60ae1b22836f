"""The PFI study's allocation figures: fig. 8 (strategies against the oracle and the share of the
equal->oracle gap they recover) and the allocation headline's sensitivity to its assumptions
(`analysis.pfi_study`'s grid), each from its table."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..contracts.sources import SOURCE_WORDS
from .common import save_figure, style

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
    return save_figure(fig, out)


def worse_than_equal_note(summary: pd.DataFrame, strategies: list[str] | None = None) -> str:
    """Where a heuristic recovers a negative share of the equal→oracle gap (does worse than the
    equal split), with the numbers: 'category −0.44 at 20 %, −4.3 at 40 %; ...' (or 'none')."""
    s = summary[(summary["cut"] > 0) & ~summary["strategy"].isin(["equal", "oracle"])]
    if strategies:
        s = s[s["strategy"].isin(strategies)]
    parts = []
    for strat, g in s.sort_values("cut").groupby("strategy", sort=True):
        bad = g[g["gap_recovered"] < -1e-9]
        if len(bad):
            parts.append(f"{strat} " + ", ".join(
                f"{v:+.2g} at {cut * 100:g} %"
                for cut, v in zip(bad["cut"], bad["gap_recovered"], strict=True)))
    return "; ".join(parts) if parts else "none"


def fig_allocation(summary: pd.DataFrame, out: Path, title: str = "") -> list[Path]:
    """Fig. 8: throughput relative to the oracle and share of the equal→oracle gap recovered, by
    strategy and cut; one row per (mix, objective). The caption under each row names, with
    numbers, every cut where a heuristic does worse than the equal split."""
    style()
    s = summary.copy()
    s["cut_pct"] = s["cut"] * 100
    for col, default in (("mix", "random"), ("objective", "relative")):
        if col not in s.columns:
            s[col] = default
    combos = list(s.groupby(["mix", "objective"], sort=True).groups)
    order = sorted(s["strategy"].unique())
    # one colour per strategy
    pal = dict(zip(order, sns.color_palette("tab10", len(order)), strict=True))
    fig, axes = plt.subplots(len(combos), 2, figsize=(12, 4.6 * len(combos)), squeeze=False)
    for r, (mix, obj) in enumerate(combos):
        d = s[(s["mix"] == mix) & (s["objective"] == obj)]
        ax = axes[r, 0]
        sns.lineplot(data=d, x="cut_pct", y="rel_to_oracle", hue="strategy", marker="o", ax=ax,
                     hue_order=[o for o in order if o in set(d["strategy"])], palette=pal)
        ax.set_xlabel("global power cut (% of uncapped power)")
        ax.set_ylabel("throughput / oracle (mean over workloads)")
        tsrc = (d["throughput_source"].iloc[0] if "throughput_source" in d.columns
                else "")  # "assumed (MFU ...)" where tokens/s are estimated
        assumed = tsrc.startswith("assumed")
        ax.set_title(f"{mix} mix, {obj} throughput: strategies vs oracle"
                     + (f"\nthroughput_source = {tsrc.split(';')[0].rstrip(')')})"
                        if assumed else ""), fontsize=9 if assumed else None)
        ax.legend(fontsize=7)
        ax = axes[r, 1]
        g = d[(d["cut"] > 0) & ~d["strategy"].isin(["oracle", "equal"])]
        sns.barplot(data=g, x="cut_pct", y="gap_recovered", hue="strategy", ax=ax,
                    hue_order=[o for o in order if o in set(g["strategy"])], palette=pal)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel("global power cut (%)")
        ax.set_ylabel("share of equal→oracle gap recovered")
        ax.set_title("gap recovered (below 0 = worse than the equal split)"
                     + (f"\nthroughput_source = {tsrc.split(';')[0].rstrip(')')})"
                        if assumed else ""), fontsize=9 if assumed else None)
        ax.legend(fontsize=7)
        note = worse_than_equal_note(d)
        ax.text(0.0, -0.2, "Worse than equal split: " + note, transform=ax.transAxes, fontsize=7,
                ha="left", va="top", wrap=True)
    src = s["curves_source"].iloc[0] if "curves_source" in s.columns else "unknown"
    flags = sorted({str(f) for f in s.get("flags", pd.Series(dtype=object)).dropna() if str(f)})
    fig.text(0.01, -0.01, f"Curves: {SOURCE_WORDS.get(src, src)} ({src}); allocation is a "
             "simulation on those curves"
             + (f"\nFLAGGED (every number above): {'; '.join(flags)}" if flags else ""),
             fontsize=8, ha="left", va="top", color="firebrick" if flags else "black")
    fig.tight_layout()
    if title:
        fig.suptitle(title, y=1.0 + 0.02 / len(combos))
    return save_figure(fig, out)

