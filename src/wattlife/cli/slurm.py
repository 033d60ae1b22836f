"""`wattlife slurm-orphans` (the Slurm jobs a killed controller left behind) and `wattlife
slurm-energy` (each measuring job's energy beside Slurm's own accounting); README, "On Slurm"."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from ..errors import InputError

log = logging.getLogger(__name__)


def _orphan_scope(a: argparse.Namespace) -> tuple[list[str] | None, str]:
    """The run IDs to act on (None: every wattlife_* job) and how to name them."""
    from ..slurm_orphans import RUNS_FILE, recorded_runs

    if a.name:
        return [a.name], f"run {a.name}"
    if a.all:
        return None, "every run of the suite (job names wattlife_*)"
    if not a.results:
        raise InputError("give RESULTS (the results folder, the config's results_dir), --name "
                         "<SLURM run ID> or --all")
    names = recorded_runs(a.results)
    if not names:
        raise InputError(f"{Path(a.results) / RUNS_FILE}: no Slurm run recorded for results "
                         f"folder {a.results} (a run records its ID there at its start); "
                         "--name <SLURM run ID from the log> for one run, --all for every "
                         "wattlife_* job of yours")
    return names, f"the {len(names)} recorded run(s) of {a.results}"


def cmd_slurm_orphans(a: argparse.Namespace) -> int:
    """List the jobs still pending or running (what each measures); cancel them or wait for
    them. Exit 0 when none is left (a rerun cannot measure a cell twice), 3 while some are
    listed only."""
    from ..slurm_orphans import cancel_jobs, job_table, queued_jobs, wait_jobs

    names, what = _orphan_scope(a)
    jobs = queued_jobs(names)
    if not jobs:
        print(f"no pending or running Slurm job of {what}: safe to rerun")
        return 0
    print("\n".join(job_table(jobs)))
    if a.cancel:
        cancel_jobs(jobs)
        print(f"cancelled {len(jobs)} job(s) of {what}; waiting for them to leave the queue")
    if a.wait or a.cancel:
        wait_jobs(names, poll_s=a.poll_s, say=lambda s: print(s, flush=True))
        print(f"no pending or running Slurm job of {what}: safe to rerun")
        return 0
    print(f"{len(jobs)} job(s) of {what} still queued or running: --wait for them, or "
          "--cancel them, before rerunning (else a cell is measured twice)")
    return 3


def cmd_slurm_energy(a: argparse.Namespace) -> int:
    """Each measuring job's energy as the suite measured it beside Slurm's ConsumedEnergy."""
    from ..slurm_energy import energy_table, measuring_steps, query_accounting, suite_energy

    ours = suite_energy(Path(a.results))
    if ours.empty:
        log.warning(f"{a.results}: no run with a Slurm job in its meta.json")
        return 1
    slurm = query_accounting(sorted(set(ours["job_id"])), a.sacct, a.sstat, measuring_steps(ours))
    table = energy_table(ours, slurm)
    out = Path(a.output or Path(a.results) / "tables" / "slurm_energy.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    show = ["job_id", "cell", "suite_energy_j", "suite_source", "slurm_energy_j", "slurm_source",
            "difference_j", "difference_pct"]
    print(table[show].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.6g}"))
    print(f"written: {out}")
    return 0


def add_parsers(sub: Any) -> None:
    so = sub.add_parser(
        "slurm-orphans", help="after a killed controller: list, cancel or wait for its Slurm jobs",
        description="The Slurm jobs of a results folder's workflow runs (squeue --me) still "
                    "pending or running, e.g. after the controller was killed, each with the "
                    "cell and repeat it measures; --cancel or --wait before rerunning.")
    so.add_argument("results", nargs="?",
                    help="the results folder (the config's results_dir) whose runs' jobs to act "
                         "on: the runs recorded in RESULTS/slurm/runs.csv at their start "
                         "(required unless --name or --all)")
    scope = so.add_mutually_exclusive_group()
    scope.add_argument("--name", help="one run only: its Slurm run ID (its log: 'SLURM run ID: "
                                      "...') (default: the results folder's runs)")
    scope.add_argument("--all", action="store_true",
                       help="every job of yours named wattlife_*, whatever its results folder "
                            "(default: off)")
    act = so.add_mutually_exclusive_group()
    act.add_argument("--cancel", action="store_true",
                     help="scancel them, then wait until gone (default: off: list only)")
    act.add_argument("--wait", action="store_true",
                     help="wait until none is left, saying at each look what is left "
                          "(default: off: list only)")
    so.add_argument("--poll-s", type=float, default=30,
                    help="seconds between looks (default: %(default)s)")
    so.set_defaults(fn=cmd_slurm_orphans)
    se = sub.add_parser(
        "slurm-energy", help="each measuring job's GPU+CPU energy beside Slurm's ConsumedEnergy",
        description="Joins each measuring run of RESULTS (its meta.json's Slurm job) with "
                    "sacct's ConsumedEnergy (sstat's for a job still running) and shows both "
                    "and their difference; every energy column has its source. Needs a site "
                    "with an acct_gather_energy plugin, else Slurm's column is empty and says "
                    "why.")
    se.add_argument("results", help="the results folder (the config's results_dir)")
    se.add_argument("--sacct", metavar="FILE",
                    help="read sacct's answer from FILE (`sacct -P -j <ids> -o "
                         "JobID,State,Elapsed,NodeList,ConsumedEnergyRaw`, e.g. from the "
                         "cluster) instead of asking sacct (default: ask sacct)")
    se.add_argument("--sstat", metavar="FILE",
                    help="read sstat's answer from FILE instead of asking sstat for running "
                         "jobs (default: ask sstat)")
    se.add_argument("-o", "--output",
                    help="the table (default: RESULTS/tables/slurm_energy.csv)")
    se.set_defaults(fn=cmd_slurm_energy)
