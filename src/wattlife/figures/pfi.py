"""The PFI study's curve figures: fig. 6 (power-throughput curves, raw and normalised), fig. 7
(PFI by category and against telemetry) and the PFI against the published values, each from its
table."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from ..contracts.sources import SOURCE_WORDS
from .common import save_figure, source_note, source_tag, style


def fig_curves(curves: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 6: power-throughput curves per job, raw and normalised to the uncapped run."""
    style()
    c = curves.dropna(subset=["throughput", "power_w"]).sort_values("cap_w").copy()
    top = c.groupby(["job", "gpu_model"])["cap_w"].transform("max") == c["cap_w"]
    ref = c[top].set_index(["job", "gpu_model"])
    key = pd.MultiIndex.from_frame(c[["job", "gpu_model"]])
    c["p_rel"] = c["power_w"].to_numpy() / ref["power_w"].reindex(key).to_numpy()
    c["t_rel"] = c["throughput"].to_numpy() / ref["throughput"].reindex(key).to_numpy()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    sns.lineplot(data=c, x="power_w", y="throughput", hue="job", style="gpu_model", marker="o",
                 ax=axes[0])
    axes[0].set_xlabel("realised aggregate GPU power (W)")
    axes[0].set_ylabel("throughput, " + ", ".join(sorted(c["throughput_unit"].unique()))
                       + f" {source_tag(c)}")
    axes[0].set_yscale("log")
    axes[0].set_title("raw")
    axes[0].get_legend().remove()
    sns.lineplot(data=c, x="p_rel", y="t_rel", hue="job", style="gpu_model", marker="o", ax=axes[1])
    axes[1].plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="proportional (PFI = 1)")
    axes[1].set_xlabel("power / uncapped power")
    axes[1].set_ylabel(f"throughput / uncapped {source_tag(c)}")
    axes[1].set_title("normalised")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("Power–throughput under per-GPU power caps")
    fig.text(0.01, -0.02, "Sources — " + source_note(c, by="gpu_model"), fontsize=8, ha="left",
             va="top")
    fig.tight_layout()
    return save_figure(fig, out)


def _pfi_by_category(ax: Axes, p: pd.DataFrame) -> None:
    """Each job's PFI at its category, spread evenly across the category's width (the same
    places on every redraw), with its 95 % interval from pfi.csv (`pfi_lo`, `pfi_hi`) as whiskers
    where the table has one (none where they are NaN), and the category's median as a bar."""
    cats = list(dict.fromkeys(p["category"]))
    models = list(dict.fromkeys(p["gpu_model"])) if "gpu_model" in p.columns else [""]
    colors = dict(zip(models, sns.color_palette(n_colors=max(len(models), 1)), strict=False))
    labelled: set[str] = set()
    for i, cat in enumerate(cats):
        g = p[p["category"] == cat].reset_index(drop=True)
        xs = i + (np.linspace(-0.25, 0.25, len(g)) if len(g) > 1 else np.zeros(1))
        for x, (_, row) in zip(xs, g.iterrows(), strict=True):
            model = row["gpu_model"] if "gpu_model" in g.columns else ""
            y = float(row["pfi"])
            lo = float(row["pfi_lo"]) if "pfi_lo" in g.columns else np.nan
            hi = float(row["pfi_hi"]) if "pfi_hi" in g.columns else np.nan
            yerr = None
            if np.isfinite(lo) and np.isfinite(hi):
                yerr = [[max(y - lo, 0.0)], [max(hi - y, 0.0)]]
            ax.errorbar([x], [y], yerr=yerr, fmt="o", ms=6, color=colors[model], capsize=3,
                        lw=1, label=model if model not in labelled and model else None)
            labelled.add(model)
        ax.hlines(g["pfi"].median(), i - 0.3, i + 0.3, color="black", lw=2)
    ax.set_xticks(range(len(cats)), cats)
    ax.set_xlabel("category")


