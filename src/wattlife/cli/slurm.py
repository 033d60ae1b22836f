"""`wattlife slurm-orphans`: the Slurm jobs a killed controller left behind (README, "On Slurm")."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_slurm_orphans(a: argparse.Namespace) -> int:
    """List the run's jobs still pending or running; cancel them or wait for them. Exit 0 when
    none is left (a rerun cannot measure a cell twice), 3 while some are listed only."""
    from ..slurm_site import cancel_jobs, run_jobs, wait_jobs

    jobs = run_jobs(a.name)
    what = f"run {a.name}" if a.name else "the suite's runs (job names wattlife_*)"
    for j in jobs:
        print(f"{j.job_id}\t{j.state}\t{j.name}\t{j.comment}")
    if not jobs:
        print(f"no pending or running Slurm job of {what}: safe to rerun")
        return 0
    if a.cancel:
        cancel_jobs(jobs)
        print(f"cancelled {len(jobs)} job(s) of {what}; wait for them to leave the queue "
              "(--wait) before rerunning")
    if a.wait or a.cancel:
        wait_jobs(a.name, poll_s=a.poll_s)
        print(f"no pending or running Slurm job of {what}: safe to rerun")
        return 0
    print(f"{len(jobs)} job(s) of {what} still queued or running: --wait for them, or "
          "--cancel them, before rerunning (else a cell is measured twice)")
    return 3


def add_parsers(sub: Any) -> None:
    so = sub.add_parser(
        "slurm-orphans", help="after a killed controller: list, cancel or wait for its Slurm jobs",
        description="The Slurm jobs of a workflow run (squeue --me) that are still pending or "
                    "running, e.g. after the controller was killed; --cancel or --wait before "
                    "rerunning the workflow.")
    so.add_argument("--name", help="the run's Slurm run ID (its log: 'SLURM run ID: ...'); "
                                   "default: every job named wattlife_*")
    act = so.add_mutually_exclusive_group()
    act.add_argument("--cancel", action="store_true",
                     help="scancel them, then wait until gone (default: off: list only)")
    act.add_argument("--wait", action="store_true",
                     help="wait until none is left (default: off: list only)")
    so.add_argument("--poll-s", type=float, default=30,
                    help="seconds between checks (default: %(default)s)")
    so.set_defaults(fn=cmd_slurm_orphans)
