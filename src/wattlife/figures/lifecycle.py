"""The lifecycle study's figures of the execution matrix, each from one run-level table, each
saying what its intervals are: fig. 1 (energy, energy per item and time per phase), fig. 2 (the
CPU / GPU share of the energy) and fig. 3 (storage and checkpoint effects, Welch intervals across
repeats, noise drawn apart).

With n >= 2 repeats an interval is the 95 % t interval across repeats; with one repeat there is
none, and the figures say so ("n = 1: no interval") instead of drawing run-to-run spread that was
not measured. The per-run attribution interval (`energy_lo_j`, `energy_hi_j`) is drawn only where
no across-repeat interval exists, and labelled as such.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from ..contracts import PER_STEP_PHASES, kind_colors, kind_label, node_part_kinds
from ..contracts.kinds import NODE
from ..contracts.sources import MEASURED, SOURCE_WORDS, source_basis
from .common import (
    PHASE_PALETTE,
    NothingToDraw,
    phase_sort,
    save_figure,
    source_note,
    source_tag,
    source_words,
    style,
)

CELL_COLORS = ("#2a7ab9", "#e08a2c", "#3a9a4a", "#9467bd")
NOISE = "within run-to-run noise"


def node_source_words(df: pd.DataFrame) -> str:
    """What a figure's caption says of the whole node (issue 45): its source(s) from the table's
    `node_source` column (or its `node` rows), or that none was read."""
    names: set[str] = set()
    if "node_source" in df.columns:
        names = {str(v) for v in df["node_source"].dropna()} - {"none", ""}
    elif "device_kind" in df.columns:
        names = {str(v) for v in df.loc[df["device_kind"] == NODE.name, "source"].dropna()}
    if not names:
        return "Node source — none (no whole-node power read: no node or node_rest rows)"
    # a source that is not a measurement (the emulator's) says so in the caption's own words
    said = [n if source_basis(n) == MEASURED else f"{n}: {SOURCE_WORDS.get(n, n)}"
            for n in sorted(names)]
    return (f"Node source — {', '.join(said)} (whole-node power; node_rest = node minus "
            "the measured GPU, CPU and DRAM, worst-case interval)")


def _n(df: pd.DataFrame) -> int:
    """The smallest number of repeats behind a table's rows (1 for tables without `n`)."""
    col = "n" if "n" in df.columns else "repeats" if "repeats" in df.columns else None
    return int(df[col].min()) if col and len(df) else 1


def _bars(ax: Axes, rows: pd.DataFrame, order: list[str], value: str, lo: str, hi: str,
          scale: float = 1.0) -> None:
    """Grouped horizontal bars, one per device kind, with the given interval columns."""
    kinds = [(k, c) for k, c in kind_colors().items() if k in set(rows["device_kind"])]
    h = 0.8 / max(len(kinds), 1)
    y = np.arange(len(order))
    for i, (kind, color) in enumerate(kinds):
        r = rows[rows["device_kind"] == kind].set_index("phase").reindex(order)
        v = r[value].to_numpy(float) / scale
        err = np.vstack([np.clip(v - r[lo].to_numpy(float) / scale, 0, None),
                         np.clip(r[hi].to_numpy(float) / scale - v, 0, None)])
        err = np.nan_to_num(err)
        ax.barh(y + (i - (len(kinds) - 1) / 2) * h, np.nan_to_num(v), h, color=color,
                label=kind_label(kind), xerr=err, error_kw={"lw": 0.8, "capsize": 2})
    ax.set_yticks(y, order)
    ax.invert_yaxis()


def _energy_interval(rows: pd.DataFrame, n: int) -> tuple[str, str, str]:
    """The interval columns fig. 1 draws and their words."""
    if n >= 2 and "energy_repeat_lo_j" in rows.columns:
        return ("energy_repeat_lo_j", "energy_repeat_hi_j",
                f"error bars: 95 % t interval across n = {n} repeats")
    return ("energy_lo_j", "energy_hi_j",
            "error bars: the per-run attribution interval (deconvolution / integration, 95 %); "
            f"n = {n}: no interval across repeats")


