"""Two GPU models side by side, one figure per workload, from `compare_cells.csv`
(`analysis.gpu_compare`): step throughput, mean power over the steady steps, GPU energy per item,
the idle floors, and the largest phases' shares of GPU energy; each bar a model's mean over its
repeats with its 95 % t interval (no bar whisker where n = 1, said in the legend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .common import save_figure, style

PANELS = [("throughput", "step throughput (items/s)"),
          ("steady_power_w", "mean GPU power, steady steps (W)"),
          ("j_per_item", "GPU energy per item, steady steps (J)"),
          ("idle_w", "GPU idle floor, no context (W)"),
          ("context_idle_w", "GPU idle floor, CUDA context (W)")]
TOP_PHASES = 6


def _bars(ax: Axes, rows: pd.DataFrame, sides: list[tuple[str, str]]) -> None:
    """One group of bars a row (cell or phase), one bar a model, whiskers at the t95 bounds."""
    x = np.arange(len(rows))
    width = 0.8 / len(sides)
    for k, (side, colour) in enumerate(sides):
        mean = rows[f"mean_{side}"].to_numpy(float)
        lo, hi = rows[f"lo_{side}"].to_numpy(float), rows[f"hi_{side}"].to_numpy(float)
        err = np.vstack([mean - lo, hi - mean])
        err = np.where(np.isfinite(err), err, 0.0)
        n = rows[f"n_{side}"].astype(int)
        label = f"{rows[side].iat[0]} (n = {'/'.join(map(str, sorted(set(n))))})"
        ax.bar(x + (k - (len(sides) - 1) / 2) * width, mean, width, yerr=err, capsize=3,
               color=colour, label=label)
    ax.set_xticks(x)


def draw_workload(cells: pd.DataFrame, workload: str, out: Path) -> list[Path]:
    """The figure of one workload (module docstring) as `out`/fig_gpu_compare_<workload>."""
    style()
    w = cells[(cells["workload"] == workload) & (cells["storage"] != "all")]
    sides = [("first", "tab:blue"), ("second", "tab:orange")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (metric, title) in zip(axes.flat, PANELS, strict=False):
        rows = w[w["metric"] == metric]
        _bars(ax, rows, sides)
        ax.set_xticklabels(rows["storage"] + "/" + rows["checkpoint"], rotation=20)
        ax.set_title(title, fontsize=10)
    shares = w[w["metric"].str.startswith("share:")]
    pooled = (shares.groupby("metric")[["mean_first", "mean_second"]].mean()
              .sum(axis=1).sort_values(ascending=False).index[:TOP_PHASES])
    rows = shares[(shares["metric"].isin(pooled)) & (shares["checkpoint"] == "on")
                  & (shares["storage"] == "local")]
    ax = axes.flat[-1]
    _bars(ax, rows, sides)
    ax.set_xticklabels(rows["metric"].str.removeprefix("share:"), rotation=30)
    ax.set_title("share of GPU energy, local / ckpt on", fontsize=10)
    axes.flat[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{workload}: {w['first'].iat[0]} vs {w['second'].iat[0]} — GPU measured "
                 f"(NVML); bars: mean over repeats, whiskers: 95 % t interval (none for n = 1)",
                 fontsize=10)
    return save_figure(fig, out / f"fig_gpu_compare_{workload}")


def draw_gpu_compare(cells: pd.DataFrame, out: Path) -> list[Path]:
    """One figure per workload of `compare_cells.csv`."""
    return [p for wl in sorted(set(cells["workload"])) for p in draw_workload(cells, wl, out)]