def fig_pfi(pfi: pd.DataFrame, features: pd.DataFrame | None, predictor: pd.DataFrame | None,
            out: Path) -> list[Path]:
    """Fig. 7: PFI by job category with medians; PFI vs DRAM copy product with the linear fit."""
    style()
    n = 2 if features is not None and len(features) else 1
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4.4), squeeze=False)
    ax = axes[0, 0]
    p = pfi.dropna(subset=["pfi"]).copy()
    if "category" not in p.columns:
        p["category"] = "all"
    _pfi_by_category(ax, p)
    ax.axhline(1, color="grey", ls="--", lw=1)
    ax.set_ylabel(f"PFI {source_tag(p)}")
    ax.set_title("PFI by job category (bar = median; whiskers: 95 % interval)")
    ax.legend(fontsize=8)
    if n == 2:
        assert features is not None
        ax = axes[0, 1]
        sns.scatterplot(data=features, x="dram_copy_product", y="pfi", hue="category", ax=ax, s=50)
        x = features["dram_copy_product"].to_numpy(float)
        slope, icpt = np.polyfit(x, features["pfi"].to_numpy(float), 1)
        xs = np.linspace(x.min(), x.max(), 50)
        lab = "linear fit"
        if predictor is not None:
            r = predictor[predictor["features"] == "dram_copy_product"].iloc[0]
            lab += f" (R² {r['r2_in_sample']:.2f}, LOO R² {r['r2_loo']:.2f})"
        ax.plot(xs, icpt + slope * xs, color="black", lw=1.2, label=lab)
        ax.set_xlabel("DRAM activity × memory-copy utilisation (uncapped run)")
        ax.set_ylabel(f"PFI {source_tag(pfi)}")
        ax.set_title("PFI vs telemetry")
        ax.legend(fontsize=8)
    fig.text(0.01, -0.02, "Sources — " + source_note(pfi, by="gpu_model"), fontsize=8, ha="left",
             va="top")
    fig.tight_layout()
    return save_figure(fig, out)


def fig_pfi_published(pfi: pd.DataFrame, out: Path) -> list[Path]:
    """PFI of each study job against the published value (95 % interval), and the 4-cap sub-grid
    PFI against Table 9. Measured values are drawn as measured; simulated-calibrated ones are
    drawn apart and say so; with no measured value the figure says "no measured values"."""
    style()
    p = pfi.dropna(subset=["pfi_published"]).copy()
    if "source" not in p.columns:
        p["source"] = "unknown"
    eq1 = "pfi_eq1" in p.columns  # compare under Eq. 1 as published, as the study computes it
    if eq1:
        p["pfi"] = p["pfi_eq1"]
        if "pfi_4cap_eq1" in p.columns:
            p["pfi_4cap"] = p["pfi_4cap_eq1"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    measured = p[p["source"].astype(str).str.contains("measured|nvml", regex=True)]
    other = p.drop(measured.index)
    lim = [1.0, max(3.4, float(np.nanmax(p[["pfi", "pfi_published"]].to_numpy(float))) + 0.1)]
    for ax, x, y, ttl in ((axes[0], "pfi_published", "pfi", "PFI on the job's own grid"),
                          (axes[1], "pfi_4cap_published", "pfi_4cap",
                           "PFI on the 4-cap grid 200/500/600/700 W (8-GPU groups, Table 9)")):
        ax.plot(lim, lim, color="grey", ls="--", lw=1)
        if x not in p.columns or y not in p.columns:
            ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center")
            continue
        for df, mk, lab in ((measured, "o", "measured"), (other, "x", None)):
            d = df.dropna(subset=[x, y])
            if not len(d):
                continue
            src = ",".join(sorted(d["source"].astype(str).unique()))
            xerr = None
            if (x == "pfi_published" and "pfi_published_lo" in d.columns
                    and d["pfi_published_lo"].notna().any()):
                # the published PFI is rounded to 2 decimals, its interval to 3: clip at 0
                xerr = np.clip(np.vstack([d[x] - d["pfi_published_lo"].fillna(d[x]),
                                          d["pfi_published_hi"].fillna(d[x]) - d[x]]), 0, None)
            ax.errorbar(d[x], d[y], xerr=xerr, fmt=mk, ms=6, capsize=2,
                        label=f"{lab or SOURCE_WORDS.get(src, src)} (n={len(d)})")
        if not len(measured.dropna(subset=[y])):
            ax.text(0.5, 0.92, "no measured values", transform=ax.transAxes, ha="center",
                    fontsize=12, color="firebrick", weight="bold")
        ax.set_xlim(lim)
        ax.set_ylim(lim)
        ax.set_xlabel("published PFI (study, H200)")
        ax.set_ylabel("this suite's PFI" + (" (Eq. 1 as published)" if eq1 else ""))
        ax.set_title(ttl, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    fig.text(0.01, -0.02, "Sources — " + source_note(p, by="gpu_model")
             + ". A simulated-calibrated curve matches the published PFI on its own grid by "
             "construction; its 4-cap PFI tests the simulator's curve shape.", fontsize=8,
             ha="left", va="top", wrap=True)
    fig.tight_layout()
    return save_figure(fig, out)