def _cell_label(workload: str, storage: str, checkpoint: str, sep: str = "\n") -> str:
    """'w<sep>storage s<sep>checkpoint c' ("\n": 'w\ns\nckpt c'); a run without a cell (storage
    and checkpoint empty) is its workload and 'no cell recorded'."""
    if not storage and not checkpoint:
        return f"{workload}{sep}no cell recorded"
    if sep == "\n":
        return f"{workload}\n{storage}\nckpt {checkpoint}"
    return f"{workload}{sep}storage {storage}, checkpoint {checkpoint}"


def _cells(summary: pd.DataFrame) -> pd.DataFrame:
    """Every cell of the matrix, in the table's order (fig. 1 draws one row for each)."""
    return summary.drop_duplicates(["workload", "storage", "checkpoint"])[
        ["workload", "storage", "checkpoint"]]


def _share_labels(ax: Axes, rows: pd.DataFrame, order: list[str], scale: float) -> None:
    """Each phase's share of the cell's energy (the node's parts: a `node` row holds them
    again), written after its bars."""
    parts = rows[rows["device_kind"].isin(node_part_kinds())] if "device_kind" in rows else rows
    per_phase = parts.groupby("phase")["energy_j"].sum().reindex(order).fillna(0.0)
    total = float(per_phase.sum())
    if total <= 0:
        return
    ends = rows.groupby("phase")["energy_j"].max().reindex(order).fillna(0.0) / scale
    if "energy_hi_j" in rows.columns:
        hi = rows.groupby("phase")["energy_hi_j"].max().reindex(order) / scale
        ends = np.fmax(ends, hi.fillna(0.0))
    for y, (phase, e) in enumerate(per_phase.items()):
        ax.text(float(ends[phase]), y, f" {e / total:.0%}", va="center", ha="left", fontsize=7)
    ax.set_xlim(right=float(np.nanmax(ends.to_numpy(float))) * 1.15 or None)


