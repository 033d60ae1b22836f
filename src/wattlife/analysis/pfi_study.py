"""The power-elasticity study's allocation experiment on its own 25 jobs (Sec. 6 of Emerald AI's
"Characterizing Job Power Elasticity for Power-Flexible AI Training").

The study's per-job curves are not published, only each job's PFI (Table 6). Here each job's curve
comes from the simulated GPU calibrated to that PFI on the job's own cap grid (source
`simulated/calibrated`); the uncapped tokens/s of each job is estimated from its size (see
`calibration.estimated_tokens_per_s`). On those curves: strategies equal, PFI-aware with the
measured (= published) and the predicted PFI, category, MoE-FT-weighted, telemetry and the oracle,
cuts 0-40 %, the random and the production mix, 500 workloads x 100 jobs; the share of the
equal->oracle gap PFI-aware recovers beside the paper's 63 % (production mix, 30 % cut), and how
that share moves with the assumed MFU behind the tokens/s and the production mix's fine-tuning
share (`sensitivity_grid`, below). The same allocation on the public A100 sweeps (measured) is
run beside it.

PFI: the curves are calibrated to the published PFIs under Eq. 1 as published (`pfi_eq1`); the
allocation's PFI-aware strategy weights by that value (the study's PFI-aware strategy weights by
its published PFI), not by the suite's noise rule (`pfi`, beside it in `pfi_calibrated.csv`).
Every table and panel built on the estimated tokens/s says `throughput_source = assumed (...)`.

Sensitivity (`sensitivity_grid`, `sensitivity_range`): how the headline moves with what it
assumes (pure: tables in, tables out). The headline (`gap_table`: the share of the equal->oracle
gap PFI-aware recovers at 10/20/30 % cuts, absolute objective) rests on two assumptions, neither
published by the study:
- each job's uncapped tokens/s, estimated from its size with an ASSUMED MFU (0.40 dense, 0.20 MoE,
  `calibration.ASSUMED_MFU`): PFI-aware (Eq. 2) divides by T_max and the objective adds tokens/s
  across jobs, so both the weights and the gap move with it. Each is scaled here by 0.5x..1.5x
  (dense and MoE apart; scaling both alike changes nothing, only their ratio matters);
- the production mix's fine-tuning share of the sampled jobs (`allocation.PRODUCTION_MIXES`: 96.8 %,
  every non-pretraining job of Hu et al.'s Kalos taken as fine-tuning).
At every grid point PFI-aware (predicted and measured PFI) stands beside `power_per_throughput`
(w = P_max/T_max, Eq. 2 with every PFI set to 1), which separates the share due to P_max/T_max
from the share PFI adds. The curves' shapes (and so each PFI) do not depend on either assumption;
only the throughput scale of each job does. Every row says `throughput_source = assumed (...)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from .allocation import PRODUCTION_MIXES, simulate_allocation
from .calibration import ASSUMED_MFU, CALIBRATED_SOURCE, calibrated_study_curves
from .pfi import pfi_table, with_published


class PaperGap(TypedDict):
    """The paper's headline allocation result: where it was measured and what it found."""

    mix: str
    cut: float
    gap_recovered: float
    tokens_per_s_per_job: float


PAPER_GAP_RECOVERED: PaperGap = {"mix": "production", "cut": 0.30, "gap_recovered": 0.63,
                                 "tokens_per_s_per_job": 1500.0}
CUTS = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4]


def gap_table(summary: pd.DataFrame, cuts: tuple[float, ...] = (0.1, 0.2, 0.3)) -> pd.DataFrame:
    """Share of the equal->oracle gap PFI-aware recovers at `cuts`, per mix and objective, with the
    throughput gained over the equal split per job and the paper's figure beside it."""
    s = summary[np.isin(summary["cut"].round(4), np.round(cuts, 4))]
    eq = s[s["strategy"] == "equal"].set_index(["mix", "objective", "cut"])["throughput_per_job"]
    orc = s[s["strategy"] == "oracle"].set_index(["mix", "objective", "cut"])["throughput_per_job"]
    out = s[s["strategy"].isin(["pfi_measured", "pfi_predicted", "power_per_throughput"])].copy()
    key = pd.MultiIndex.from_frame(out[["mix", "objective", "cut"]])
    out["gain_over_equal_per_job"] = (out["throughput_per_job"].to_numpy()
                                      - eq.reindex(key).to_numpy())
    out["oracle_gain_over_equal_per_job"] = orc.reindex(key).to_numpy() - eq.reindex(key).to_numpy()
    ref = PAPER_GAP_RECOVERED
    paper = ((out["mix"] == ref["mix"]) & np.isclose(out["cut"], ref["cut"])
             & (out["objective"] == "absolute"))
    out["paper_gap_recovered"] = np.where(paper, ref["gap_recovered"], np.nan)
    out["paper_gain_per_job_tokens_s"] = np.where(paper, ref["tokens_per_s_per_job"], np.nan)
    cols = ["mix", "objective", "strategy", "cut", "gap_recovered", "gain_over_equal_per_job",
            "oracle_gain_over_equal_per_job", "paper_gap_recovered", "paper_gain_per_job_tokens_s",
            "curves_source", "throughput_source", "flags"]
    return out[[c for c in cols if c in out.columns]].sort_values(
        ["mix", "objective", "strategy", "cut"])


