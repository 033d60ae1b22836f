"""The checks of what a run writes besides trace and events: `meta.json` (`wattlife run`),
`phases.csv` (attribution) and `work/summary.json` (the workload)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..contracts import META_REQUIRED_KEYS, META_SAMPLER_KEYS, PHASES_METHODS, meta_problems
from .findings import (
    ERROR,
    FUTURE_SLACK_NS,
    INFO,
    MIN_EPOCH_NS,
    WARNING,
    Finding,
    capped,
    unit_guess,
)


def check_meta(meta: dict[str, Any], file: str, now_ns: int) -> list[Finding]:
    """meta.json: the keys `wattlife run` writes, a clean exit, a consistent clock."""
    f: list[Finding] = []
    missing = [k for k in META_REQUIRED_KEYS if k not in meta]
    if missing:
        f.append(Finding(ERROR, "meta.key-missing", file, None, f"missing key(s) {missing}"))
    sampler = meta.get("sampler")
    if isinstance(sampler, dict):
        miss = [k for k in META_SAMPLER_KEYS if k not in sampler]
        if miss:
            f.append(Finding(ERROR, "meta.key-missing", file, None,
                             f"missing key(s) {['sampler.' + k for k in miss]}"))
        if sampler.get("errors"):
            f.append(Finding(WARNING, "meta.sampler-errors", file, None,
                             f"the sampler reported errors: {sampler['errors']}"))
    for key, msg in meta_problems(meta):  # the contract's types (contracts.META_KEY_TYPES)
        code = "meta.schema-version" if key == "schema_version" else "meta.type"
        f.append(Finding(ERROR, code, file, None, msg))
    rc = meta.get("exit_code")
    if "exit_code" in meta and rc != 0:
        f.append(Finding(ERROR, "meta.exit-code", file, None,
                         f"the workload exited with code {rc}: the run is incomplete"))
    times = {k: meta.get(k) for k in ("start_ns", "workload_start_ns", "workload_end_ns", "end_ns")}
    for k, v in times.items():
        if k not in meta:
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            continue  # a meta.type finding above
        if v < MIN_EPOCH_NS:
            f.append(Finding(ERROR, "clock.before-2000", file, None,
                             f"{k}={v} is before 2000-01-01{unit_guess(float(v))}"))
        elif v > now_ns + FUTURE_SLACK_NS:
            f.append(Finding(ERROR, "clock.future", file, None, f"{k}={v} is in the future"))
    f += _wall_steps(meta.get("clock"), file)
    f += slurm_step(meta.get("slurm"), file)
    vals = [v for v in times.values() if isinstance(v, int) and not isinstance(v, bool)]
    if len(vals) == 4 and vals != sorted(vals):
        f.append(Finding(ERROR, "meta.clock-order", file, None,
                         "expected start_ns <= workload_start_ns <= workload_end_ns <= end_ns, "
                         f"got {times}"))
    return f


def slurm_step(rec: Any, file: str) -> list[Finding]:
    """meta.json's `slurm` (the job the run measured in, `slurm_job.job_record`) said in one
    line; a step that held fewer CPUs than its job on the node, or a memory Slurm did not say,
    warned about."""
    if not isinstance(rec, dict) or not rec.get("job_id"):
        return []
    mem, cpus = rec.get("mem_per_node_mb"), rec.get("cpus_allowed")
    need, lim = rec.get("job_cpus_on_node"), rec.get("mem_limit_mb")
    f = [Finding(INFO, "slurm.step", file, None,
                 f"Slurm job {rec['job_id']} step {rec.get('step_id')} on "
                 f"{rec.get('job_nodelist')} (this node {rec.get('host')}): {cpus} of the "
                 f"job's {need} CPUs on the node, "
                 f"{mem} MB per node ({rec.get('mem_per_node_from')}), enforced limit "
                 f"{f'{lim} MB' if lim is not None else 'none read'}")]
    if isinstance(cpus, int) and isinstance(need, int) and cpus < need:
        f.append(Finding(WARNING, "slurm.step-cpus", file, None,
                         f"the measurement could run on {cpus} of its job's {need} CPUs on the "
                         "node: the rest of the node's load was not the workload's"))
    if mem is None:
        f.append(Finding(WARNING, "slurm.memory-unknown", file, None,
                         "neither SLURM_MEM_PER_NODE nor scontrol said the job's memory per node"))
    return f


def _wall_steps(clock: Any, file: str) -> list[Finding]:
    """meta.json's `clock.wall_steps`: a wall-clock step during the run (NTP, a VM resumed) is
    reported; the run's timestamps are immune to it (contracts.clock), other tools' may not be."""
    steps = clock.get("wall_steps") if isinstance(clock, dict) else None
    if not steps or not isinstance(steps, list):
        return []
    sizes = [s.get("step_ns") for s in steps if isinstance(s, dict)]
    shown = ", ".join(f"{v / 1e9:+.3f} s" for v in sizes[:5] if isinstance(v, int))
    return [Finding(WARNING, "clock.wall-step", file, None,
                    f"the wall clock stepped {len(sizes)} time(s) during the run ({shown}); the "
                    f"run's timestamps come from {clock.get('clock', 'a steady clock')} mapped "
                    "once, so phases and energy are unaffected, but wall times logged by other "
                    "tools during the run are shifted by the step")]


def check_phases_table(ph: pd.DataFrame, file: str, max_rows: int = 5) -> list[Finding]:
    """phases.csv (numbers converted): a source on every row, a known method, energies ordered
    lo <= energy <= hi."""
    f: list[Finding] = []
    empty = (ph["source"].astype(str).str.strip() == "").to_numpy()
    if empty.any():
        f += capped(ERROR, "phases.source-missing", file, ph["line_no"][empty],
                     ["empty source"] * int(empty.sum()), max_rows)
    meth = ~ph["method"].isin(PHASES_METHODS).to_numpy()
    if meth.any():
        f += capped(WARNING, "phases.method", file, ph["line_no"][meth],
                     [f"method {m!r} is not one of {sorted(PHASES_METHODS)}"
                      for m in ph["method"][meth].head(max_rows)], max_rows)
    e, lo, hi = (ph[c].to_numpy(float) for c in ("energy_j", "energy_lo_j", "energy_hi_j"))
    with np.errstate(invalid="ignore"):
        tol = 1e-9 * np.maximum(np.abs(e), 1.0)
        order = (lo > e + tol) | (e > hi + tol)
    if order.any():
        f += capped(WARNING, "phases.interval", file, ph["line_no"][order],
                     [f"energy_j {r.energy_j} outside [{r.energy_lo_j}, {r.energy_hi_j}]"
                      for r in ph[order].head(max_rows).itertuples()], max_rows)
    return f


def check_summary(summary: dict[str, Any], ev: pd.DataFrame, file: str) -> list[Finding]:
    """work/summary.json against the events: its step count equals rank 0's `step` events."""
    return summary_findings(summary, rank0_steps(ev), file)


def rank0_steps(ev: pd.DataFrame) -> tuple[int, int] | None:
    """The lowest rank of the events and its `step` rows' count; None without rows."""
    if not len(ev):
        return None
    r0 = int(ev["rank"].min())
    return r0, int((ev.loc[(ev["rank"] == r0).to_numpy(), "phase"] == "step").sum())


def summary_findings(summary: dict[str, Any], steps: tuple[int, int] | None,
                     file: str) -> list[Finding]:
    """`check_summary` given the events' `rank0_steps` (added up over groups of ranks)."""
    f: list[Finding] = []
    for k in ("steps", "throughput", "throughput_unit"):
        if k not in summary:
            f.append(Finding(WARNING, "summary.key-missing", file, None, f"missing key {k!r}"))
    if isinstance(summary.get("steps"), int) and steps is not None:
        rank, n = steps
        if n != summary["steps"]:
            f.append(Finding(WARNING, "summary.steps", file, None,
                             f"summary counts {summary['steps']} steps, the events of rank "
                             f"{rank} hold {n}"))
    return f