def _per_item_panel(ax: Axes, rows: pd.DataFrame, order: list[str], n: int) -> None:
    """Fig. 1's middle panel: energy per item of the per-step phases, or a note without items."""
    step = rows[rows["phase"].isin(PER_STEP_PHASES)]
    unit = (step["item_unit"].dropna().iloc[0]
            if "item_unit" in step.columns and step["item_unit"].notna().any() else "")
    if unit and "energy_per_item_j" in step.columns:
        s_order = [p for p in order if p in set(step["phase"])]
        step = step.copy()
        if n >= 2:
            plo, phi = "energy_per_item_repeat_lo_j", "energy_per_item_repeat_hi_j"
        else:  # the per-run attribution interval, per item
            k = step["energy_per_item_j"] / step["energy_j"].where(step["energy_j"] != 0)
            step["plo"], step["phi"] = step["energy_lo_j"] * k, step["energy_hi_j"] * k
            plo, phi = "plo", "phi"
        _bars(ax, step, s_order, "energy_per_item_j", plo, phi)
        ax.set_xlabel(f"energy per item ({unit}), per-step phases")
    else:
        ax.text(0.5, 0.5, "no item count recorded", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_title("per item (per-step phases)")


def _time_panel(ax2: Axes, rows: pd.DataFrame, order: list[str], n: int) -> None:
    """Fig. 1's right panel: time per phase, with the t95 across repeats where n >= 2."""
    t = rows.groupby("phase")["time_s"].max().reindex(order).fillna(0)
    terr = None
    if n >= 2 and "time_repeat_lo_s" in rows.columns:
        tl = rows.groupby("phase")["time_repeat_lo_s"].max().reindex(order).fillna(t)
        th = rows.groupby("phase")["time_repeat_hi_s"].max().reindex(order).fillna(t)
        terr = np.vstack([np.clip(t - tl, 0, None), np.clip(th - t, 0, None)])
    ax2.barh(order, t, color=[PHASE_PALETTE.get(p, "#999999") for p in order], xerr=terr,
             error_kw={"lw": 0.8, "capsize": 2})
    ax2.invert_yaxis()
    ax2.set_xlabel("time per run (s)")
    ax2.set_title("time per phase" + (" (t95 across repeats)" if terr is not None else
                                      f" (n = {n}: no interval)"))
    ax2.set_yticklabels([])


def fig_phase_energy(summary: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 1: one row per cell of the matrix: per phase, the energy of one run (per device kind,
    with each phase's share of the cell's energy), the energy per item of the per-step phases
    (J/image, J/1k tokens) and the time; error bars say what they are (across-repeat t95 with
    n >= 2, else the per-run attribution interval)."""
    if not len(summary):
        raise NothingToDraw("no phase rows")
    style()
    picked = _cells(summary)
    heights = [1.2 + 0.3 * summary[(summary["workload"] == c["workload"])
                                   & (summary["storage"] == c["storage"])
                                   & (summary["checkpoint"] == c["checkpoint"])]["phase"].nunique()
               for _, c in picked.iterrows()]
    fig, axes = plt.subplots(len(picked), 3, figsize=(17, 1.0 + sum(heights)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2, 2], "height_ratios": heights})
    notes = []
    for row, (_, cell) in enumerate(picked.iterrows()):
        rows = summary[(summary["workload"] == cell["workload"])
                       & (summary["storage"] == cell["storage"])
                       & (summary["checkpoint"] == cell["checkpoint"])]
        n = _n(rows)
        order = phase_sort(rows["phase"])
        lo, hi, words = _energy_interval(rows, n)
        label = _cell_label(cell["workload"], cell["storage"], cell["checkpoint"], " — ")
        if f"{cell['workload']}: {words}" not in notes:
            notes.append(f"{cell['workload']}: {words}")
        ax = axes[row, 0]
        _bars(ax, rows, order, "energy_j", lo, hi, scale=1000.0)
        _share_labels(ax, rows, order, scale=1000.0)
        ax.set_xlabel(f"energy per run (kJ) — {source_words(rows)}")
        ax.set_title(label + f" (n = {n}; % = share of the cell's energy)")
        ax.legend(loc="best", title="device")
        _per_item_panel(axes[row, 1], rows, order, n)
        _time_panel(axes[row, 2], rows, order, n)
    fig.suptitle("Energy and time per lifecycle phase (per run; per item for per-step phases)",
                 y=1.0)
    fig.text(0.01, -0.01, "\n".join(notes) + "\nSources — " + source_note(summary) + "\n"
             + node_source_words(summary), fontsize=8, ha="left", va="top")
    fig.tight_layout()
    return save_figure(fig, out)


def fig_device_share(share: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 2: CPU/GPU share of the energy per workload and cell."""
    if not len(share):
        raise NothingToDraw("no device share rows")
    style()
    share = share.copy()
    share["cell"] = [_cell_label(w, st, ck) for w, st, ck in
                     zip(share["workload"], share["storage"], share["checkpoint"], strict=True)]
    pv = share.pivot_table(index="cell", columns="device_kind", values="share").fillna(0) * 100
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(pv)), 4.5))
    bottom = np.zeros(len(pv))
    for kind, color in kind_colors().items():
        if kind in pv.columns:
            ax.bar(pv.index, pv[kind], bottom=bottom, color=color, label=kind_label(kind))
            for x, (b, v) in enumerate(zip(bottom, pv[kind], strict=True)):
                if v > 4:
                    ax.text(x, b + v / 2, f"{v:.0f}%", ha="center", va="center", color="white",
                            fontsize=9)
            bottom += pv[kind].to_numpy()
    ax.set_ylabel(f"share of energy (%)\n{source_words(share)}")
    ax.set_ylim(0, 100)
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title("CPU / GPU share of energy")
    fig.text(0.01, -0.1, "Sources — " + source_note(share) + "\n" + node_source_words(share),
             fontsize=8, ha="left", va="top")
    return save_figure(fig, out)


def effect_caption(deltas: pd.DataFrame) -> str:
    """What fig. 3's bars and error bars are, from the table's n."""
    n = _n(deltas)
    if n < 2:
        return ("n = 1: no interval — one run per cell, so no difference can be told from "
                "run-to-run variation; every bar is drawn hatched, unfilled (not established)")
    return (f"error bars: Welch 95 % interval of the difference of means (n ≥ {n} repeats per "
            f"cell); hatched, unfilled: {NOISE} (the interval includes 0); filled: the interval "
            "excludes 0")