CALIBRATION_TOL = 0.01  # |calibrated - published| PFI counted as met


def calibration_note(pfi: pd.DataFrame, tol: float = CALIBRATION_TOL) -> pd.Series:
    """Per row of the PFI table: how the calibrated PFI (Eq. 1) stands against the published one.
    'met' only within `tol` of the published PFI *and* inside its published 95 % interval
    (`pfi_published_lo`/`_hi`, where given); within `tol` but outside the interval says by how
    much (and whether the published PFI, rounded as printed, lies outside its own interval);
    else the miss of the closest curve that obeys the caps."""
    d = pfi["pfi_eq1"] - pfi["pfi_published"]
    lo = pfi.get("pfi_published_lo", pd.Series(np.nan, index=pfi.index))
    hi = pfi.get("pfi_published_hi", pd.Series(np.nan, index=pfi.index))
    notes = []
    for v, x, p, a, b in zip(d, pfi["pfi_eq1"], pfi["pfi_published"], lo, hi, strict=True):
        if abs(v) > tol:
            notes.append(f"closest physical curve misses by {v:+.3f}")
        elif pd.isna(a) or pd.isna(b) or a <= x <= b:
            notes.append(f"met (within {tol:g})")
        else:
            out = x - a if x < a else x - b
            own = "; the published PFI lies outside it too" if not a <= p <= b else ""
            notes.append(f"within {tol:g} of the published PFI ({v:+.2g}) but outside its 95 % "
                         f"interval [{a:g}, {b:g}] by {out:+.1e}{own}")
    return pd.Series(notes, index=pfi.index, dtype=object)


def _study_summary(curves: pd.DataFrame, weights: pd.DataFrame, cuts: list[float],
                   n_workloads: int, n_jobs: int, seed: int, mixes: tuple[str, ...],
                   objectives: tuple[str, ...]) -> pd.DataFrame:
    """The allocation summary of every (mix, objective) on the calibrated curves, with its
    sources."""
    summaries = []
    for mix in mixes:
        for obj in objectives:
            _, s = simulate_allocation(curves, cuts, n_workloads, n_jobs, seed=seed, mix=mix,
                                       pfi=weights, objective=obj)
            summaries.append(s)
    summ = pd.concat(summaries, ignore_index=True)
    summ["curves_source"] = CALIBRATED_SOURCE
    summ["throughput_source"] = np.where(summ["objective"] == "absolute", throughput_source(),
                                         "relative to each job's own uncapped run (none assumed)")
    return summ


def _a100_summary(a100: str | Path, out: Path, cuts: list[float], n_workloads: int,
                  n_jobs: int, seed: int) -> pd.DataFrame:
    """The allocation summary on the public A100 sweeps (measured curves), written to `out`."""
    from .curves import load_curves

    _, a100_summ = simulate_allocation(load_curves(a100), cuts, n_workloads, n_jobs, seed=seed)
    a100_summ["curves_source"] = "measured"
    a100_summ["throughput_source"] = "relative to each job's own uncapped run (measured)"
    a100_summ.to_csv(out / "allocation_a100_summary.csv", index=False, float_format="%.6g")
    return a100_summ


