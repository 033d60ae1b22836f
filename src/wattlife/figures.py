"""Figures, each drawn from one table (never from raw state), PNG and PDF, one style. The
execution matrix's fig. 1 and fig. 3 live in `figures_lifecycle` (with their intervals).

Every figure carries the sources of its numbers: a label says when a value is simulated (`sim`)
or estimated (`estimate`), never letting them pass for measurements.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .contracts import COMPILE, LIFECYCLE_PHASES, UNATTRIBUTED, WARMUP  # noqa: E402

SOURCE_WORDS = {"sim": "SIMULATED", "estimate": "ESTIMATED", "measured": "measured",
                "simulated/calibrated": "SIMULATED (calibrated to published PFIs)",
                "nvml-samples": "measured (NVML samples)",
                "nvml-counter": "measured (NVML counter)",
                "nvml-poll": "measured (NVML)", "rapl": "measured (RAPL)"}
PHASE_ORDER = (["idle_baseline", "process_startup"] + LIFECYCLE_PHASES[:3] + ["tokenize"]
               + LIFECYCLE_PHASES[3:] + [COMPILE, WARMUP, "step", "process_exit", UNATTRIBUTED])
_PALETTE = dict(zip(PHASE_ORDER, sns.color_palette("tab20", len(PHASE_ORDER)), strict=True))


def style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                         "axes.titleweight": "bold", "legend.frameon": False})


def _sources(values: pd.Series) -> list[str]:
    """Distinct sources in a column whose cells may list several ('estimate,sim')."""
    return sorted(set(",".join(values.astype(str)).split(",")))


def _word(src: str, long: bool = False) -> str:
    w = SOURCE_WORDS.get(src, src)
    return f"{w} ({src})" if long else w.split(" (")[0]


def source_note(df: pd.DataFrame, by: str | None = "device_kind") -> str:
    """'GPU: SIMULATED (sim) · CPU: ESTIMATED (estimate)' from a table's source column."""
    if "source" not in df.columns:
        return "source unknown"
    groups = df.groupby(by)["source"] if by and by in df.columns else [("data", df["source"])]
    return " · ".join(f"{str(k).upper()}: " + ", ".join(_word(x, True) for x in _sources(s))
                      for k, s in groups)


def source_words(df: pd.DataFrame, by: str = "device_kind") -> str:
    """Short axis-label form: 'GPU SIMULATED, CPU ESTIMATED' (measured sources are named too)."""
    if "source" not in df.columns or by not in df.columns:
        return ""
    return ", ".join(f"{str(k).upper()} " + "/".join(_word(x) for x in _sources(s))
                     for k, s in df.groupby(by)["source"])


def source_tag(df: pd.DataFrame) -> str:
    """'(SIMULATED)', '(measured)', '(ESTIMATED, SIMULATED)' from a table's source column."""
    if "source" not in df.columns:
        return "(source unknown)"
    return "(" + ", ".join(_word(x) for x in _sources(df["source"])) + ")"


def _save(fig: plt.Figure, out: Path) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.with_suffix(".png"), out.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


def _phase_sort(phases: pd.Series) -> list[str]:
    known = [p for p in PHASE_ORDER if p in set(phases)]
    return known + sorted(set(phases) - set(known))


