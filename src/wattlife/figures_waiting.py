"""Fig. 9: each cell's energy split into work and waiting (at the idle floor, above it), per
device kind, from `waiting_runs.csv` (never from raw state). Sources in every label."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from .figures import _save, source_tag, style

PARTS = (("work_j", "work", "#4c72b0"), ("at_floor_j", "waiting at idle floor", "#c7c7c7"),
         ("above_floor_j", "waiting above idle floor", "#dd8452"))


def fig_waiting(runs: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 9: per cell (mean over its repeats) and device kind, stacked work / waiting at the
    idle floor / waiting above it in kJ, with the waiting share written on each bar."""
    style()
    r = runs.copy()
    r["cell"] = (r["workload"].astype(str) + "\n" + r["storage"].astype(str) + "\nckpt "
                 + r["checkpoint"].astype(str))
    kinds = sorted(r["device_kind"].unique(), key=lambda k: (k != "gpu", k))
    fig, axes = plt.subplots(1, max(len(kinds), 1), figsize=(5.5 * max(len(kinds), 1), 4.2),
                             squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=False):
        d = r[r["device_kind"] == kind]
        m = d.groupby("cell", sort=True)[[c for c, _, _ in PARTS] + ["energy_j"]].mean()
        n = d.groupby("cell", sort=True)["run_id"].nunique()
        bottom = pd.Series(0.0, index=m.index)
        for col, label, colour in PARTS:
            ax.bar(range(len(m)), m[col] / 1e3, bottom=bottom / 1e3, label=label, color=colour)
            bottom = bottom + m[col]
        for i, cell in enumerate(m.index):
            share = (m.loc[cell, "at_floor_j"] + m.loc[cell, "above_floor_j"]) / m.loc[
                cell, "energy_j"]
            ax.text(i, bottom[cell] / 1e3, f"{share:.0%}\nn={n[cell]}", ha="center",
                    va="bottom", fontsize=8)
        ax.set_xticks(range(len(m)), m.index, fontsize=8)
        ax.set_ylabel("energy per run (kJ)")
        ax.set_title(f"{kind.upper()} {source_tag(d)}")
        ax.margins(y=0.15)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle("Work and waiting energy per cell (waiting share on each bar)")
    fig.tight_layout()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3)
    return _save(fig, out)