def _study_figures(out: Path, pfi: pd.DataFrame, summ: pd.DataFrame, grid: pd.DataFrame | None,
                   a100_summ: pd.DataFrame | None, mixes: tuple[str, ...],
                   objectives: tuple[str, ...]) -> dict[str, Path]:
    """The study's figures from its tables, and `worse_than_equal.json` (each (mix, objective)'s
    cuts where a heuristic does worse than the equal split). Returns the written paths."""
    from ..figures import fig_allocation, fig_pfi_published, fig_sensitivity, worse_than_equal_note

    written: dict[str, Path] = {}
    fig_pfi_published(pfi, out / "fig_pfi_vs_published")
    fig_allocation(summ, out / "fig_allocation_calibrated",
                   title="Allocation on the study's 25 jobs (curves SIMULATED, calibrated to "
                         "the published PFIs; absolute tokens/s ASSUMED)")
    written["fig_pfi_vs_published.png"] = out / "fig_pfi_vs_published.png"
    written["fig_allocation_calibrated.png"] = out / "fig_allocation_calibrated.png"
    if grid is not None:
        fig_sensitivity(grid, out / "fig_sensitivity", PAPER_GAP_RECOVERED["gap_recovered"])
        written["fig_sensitivity.png"] = out / "fig_sensitivity.png"
    notes = {f"{m}/{o}": worse_than_equal_note(
                 summ[(summ["mix"] == m) & (summ["objective"] == o)])
             for m in mixes for o in objectives}
    if a100_summ is not None:
        fig_allocation(a100_summ, out / "fig_allocation_a100",
                       title="Allocation on the public A100 sweeps (measured curves)")
        written["fig_allocation_a100.png"] = out / "fig_allocation_a100.png"
        notes["a100/random/relative"] = worse_than_equal_note(a100_summ)
    (out / "worse_than_equal.json").write_text(json.dumps(notes, indent=1) + "\n")
    written["worse_than_equal.json"] = out / "worse_than_equal.json"
    return written