def fig_device_share(share: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 2: CPU/GPU share of the energy per workload and cell."""
    style()
    share = share.copy()
    share["cell"] = (share["workload"] + "\n" + share["storage"] + "\nckpt "
                     + share["checkpoint"].astype(str))
    pv = share.pivot_table(index="cell", columns="device_kind", values="share").fillna(0) * 100
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(pv)), 4.5))
    bottom = np.zeros(len(pv))
    for kind, color in (("gpu", "#2a7ab9"), ("cpu", "#e08a2c"), ("dram", "#7f7f7f")):
        if kind in pv.columns:
            ax.bar(pv.index, pv[kind], bottom=bottom, color=color, label=kind.upper())
            for x, (b, v) in enumerate(zip(bottom, pv[kind], strict=True)):
                if v > 4:
                    ax.text(x, b + v / 2, f"{v:.0f}%", ha="center", va="center", color="white",
                            fontsize=9)
            bottom += pv[kind].to_numpy()
    ax.set_ylabel(f"share of energy (%)\n{source_words(share)}")
    ax.set_ylim(0, 100)
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title("CPU / GPU share of energy")
    fig.text(0.01, -0.1, "Sources — " + source_note(share), fontsize=8, ha="left", va="top")
    return _save(fig, out)


def fig_downloads(rows: pd.DataFrame, fit: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 4: transfer energy and time vs size, per device kind, with the linear fit; markers
    by artefact kind (dataset, model) and direction."""
    style()
    d = rows[~rows["skipped"].astype(bool)].copy()
    d["gb"] = d["bytes"].astype(float) / 1e9
    d["what"] = np.where(d["direction"] == "upload", "upload", d["kind"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    kinds = sorted(d["device_kind"].unique())
    colors = dict(zip(["gpu", "cpu", "dram"], ["#2a7ab9", "#e08a2c", "#7f7f7f"], strict=True))
    markers = {"dataset": "o", "model": "s", "upload": "^"}
    xs = np.linspace(0, d["gb"].max() * 1.05 if len(d) else 1, 50)
    for kind in kinds:
        g = d[d["device_kind"] == kind]
        f = fit[(fit["device_kind"] == kind) & (fit["direction"] == "download")]
        for what, gg in g.groupby("what"):
            axes[0].scatter(gg["gb"], gg["energy_j"], color=colors.get(kind, "k"),
                            marker=markers.get(what, "o"), label=f"{kind.upper()} {what}", zorder=3)
            axes[0].errorbar(gg["gb"], gg["energy_j"], yerr=[gg["energy_j"] - gg["energy_lo_j"],
                             gg["energy_hi_j"] - gg["energy_j"]], fmt="none", ecolor="k", lw=0.7)
        if len(f) and np.isfinite(f["j_per_gb"].iat[0]):
            r = f.iloc[0]
            axes[0].plot(xs, r["j_intercept"] + r["j_per_gb"] * xs, color=colors.get(kind, "k"),
                         lw=1, label=f"{kind.upper()} fit: {r['j_per_gb']:.0f} J/GB, "
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
                if "loopback" in server else ""), fontsize=8, ha="left", va="top")
    fig.tight_layout()
    return _save(fig, out)


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
             "workload · Sources — " + source_note(be, by=None), fontsize=8, ha="left", va="top")
    fig.tight_layout()
    return _save(fig, out)


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
    return _save(fig, out)


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
    sns.stripplot(data=p, x="category", y="pfi", hue="gpu_model", ax=ax, size=7, jitter=0.15)
    for i, (_, g) in enumerate(p.groupby("category", sort=False)):
        ax.hlines(g["pfi"].median(), i - 0.3, i + 0.3, color="black", lw=2)
    ax.axhline(1, color="grey", ls="--", lw=1)
    ax.set_ylabel(f"PFI {source_tag(p)}")
    ax.set_title("PFI by job category (bar = median)")
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
    return _save(fig, out)


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
    return _save(fig, out)


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
    return _save(fig, out)


def draw_all(tables: str | Path, out: str | Path, expect: list[str] | None = None) -> list[Path]:
    """Every figure whose table exists in `tables` (`wattlife figures`, rule `figures`). With
    `expect` (figure paths), an error names those not drawn (their tables are missing?)."""
    from .figures_lifecycle import fig_phase_energy, fig_storage_checkpoint

    tables, out = Path(tables), Path(out)
    made: list[Path] = []

    def have(name: str) -> pd.DataFrame | None:
        p = tables / name
        return pd.read_csv(p) if p.exists() else None

    if (s := have("phase_summary.csv")) is not None:
        made += fig_phase_energy(s, out / "fig1_phase_energy_time")
    if (s := have("device_share.csv")) is not None:
        made += fig_device_share(s, out / "fig2_device_share")
    if (s := have("storage_checkpoint.csv")) is not None:
        made += fig_storage_checkpoint(s, out / "fig3_storage_checkpoint")
    if (s := have("waiting_runs.csv")) is not None:
        from .figures_waiting import fig_waiting
        made += fig_waiting(s, out / "fig9_waiting", have("waiting.csv"))
    if (s := have("downloads.csv")) is not None and (f := have("download_fit.csv")) is not None:
        made += fig_downloads(s, f, out / "fig4_download_size")
    if (tables / "staging_breakeven.csv").exists():
        try:
            be = pd.read_csv(tables / "staging_breakeven.csv")
        except pd.errors.EmptyDataError:
            be = pd.DataFrame(columns=["workload", "dataset_bytes", "breakeven_epochs", "source"])
        made += fig_staging(be, out / "fig5_staging_breakeven")
    if (s := have("curves.csv")) is not None:
        made += fig_curves(s, out / "fig6_power_throughput")
    if (s := have("pfi.csv")) is not None:
        made += fig_pfi(s, have("predictor_features.csv"), have("predictor.csv"), out / "fig7_pfi")
        if "pfi_published" in s.columns:
            made += fig_pfi_published(s, out / "fig7b_pfi_vs_published")
    if (s := have("allocation_summary.csv")) is not None:
        made += fig_allocation(s, out / "fig8_allocation")
    missing = [p for p in expect or [] if p not in {str(m) for m in made}]
    if missing:
        raise RuntimeError(f"figures not drawn (their tables are missing?): {missing}")
    return made


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
    sns.stripplot(data=ovh, x="mode", y="images_per_s", ax=ax, size=7,
                  order=["bare", "sampler", "markers"])
    med = ovh.groupby("mode")["images_per_s"].median()
    for i, m in enumerate(["bare", "sampler", "markers"]):
        ax.hlines(med[m], i - 0.3, i + 0.3, color="black")
    ax.set_ylabel("ResNet-50 images/s (measured)")
    ax.set_title("overhead (5 interleaved runs each; bar = median)")
    fig.tight_layout()
    return _save(fig, out)


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
    return _save(fig, out)


def draw_reference(ref_root: str | Path, out: str | Path) -> list[Path]:
    """Every figure of the committed reference results (no GPU), drawn from tables: the committed
    CSVs, and the tables `analysis.reference` makes from the raw ones (written under `out`)."""
    from .analysis.reference import A100_TABLES, H200_EXECUTION_TABLES, write_reference_tables
    from .figures_lifecycle import fig_phase_energy

    ref_root, out = Path(ref_root), Path(out)
    tables = write_reference_tables(ref_root, out)
    made: list[Path] = []
    h200 = ref_root / "h200"
    if (h200 / "sampler" / "accuracy_windows.csv").exists():
        made += fig_h200_sampler(h200 / "sampler", out / "h200_sampler")
    if (h200 / "attribution" / "comparison.csv").exists():
        made += fig_h200_attribution(h200 / "attribution", out / "h200_attribution")
    if f"{H200_EXECUTION_TABLES}/phase_summary.csv" in tables:
        made += fig_phase_energy(pd.read_csv(tables[f"{H200_EXECUTION_TABLES}/phase_summary.csv"]),
                                 out / "h200_fig1_phase_energy_time")
        made += fig_device_share(pd.read_csv(tables[f"{H200_EXECUTION_TABLES}/device_share.csv"]),
                                 out / "h200_fig2_device_share")
    if f"{A100_TABLES}/curves.csv" in tables:
        made += fig_curves(pd.read_csv(tables[f"{A100_TABLES}/curves.csv"]),
                           out / "a100_fig6_power_throughput")
        made += fig_pfi(pd.read_csv(tables[f"{A100_TABLES}/pfi.csv"]), None, None,
                        out / "a100_fig7_pfi")
        made += fig_allocation(pd.read_csv(tables[f"{A100_TABLES}/allocation_summary.csv"]),
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
