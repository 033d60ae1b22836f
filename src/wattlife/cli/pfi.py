"""`wattlife` commands that analyse power elasticity: pfi, predict, allocate, pfi-study,
calibrate-sim."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from .options import floats


def cmd_pfi(a: argparse.Namespace) -> int:
    """With --config, the config read and typed here, once: the PFI table receives the study's
    labels of its cells (`study_labels`), never the file."""
    from ..analysis.pfi import compare_gpus, grid_sensitivity_files, pfi_files, study_labels

    labels = None
    if a.config is not None:
        from ..config import load_config, settings

        labels = study_labels(settings(load_config(a.config)))
    df = pfi_files(a.curves, a.output, grid=a.grid, n_mc=a.mc, seed=a.seed, labels=labels)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if a.subgrid:
        out = Path(a.output)
        sens = grid_sensitivity_files(a.curves, out.with_name(out.stem + "_subgrid.csv"),
                                      a.subgrid)
        print("\ngrid sensitivity:\n"
              + sens.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if a.compare:
        gpu_a, gpu_b = a.compare.split(",")
        print(f"\n{gpu_a} vs {gpu_b}: {compare_gpus(df, gpu_a, gpu_b)}")
    return 0


def cmd_predict(a: argparse.Namespace) -> int:
    from ..analysis.predictor import predictor_files

    df = predictor_files(a.curves, a.pfi, a.output)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_allocate(a: argparse.Namespace) -> int:
    from ..analysis.allocation import allocate_files

    summary = allocate_files(a.curves, a.output, cuts=a.cuts, n_workloads=a.workloads,
                             n_jobs=a.jobs, seed=a.seed, strategies=a.strategies, mix=a.mix,
                             pfi_path=a.pfi, objective=a.objective, exact=a.exact_oracle)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_pfi_study(a: argparse.Namespace) -> int:
    import pandas as pd

    from ..analysis.pfi_study import run_pfi_study

    paths = run_pfi_study(a.output, n_workloads=a.workloads, n_jobs=a.jobs, cuts=a.cuts,
                          seed=a.seed, a100=a.a100, figures=not a.no_figures,
                          sensitivity_workloads=a.sensitivity_workloads)
    for p in paths.values():
        print(p)
    g = pd.read_csv(paths["gap_recovered.csv"])
    print(g.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_calibrate(a: argparse.Namespace) -> int:
    from ..analysis.calibration import calibrate_files, calibrated_study_files

    if a.published:
        table = calibrated_study_files(a.published, a.output, noise=a.noise, seed=a.seed)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        return 0
    if not a.curves or a.tdp is None:
        raise InputError("calibrate-sim: give CURVES and --tdp, or --published JOBS.csv")
    doc = calibrate_files(a.curves, a.tdp, a.output)
    print(json.dumps(doc, indent=2, default=float))
    return 0


def _add_pfi(sub: Any) -> None:
    """The `pfi` command's parser."""
    f = sub.add_parser("pfi", help="Power Flexibility Index per job from curves.csv")
    f.add_argument("curves", help="curves.csv (the contract's columns) or an Emerald sweep CSV")
    f.add_argument("-o", "--output", required=True, help="pfi.csv to write")
    f.add_argument("--grid", type=floats, help="cap grid (W) to restrict to, e.g. 200,400,700 "
                                                "(default: every cap of each job)")
    f.add_argument("--mc", type=int, default=2000,
                   help="Monte Carlo draws for the interval (default 2000)")
    f.add_argument("--subgrid", type=floats,
                   help="also recompute on this sub-grid (grid sensitivity), e.g. 200,500,600,700 "
                        "(default: none)")
    f.add_argument("--compare", help="two GPU models, 'H200,H100': Spearman rho of their PFIs "
                                     "(default: none)")
    f.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")
    f.add_argument("--config", help="a config whose pfi_matrix cells give each job's paper_job: "
                                    "the published PFI (95 %% interval) and the 4-cap sub-grid PFI "
                                    "go beside the measured one (default: only if the curves carry "
                                    "a paper_job column)")
    f.set_defaults(fn=cmd_pfi)


def _add_predict(sub: Any) -> None:
    """The `predict` command's parser."""
    pr = sub.add_parser("predict", help="PFI predictor from telemetry: ablation table")
    pr.add_argument("curves", help="curves.csv with the uncapped run's telemetry columns")
    pr.add_argument("--pfi", required=True, help="pfi.csv of the same jobs (measured PFI)")
    pr.add_argument("-o", "--output", required=True,
                    help="predictor.csv to write (features beside it, <stem>_features.csv)")
    pr.set_defaults(fn=cmd_predict)