def compared_cells(deltas: pd.DataFrame) -> pd.DataFrame:
    """The rows fig. 3 draws: every cell but the shared / checkpoint-off baseline, of workloads
    that have that baseline (`n_base` > 0; tables without `n_base` keep every workload)."""
    base = (deltas["storage"] == "shared") & (deltas["checkpoint"] == "off")
    d = deltas[~base].copy()
    if "n_base" in d.columns:
        d = d[d["n_base"].fillna(0) > 0]
    return d


def fig_storage_checkpoint(deltas: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 3: per phase, the effect of each cell against the shared / checkpoint-off baseline,
    energy and time, with Welch intervals; effects within run-to-run noise (or without an
    interval) are hatched and unfilled. A table without a cell beside its workload's baseline (a
    single run, or no shared / checkpoint-off cell) raises `NothingToDraw`."""
    d = compared_cells(deltas)
    if not len(d):
        raise NothingToDraw("no storage/checkpoint pair (a cell beside its workload's shared / "
                            "checkpoint-off baseline)")
    style()
    d["cell"] = d["storage"] + ", ckpt " + d["checkpoint"]
    cells = sorted(d["cell"].unique())
    workloads = sorted(d["workload"].unique())
    fig, axes = plt.subplots(len(workloads), 2, figsize=(13, 1.0 + 4.8 * len(workloads)),
                             squeeze=False)
    for r, w in enumerate(workloads):
        g = d[d["workload"] == w]
        order = phase_sort(g["phase"])
        y = np.arange(len(order))
        h = 0.8 / max(len(cells), 1)
        panels = (("d_energy_j", "d_energy_lo_j", "d_energy_hi_j", "significant",
                   f"Δ energy per run (J), GPU + CPU {source_tag(deltas)}", "energy"),
                  ("d_time_s", "d_time_lo_s", "d_time_hi_s", "significant_time",
                   "Δ time per run (s) — measured wall time", "time"))
        for c, (col, lo, hi, sig, label, what) in enumerate(panels):
            ax = axes[r, c]
            for i, (cell, color) in enumerate(zip(cells, CELL_COLORS, strict=False)):
                rows = g[g["cell"] == cell].set_index("phase").reindex(order)
                v = rows[col].to_numpy(float) if col in rows else np.full(len(order), np.nan)
                err = None
                if lo in rows and hi in rows:
                    err = np.nan_to_num(np.vstack([np.clip(v - rows[lo].to_numpy(float), 0, None),
                                                   np.clip(rows[hi].to_numpy(float) - v, 0,
                                                           None)]))
                est = (rows[sig].astype(str) == "True").to_numpy() if sig in rows else \
                    np.zeros(len(order), bool)
                yy = y + (i - (len(cells) - 1) / 2) * h
                bars = ax.barh(yy, np.nan_to_num(v), h, xerr=err, label=cell,
                               color=[color if e else "white" for e in est],
                               edgecolor=color,
                               error_kw={"lw": 0.8, "capsize": 2})
                for b, e in zip(bars, est, strict=True):
                    if not e:
                        b.set_hatch("///")
            ax.axvline(0, color="black", lw=0.8)
            ax.set_yticks(y, order if c == 0 else [""] * len(order))
            ax.invert_yaxis()
            ax.set_xlabel(label)
            ax.set_title(f"{w}: {what} vs shared storage, checkpoint off")
            handles = [Patch(color=col_, label=cell) for cell, col_ in
                       zip(cells, CELL_COLORS, strict=False)]
            handles.append(Patch(facecolor="white", edgecolor="#6e6e6e", hatch="///",
                                 label=NOISE if _n(deltas) >= 2 else "no interval (n = 1)"))
            ax.legend(handles=handles, fontsize=8, loc="upper center",
                      bbox_to_anchor=(0.5, -0.13), ncol=4, title=None)
    fig.text(0.01, -0.01, effect_caption(deltas) + "\nSources — " + source_note(deltas, by=None),
             fontsize=8, ha="left", va="top")
    fig.tight_layout()
    return save_figure(fig, out)
