"""Fig. 9: each cell's energy split into work and waiting (at the idle floor, above it), and its
waiting energy by phase, per device kind, from `waiting_runs.csv` and `waiting.csv` (never from
raw state). Sources in every label."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from ..contracts import WAITING_PHASES, kind_label, kind_order
from .common import save_figure, source_tag, style

PARTS = (("work_j", "work", "#4c72b0"), ("at_floor_j", "waiting at idle floor", "#c7c7c7"),
         ("above_floor_j", "waiting above idle floor", "#dd8452"))
ORDER = list(WAITING_PHASES) + ["grad_sync (idle rank)"]
COLOURS = dict(zip(ORDER, sns.color_palette("tab20", len(ORDER)), strict=True))


def _cell(df: pd.DataFrame) -> pd.Series:
    return (df["workload"].astype(str) + "\n" + df["storage"].astype(str) + "\nckpt "
            + df["checkpoint"].astype(str))


def _split_panel(ax: Axes, d: pd.DataFrame) -> None:
    """Stacked work / at floor / above floor per cell (mean over runs), the waiting share and n
    written on each bar."""
    m = d.groupby("cell", sort=True)[[c for c, _, _ in PARTS] + ["energy_j"]].mean()
    n = d.groupby("cell", sort=True)["run_id"].nunique()
    bottom = pd.Series(0.0, index=m.index)
    for col, label, colour in PARTS:
        ax.bar(range(len(m)), m[col] / 1e3, bottom=bottom / 1e3, label=label, color=colour)
        bottom = bottom + m[col]
    for i, cell in enumerate(m.index):
        share = (m.loc[cell, "at_floor_j"] + m.loc[cell, "above_floor_j"]) / m.loc[cell,
                                                                                   "energy_j"]
        ax.text(i, bottom[cell] / 1e3, f"{share:.0%}\nn={n[cell]}", ha="center", va="bottom",
                fontsize=8)
    ax.set_xticks(range(len(m)), m.index, fontsize=8)
    ax.set_ylabel("energy per run (kJ)")
    ax.margins(y=0.15)


def _phase_panel(ax: Axes, d: pd.DataFrame) -> None:
    """Waiting energy per cell by phase (mean over the cell's runs; a run without the phase
    counts 0)."""
    runs = d.groupby("cell")["run_id"].nunique()
    e = d.groupby(["cell", "phase"])["energy_j"].sum().unstack(fill_value=0.0)
    e = e.div(runs.reindex(e.index), axis=0)
    bottom = pd.Series(0.0, index=e.index)
    for ph in [p for p in ORDER if p in e.columns] + sorted(set(e.columns) - set(ORDER)):
        ax.bar(range(len(e)), e[ph] / 1e3, bottom=bottom / 1e3, label=ph,
               color=COLOURS.get(ph, "#8c8c8c"))
        bottom = bottom + e[ph]
    ax.set_xticks(range(len(e)), e.index, fontsize=8)
    ax.set_ylabel("waiting energy per run (kJ)")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.margins(y=0.25)


def fig_waiting(runs: pd.DataFrame, out: Path, waiting: pd.DataFrame | None = None
                ) -> list[Path]:
    """Fig. 9: per cell (mean over its repeats) and device kind, stacked work / waiting at the
    idle floor / waiting above it in kJ with the waiting share on each bar; with `waiting`
    (waiting.csv), a second row: the waiting energy by phase."""
    style()
    r = runs.assign(cell=_cell(runs))
    kinds = sorted(r["device_kind"].unique(), key=kind_order)
    rows = 2 if waiting is not None and len(waiting) else 1
    ncol = max(len(kinds), 1)
    fig, axes = plt.subplots(rows, ncol, figsize=(5.5 * ncol, 4.2 * rows), squeeze=False)
    for j, kind in enumerate(kinds):
        d = r[r["device_kind"] == kind]
        _split_panel(axes[0][j], d)
        axes[0][j].set_title(f"{kind_label(kind)} {source_tag(d)}")
        if rows == 2 and waiting is not None:
            w = waiting[waiting["device_kind"] == kind]
            _phase_panel(axes[1][j], w.assign(cell=_cell(w)))
            axes[1][j].set_title(f"{kind_label(kind)} waiting by phase {source_tag(w)}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle("Work and waiting energy per cell (waiting share on each bar)")
    fig.tight_layout()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3)
    return save_figure(fig, out)