def _add_allocate(sub: Any) -> None:
    """The `allocate` command's parser."""
    al = sub.add_parser("allocate", help="simulate splitting a global power cut across jobs")
    al.add_argument("curves", help="curves.csv (or an Emerald sweep file)")
    al.add_argument("-o", "--output", required=True,
                    help="per-workload rows CSV; the summary is written beside it (*_summary.csv)")
    al.add_argument("--cuts", type=floats, default=[0, .05, .1, .15, .2, .25, .3, .35, .4],
                    help="global cuts as fractions of uncapped power (default 0,0.05,...,0.4)")
    al.add_argument("--workloads", type=int, default=500, help="workloads sampled (default 500)")
    al.add_argument("--jobs", type=int, default=100, help="jobs per workload (default 100)")
    al.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    al.add_argument("--mix", default="random",
                    help="'random' (default); 'production' (Hu et al. NSDI '24: 3.2%% pretraining "
                         "jobs, the rest fine-tuning; also production-seren, 0.9%%); category "
                         "weights like 'dense=0.5,moe_pt=0.2,moe_ft=0.3'; or task weights like "
                         "'task:pretrain=0.3,finetune=0.7'")
    al.add_argument("--objective", choices=["relative", "absolute"], default="relative",
                    help="throughput summed as each job's share of its uncapped throughput "
                         "(relative, default) or in the curves' units, e.g. tokens/s (absolute)")
    al.add_argument("--exact-oracle", action="store_true",
                    help="no time-sharing between two caps in the oracle: a MILP per workload "
                         "where the envelope bridges a dip (slow on noisy curves; default off)")
    al.add_argument("--pfi", help="pfi.csv (default: computed from the curves)")
    al.add_argument("--strategies", type=lambda s: s.split(","), default=None,
                    help="comma-separated subset of strategies (default: all)")
    al.set_defaults(fn=cmd_allocate)


def _add_pfi_study(sub: Any) -> None:
    """The `pfi-study` command's parser."""
    st = sub.add_parser("pfi-study", help="the study's allocation experiment on its 25 jobs "
                                          "(curves calibrated to the published PFIs) + A100 sweeps")
    st.add_argument("-o", "--output", default="results/reference/pfi-study",
                    help="folder for the tables and figures (default results/reference/pfi-study)")
    st.add_argument("--workloads", type=int, default=500, help="workloads (default 500)")
    st.add_argument("--jobs", type=int, default=100, help="jobs per workload (default 100)")
    st.add_argument("--cuts", type=floats, default=[0, .05, .1, .15, .2, .25, .3, .35, .4],
                    help="cuts (default 0,0.05,...,0.4)")
    st.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    st.add_argument("--a100", default="results/reference/a100-emerald/dvfs_sweep.csv",
                    help="measured sweeps run beside it (default the public A100 sweeps)")
    st.add_argument("--no-figures", action="store_true", help="tables only (default: draw figures)")
    st.add_argument("--sensitivity-workloads", type=int, default=100,
                    help="workloads per point of the sensitivity grid (assumed MFU x fine-tuning "
                         "share; default 100; 0: no grid)")
    st.set_defaults(fn=cmd_pfi_study)


def _add_calibrate_sim(sub: Any) -> None:
    """The `calibrate-sim` command's parser."""
    cs = sub.add_parser("calibrate-sim", help="fit the simulated GPU's parameters to measured "
                                              "sweeps")
    cs.add_argument("curves", nargs="?", help="measured sweeps to fit the shared parameters to")
    cs.add_argument("--tdp", type=float, help="TDP (W) of the measured GPU (required with CURVES; "
                                              "default: none)")
    cs.add_argument("--published", metavar="JOBS_CSV",
                    help="instead: calibrate one simulated job per row of the study's table "
                         "(e.g. results/reference/pfi-study/published/pfi-study-jobs.csv) to its "
                         "published PFI on its own grid; -o writes the curves (source "
                         "simulated/calibrated; default: none)")
    cs.add_argument("--noise", type=float, default=0.0,
                    help="with --published: relative within-run noise on every point (default 0)")
    cs.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    cs.add_argument("-o", "--output", help="write the fit as JSON (or, with --published, the "
                                           "curves CSV) (default: print only)")
    cs.set_defaults(fn=cmd_calibrate)


def add_parsers(sub: Any) -> None:
    """Add this group's parsers, in the order of `wattlife --help` (the module docstring's)."""
    _add_pfi(sub)
    _add_predict(sub)
    _add_allocate(sub)
    _add_pfi_study(sub)
    _add_calibrate_sim(sub)
