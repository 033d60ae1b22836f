"""How the PFI study's allocation headline moves with what it assumes (pure: tables in, tables out).

The headline (`pfi_study.gap_table`: the share of the equal->oracle gap PFI-aware recovers at
10/20/30 % cuts, absolute objective) rests on two assumptions, neither published by the study:
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

import numpy as np
import pandas as pd

from .allocation import PRODUCTION_MIXES, simulate_allocation
from .calibration import ASSUMED_MFU

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