def run_pfi_study(out: str | Path, n_workloads: int = 500, n_jobs: int = 100,
                  cuts: list[float] | None = None, seed: int = 0,
                  mixes: tuple[str, ...] = ("random", "production"),
                  objectives: tuple[str, ...] = ("relative", "absolute"),
                  a100: str | Path | None = None, figures: bool = True,
                  sensitivity_workloads: int = 100, sensitivity_kw: dict[str, Any] | None = None
                  ) -> dict[str, Path]:
    """Write the calibrated curves, PFI beside the published values, the allocation summaries,
    the gap table, the sensitivity grid (`sensitivity_workloads` workloads per point; 0: none)
    and (optionally) the figures under `out`. Returns the written paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cuts = cuts or CUTS
    written: dict[str, Path] = {}
    curves = calibrated_study_curves()
    curves["throughput_source"] = throughput_source()
    pfi = with_published(pfi_table(curves, n_mc=0), curves)
    pfi["calibration"] = calibration_note(pfi)
    weights = pfi.assign(pfi=pfi["pfi_eq1"])  # PFI-aware weights by the published formula
    summ = _study_summary(curves, weights, cuts, n_workloads, n_jobs, seed, mixes, objectives)
    gaps = gap_table(summ)
    from .predictor import job_features, predictor_table

    pred = predictor_table(job_features(curves, weights))  # the predictor behind `pfi_predicted`
    pred["source"] = CALIBRATED_SOURCE
    tables = [("curves_calibrated.csv", curves), ("pfi_calibrated.csv", pfi),
              ("allocation_summary.csv", summ), ("gap_recovered.csv", gaps),
              ("predictor_calibrated.csv", pred)]
    grid = None
    if sensitivity_workloads > 0:
        grid = sensitivity_grid(curves, weights, n_workloads=sensitivity_workloads,
                                n_jobs=n_jobs, seed=seed, **(sensitivity_kw or {}))
        grid["curves_source"] = CALIBRATED_SOURCE
        rng = sensitivity_range(grid, PAPER_GAP_RECOVERED["gap_recovered"])
        tables += [("sensitivity.csv", grid), ("sensitivity_range.csv", rng)]
    for name, df in tables:  # curves at full precision: every PFI recomputes from them
        df.to_csv(out / name, index=False,
                  float_format="%.12g" if name.startswith("curves") else "%.6g")
        written[name] = out / name
    a100_summ = None
    if a100 is not None and Path(a100).exists():
        a100_summ = _a100_summary(a100, out, cuts, n_workloads, n_jobs, seed)
        written["allocation_a100_summary.csv"] = out / "allocation_a100_summary.csv"
    if figures:
        written.update(_study_figures(out, pfi, summ, grid, a100_summ, mixes, objectives))
    return written


MFU_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5)
FT_SHARES = (0.5, 0.8, 0.9, PRODUCTION_MIXES["production"]["finetune"], 0.991)
SENSITIVITY_CUTS = (0.1, 0.2, 0.3)
SENSITIVITY_STRATEGIES = ["equal", "pfi_predicted", "pfi_measured", "power_per_throughput",
                          "oracle"]
GAP_COLUMNS = {"pfi_predicted": "gap_pfi_predicted", "pfi_measured": "gap_pfi_measured",
               "power_per_throughput": "gap_pmax_tmax"}


def throughput_source(dense: float = 1.0, moe: float = 1.0) -> str:
    """The words every table and panel built on the estimated tokens/s carries."""
    return (f"assumed (MFU dense {ASSUMED_MFU['dense'] * dense:.2f}, "
            f"MoE {ASSUMED_MFU['moe'] * moe:.2f}; tokens/s estimated from model size)")


def is_moe(curves: pd.DataFrame) -> np.ndarray:
    """True for the rows of MoE jobs (category moe_*)."""
    result: np.ndarray = curves["category"].astype(str).str.startswith("moe").to_numpy()
    return result


def scale_throughput(curves: pd.DataFrame, dense: float, moe: float) -> pd.DataFrame:
    """The curves with every dense job's throughput times `dense` and every MoE job's times `moe`
    (an assumed MFU scaled by that factor)."""
    out = curves.copy()
    factor = np.where(is_moe(out), moe, dense)
    for col in ("throughput", "throughput_sd"):
        if col in out.columns:
            out[col] = out[col] * factor
    return out


def sensitivity_grid(curves: pd.DataFrame, pfi: pd.DataFrame, n_workloads: int = 100,
                     n_jobs: int = 100, seed: int = 0,
                     mfu_factors: tuple[float, ...] = MFU_FACTORS,
                     ft_shares: tuple[float, ...] = FT_SHARES,
                     cuts: tuple[float, ...] = SENSITIVITY_CUTS) -> pd.DataFrame:
    """One row per (mix, fine-tuning share, dense MFU factor, MoE MFU factor, cut): the gap share
    PFI-aware (predicted, measured) and P_max/T_max alone recover, absolute objective.

    `pfi` is the PFI table the allocation weights by (its `pfi` column). The random mix has no
    fine-tuning share (NaN). Each point runs `n_workloads` x `n_jobs` with the same seed."""
    rows = []
    points = [("random", np.nan)] + [("production", s) for s in ft_shares]
    for mix, ft in points:
        spec = mix if np.isnan(ft) else f"task:pretrain={1 - ft:.6g},finetune={ft:.6g}"
        for fd in mfu_factors:
            for fm in mfu_factors:
                c = scale_throughput(curves, fd, fm)
                _, s = simulate_allocation(c, list(cuts), n_workloads, n_jobs, seed=seed,
                                           strategies=SENSITIVITY_STRATEGIES, mix=spec, pfi=pfi,
                                           objective="absolute", progress=False)
                w = s.pivot(index="cut", columns="strategy", values="gap_recovered")
                for cut in cuts:
                    r = w.loc[cut]
                    rows.append({"mix": mix, "ft_share": ft, "mfu_dense_factor": fd,
                                 "mfu_moe_factor": fm,
                                 "mfu_dense": ASSUMED_MFU["dense"] * fd,
                                 "mfu_moe": ASSUMED_MFU["moe"] * fm, "cut": cut,
                                 **{col: float(r.get(k, np.nan)) for k, col in GAP_COLUMNS.items()},
                                 "n_workloads": n_workloads, "n_jobs": n_jobs,
                                 "throughput_source": throughput_source(fd, fm)})
    out = pd.DataFrame(rows)
    out["pfi_minus_pmax_tmax"] = out["gap_pfi_predicted"] - out["gap_pmax_tmax"]
    return out


def sensitivity_range(grid: pd.DataFrame, paper: float | None = None) -> pd.DataFrame:
    """Per (mix, cut): min / median / max over the grid of each strategy's gap share, the value at
    the assumptions of the headline (factors 1, the production mix's own fine-tuning share) and,
    with `paper` (the study's 0.63: production mix, 30 % cut), whether it lies inside PFI-aware
    (predicted)'s range there."""
    base_ft = PRODUCTION_MIXES["production"]["finetune"]
    rows = []
    for (mix, cut), g in grid.groupby(["mix", "cut"], sort=True):
        at = g[(g["mfu_dense_factor"] == 1) & (g["mfu_moe_factor"] == 1)
               & (g["ft_share"].isna() | np.isclose(g["ft_share"], base_ft))]
        for col in list(GAP_COLUMNS.values()) + ["pfi_minus_pmax_tmax"]:
            v = g[col]
            row = {"mix": mix, "cut": cut, "quantity": col, "min": v.min(),
                   "median": v.median(), "max": v.max(),
                   "at_headline_assumptions": float(at[col].iloc[0]) if len(at) else np.nan,
                   "n_points": len(v), "throughput_source": "assumed (MFU dense "
                   f"{grid['mfu_dense'].min():.2f}-{grid['mfu_dense'].max():.2f}, MoE "
                   f"{grid['mfu_moe'].min():.2f}-{grid['mfu_moe'].max():.2f})"}
            if paper is not None and col == "gap_pfi_predicted" and mix == "production" \
                    and np.isclose(cut, 0.3):
                row["paper"] = paper
                row["paper_inside"] = bool(v.min() <= paper <= v.max())
            rows.append(row)
    return pd.DataFrame(rows)
