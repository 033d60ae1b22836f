"""`wattlife` commands that measure power elasticity: sweep, pfi-sweep, aggregate-curves,
powercap."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from ..errors import InputError
from .options import floats

log = logging.getLogger(__name__)


def cmd_sweep(a: argparse.Namespace) -> int:
    """The config read and typed here, once; the sweep receives its `powercap` section."""
    from ..config import load_config, settings
    from ..sweeps.simulated import sweep_jobs

    df = sweep_jobs(settings(load_config(a.config)).powercap, a.output, job=a.job)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_pfi_sweep(a: argparse.Namespace) -> int:
    """The config (or the job's slice) read and typed here, once; the sweep receives `Settings`
    (and the file's path, which the launched command reads its sampler from)."""
    from ..config import load_config, settings
    from ..sweeps.failures import INFRASTRUCTURE_EXIT, InfrastructureFailure
    from ..sweeps.real import sweep_matrix_cap

    s = settings(load_config(a.config))
    try:
        df = sweep_matrix_cap(s, a.config, a.cell, a.cap, a.output, backend=a.backend)
    except InfrastructureFailure as exc:  # the job fails: Snakemake's retries, Slurm's requeue
        log.error(f"wattlife pfi-sweep: {exc}")
        return INFRASTRUCTURE_EXIT
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_aggregate_curves(a: argparse.Namespace) -> int:
    from ..sweeps.real import aggregate_curve_files

    df = aggregate_curve_files(a.curves, a.output, job=a.job, caps=a.caps)
    bad = df[df["status"] != "ok"]
    print(f"{a.output}: {df['job'].nunique()} jobs, {len(df)} caps, {len(bad)} not ok")
    if len(bad):
        print(bad[["job", "cap_w", "status"]].to_string(index=False))
    return 0


def cmd_powercap(a: argparse.Namespace) -> int:
    from ..devices.powercap import PowerCapController, restore_from_state

    if a.action == "restore":
        if not a.state:
            raise InputError("powercap restore: give --state, the powercap-state-<host>.json that "
                             "launch-node wrote beside the run's trace (or in its --state-dir)")
        if not Path(a.state).exists():
            if not a.missing_ok:
                raise InputError(f"--state {a.state}: no such file, nothing restored (a misspelt "
                                 "path? if no limit was ever saved there, give --missing-ok)")
            print(f"no state file {a.state}: no power limit was saved there, none to restore")
            return 0
        restored = restore_from_state(a.state)
        print(f"restored {len(restored)} GPU power limit(s) from {a.state}: {restored}")
        return 0
    if a.action == "save":  # a Slurm prolog (profiles/slurm/prolog.sh): the limits before a job
        from ..slurm_site import save_limits

        if not a.state:
            raise InputError("powercap save: give --state, the file to write the limits to")
        print(f"saved GPU power limits to {a.state}: {save_limits(a.state, a.backend)}")
        return 0
    ctl = PowerCapController(backend=a.backend, state_file=a.state or "powercap-state.json",
                             allow_real=False)
    print(json.dumps(ctl.describe(), indent=2))
    return 0


def _add_sweep(sub: Any) -> None:
    """The `sweep` command's parser."""
    sw = sub.add_parser("sweep", help="power-cap sweep of the jobs in a config")
    sw.add_argument("--config", required=True, help="config YAML with the jobs and the cap grid")
    sw.add_argument("-o", "--output", required=True, help="curves.csv to write")
    sw.add_argument("--job", help="only this job of the config (default: every job)")
    sw.set_defaults(fn=cmd_sweep)


def _add_pfi_sweep(sub: Any) -> None:
    """The `pfi-sweep` command's parser (`--backend` choices: the power-cap registry, the
    config's default first)."""
    from ..config.loading import schema_default
    from ..devices.powercap import cap_backend_choices

    ps = sub.add_parser("pfi-sweep", help="one cell of a config's pfi_matrix trained at one "
                                          "per-GPU cap (the cap on every GPU of every node), as "
                                          "one curve point",
                        description="Writes the curve point (status ok or failed: reason) and, "
                                    "beside it, workload.json, trace.csv, events.csv, meta.json, "
                                    "work/ (and nodes/<host>/, clock_offsets.csv for multi-node "
                                    "cells).")
    ps.add_argument("--config", required=True, help="the config (or the job's slice) with the "
                                                    "pfi_matrix")
    ps.add_argument("--cell", required=True, help="a key of pfi_matrix.cells")
    ps.add_argument("--cap", type=float, required=True, help="per-GPU power cap (W)")
    ps.add_argument("-o", "--output", required=True, help="the curve point to write, e.g. "
                                                          "<results>/pfi/<cell>/cap-<W>/curve-point.csv")
    ps.add_argument("--backend", choices=cap_backend_choices(schema_default("powercap", "backend")),
                    help="override powercap.backend (simulated: no real cap changes) "
                         "(default: the config's powercap.backend)")
    ps.set_defaults(fn=cmd_pfi_sweep)


def _add_aggregate_curves(sub: Any) -> None:
    """The `aggregate-curves` command's parser."""
    acu = sub.add_parser("aggregate-curves", help="assemble curve points / per-job curves into one "
                                                  "table (a `status` column: ok, failed: ..., "
                                                  "missing)")
    acu.add_argument("curves", nargs="+", help="curve-point.csv or curves.csv files")
    acu.add_argument("--job", help="the one job (cell) these points belong to (default: as read)")
    acu.add_argument("--caps", type=floats, help="the job's expected caps (W); a cap without a "
                                                  "point gets a row with status=missing (default: "
                                                  "none expected)")
    acu.add_argument("-o", "--output", required=True, help="the combined curves.csv to write")
    acu.set_defaults(fn=cmd_aggregate_curves)


def _add_powercap(sub: Any) -> None:
    """The `powercap` command's parser (`--backend` choices: the power-cap registry)."""
    from ..devices.powercap import cap_backend_choices

    pc = sub.add_parser("powercap", help="show GPU power limits, save them to or restore them "
                                         "from a state file")
    pc.add_argument("action", choices=["show", "save", "restore"],
                    help="show the limits, save them to the state file (a Slurm prolog), or "
                         "restore them from it")
    pc.add_argument("--state", help="for `save` and `restore` (required): the state file; for "
                                    "`restore` after a killed sweep, the "
                                    "powercap-state-<host>.json that launch-node wrote beside the "
                                    "trace (default: none)")
    pc.add_argument("--missing-ok", action="store_true",
                    help="for `restore`: a missing state file means nothing was saved, exit 0 "
                         "(a Slurm epilog after a job the prolog did not record) (default: a "
                         "missing file is an error)")
    pc.add_argument("--backend", default="nvml", choices=cap_backend_choices("nvml"),
                    help="for `show` and `save`: where to read the limits (default: "
                         "%(default)s)")
    pc.set_defaults(fn=cmd_powercap)


def add_parsers(sub: Any) -> None:
    """Add this group's parsers, in the order of `wattlife --help` (the module docstring's)."""
    _add_sweep(sub)
    _add_pfi_sweep(sub)
    _add_aggregate_curves(sub)
    _add_powercap(sub)
