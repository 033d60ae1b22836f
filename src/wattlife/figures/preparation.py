"""The preparation study's figures: fig. 4 (transfer energy and time vs size) and fig. 5 (epochs
until staging to node-local disk pays for its copy), each from its table."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..contracts import kind_colors, kind_label
from .common import save_figure, source_note, source_tag, source_words, style
from .lifecycle import node_source_words


def fig_downloads(rows: pd.DataFrame, fit: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 4: transfer energy and time vs size, per device kind, with the linear fit; markers
    by artefact kind (dataset, model) and direction."""
    style()
    d = rows[~rows["skipped"].astype(bool)].copy()
    d["gb"] = d["bytes"].astype(float) / 1e9
    d["what"] = np.where(d["direction"] == "upload", "upload", d["kind"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    kinds = sorted(d["device_kind"].unique())
    colors = kind_colors()
    markers = {"dataset": "o", "model": "s", "upload": "^"}
    xs = np.linspace(0, d["gb"].max() * 1.05 if len(d) else 1, 50)
    for kind in kinds:
        g = d[d["device_kind"] == kind]
        f = fit[(fit["device_kind"] == kind) & (fit["direction"] == "download")]
        for what, gg in g.groupby("what"):
            axes[0].scatter(gg["gb"], gg["energy_j"], color=colors.get(kind, "k"),
                            marker=markers.get(what, "o"), label=f"{kind_label(kind)} {what}",
                            zorder=3)
            axes[0].errorbar(gg["gb"], gg["energy_j"], yerr=[gg["energy_j"] - gg["energy_lo_j"],
                             gg["energy_hi_j"] - gg["energy_j"]], fmt="none", ecolor="k", lw=0.7)
        if len(f) and np.isfinite(f["j_per_gb"].iat[0]):
            r = f.iloc[0]
            axes[0].plot(xs, r["j_intercept"] + r["j_per_gb"] * xs, color=colors.get(kind, "k"),
                         lw=1, label=f"{kind_label(kind)} fit: {r['j_per_gb']:.0f} J/GB, "
                                     f"R²={r['r2_energy']:.2f}")
    t = d.drop_duplicates("artefact")
    for what, gg in t.groupby("what"):
        axes[1].scatter(gg["gb"], gg["seconds"], color="#444", marker=markers.get(what, "o"),
                        label=what, zorder=3)
    f = fit[fit["direction"] == "download"]
    if len(f) and np.isfinite(f["s_per_gb"].iat[0]):
        r = f.iloc[0]
        axes[1].plot(xs, r["s_intercept"] + r["s_per_gb"] * xs, color="#444", lw=1,
                     label=f"fit: {r['s_per_gb']:.1f} s/GB, R²={r['r2_time']:.2f}")
    server = ", ".join(sorted(set(d["server"])))
    axes[0].set_xlabel("transferred (GB)")
    axes[0].set_ylabel(f"energy of the transfer phase (J)\n{source_words(d)}")
    axes[0].set_title("Energy vs size")
    axes[1].set_xlabel("transferred (GB)")
    axes[1].set_ylabel("wall time (s) — measured")
    axes[1].set_title(f"Time vs size (server: {server})")
    for ax in axes:
        ax.legend(fontsize=8, loc="upper left")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
    fig.text(0.01, -0.02, "Sources — " + source_note(d)
             + (" · server on this machine: its CPU time is in the energy"
                if "loopback" in server else "") + "\n" + node_source_words(d), fontsize=8,
             ha="left", va="top")
    fig.tight_layout()
    return save_figure(fig, out)


def fig_staging(be: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 5: epochs until staging to node-local disk pays for its copy, and the copy's energy,
    vs dataset size (the catalogue's datasets)."""
    from matplotlib.ticker import FuncFormatter

    style()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    notes, top = [], 1.0
    for w, g in be.groupby("workload"):
        gb = g["dataset_bytes"] / 1e9
        ep = g["breakeven_epochs"].iat[0]
        if np.isfinite(ep):
            ax.plot(gb, g["breakeven_epochs"], marker="o", label=f"{w}: {ep:.2g} epochs")
            top = max(top, 1.3 * ep)
        else:
            notes.append(f"{w}: never (local reads saved no energy here)")
        ax2.plot(gb, g["copy_energy_j"] / 1e3, marker="o", label=w)
    for a in (ax, ax2):
        a.set_xscale("log")
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        a.set_xlabel("dataset size (GB) — catalogue datasets")
    ax.set_ylim(0, top)
    ax.set_ylabel(f"break-even (epochs)\n{source_tag(be)}")
    ax.set_title("Epochs to repay the copy to local disk")
    ax2.set_yscale("log")
    ax2.set_ylabel(f"energy of the copy (kJ)\n{source_tag(be)}")
    ax2.set_title("Energy of staging the dataset")
    if notes:
        ax.text(0.02, 0.95, "\n".join(notes), transform=ax.transAxes, va="top", fontsize=9,
                bbox={"facecolor": "white", "edgecolor": "#999"})
    for a in (ax, ax2):
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=9, loc="lower right")
    fig.text(0.01, -0.02, "Copy energy per GB and data-loading energy saved per GB and epoch "
             "measured on the execution matrix; both linear in size, so one break-even per "
             "workload · Sources — " + source_note(be, by=None) + "\n" + node_source_words(be),
             fontsize=8, ha="left", va="top")
    fig.tight_layout()
    return save_figure(fig, out)

