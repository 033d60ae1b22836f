"""What a measuring job asks Slurm for, and how a run recovers after its controller was killed.

A measuring job (a training cell, a PFI cap) owns whole nodes: `--exclusive`, every CPU of the
node for the one task the executor starts it in (`cpus_per_task`: the node's CPUs), and the
node's memory (`mem_mb`: the node's memory); both read from `sinfo` for the job's partition
unless the config's `slurm` section gives them. The job lands on the partition / constraint its
hardware profile names (`slurm.partitions`, `slurm.constraints`).

The rules wire these (rules/common.smk); the functions here are pure apart from the few that
call `sinfo`, `squeue`, `scancel` or `scontrol` (given `run`, for tests).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Runner = Callable[..., subprocess.CompletedProcess]

# the sbatch flags every measuring job needs, kept whatever a user's `slurm_extra` says
MEASURING_EXTRA = ("--exclusive",)
NO_ACCOUNTING = ("this cluster has no Slurm accounting (AccountingStorageType={storage}): sacct "
                 "never sees a job end and the run would wait forever; add "
                 "--slurm-status-command squeue (and keep MinJobAge >= 300 s in slurm.conf)")


@dataclass(frozen=True)
class NodeShape:
    """The smallest node of a partition: its CPUs and memory (MB), as Slurm has them."""

    cpus: int
    mem_mb: int


def _run(args: Sequence[str], run: Runner | None = None, timeout: float = 20) -> str | None:
    """stdout of a Slurm client command; None where it is absent or fails."""
    try:
        p = (run or subprocess.run)(list(args), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def parse_sinfo(text: str, partition: str | None) -> NodeShape | None:
    """The smallest CPUs and memory of `partition`'s nodes (its default, marked `*`, when None)
    from `sinfo -h -N -o '%P|%c|%m'` lines (memory may end in `+`)."""
    cpus, mems = [], []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        part, c, m = parts
        if (partition is None and part.endswith("*")) or part.rstrip("*") == partition:
            try:
                cpus.append(int(c.rstrip("+")))
                mems.append(int(m.rstrip("+")))
            except ValueError:
                continue
    if not cpus:
        return None
    return NodeShape(min(cpus), min(mems))


_SHAPES: dict[str | None, NodeShape | None] = {}


def node_shape(partition: str | None, run: Runner | None = None) -> NodeShape | None:
    """The smallest node of `partition` from `sinfo` (once per partition and process); None
    where there is no Slurm here."""
    if partition not in _SHAPES or run is not None:
        out = _run(["sinfo", "-h", "-N", "-o", "%P|%c|%m"], run)
        _SHAPES[partition] = parse_sinfo(out, partition) if out else None
    return _SHAPES[partition]


def merge_extra(user: str | None, required: Sequence[str] = MEASURING_EXTRA) -> str:
    """A measuring job's `slurm_extra`: the suite's flags, then the user's own (a user extra adds
    to them, never replaces them)."""
    words = shlex.split(user or "")
    return " ".join([f for f in required if f not in words] + [shlex.quote(w) for w in words])


def placement(slurm: Any, hardware: str | None) -> dict[str, Any]:
    """Partition and constraint of a job on `hardware` (a hardware profile's name; None: a
    training cell): `slurm.partitions[hardware]`, else `slurm.gpu_partition`; the constraint
    `slurm.constraints[hardware]` where given. Plugin resource names."""
    parts: Mapping[str, str] = slurm.partitions or {}
    cons: Mapping[str, str] = slurm.constraints or {}
    out: dict[str, Any] = {}
    if slurm.account:
        out["slurm_account"] = slurm.account
    part = parts.get(hardware) if hardware else None
    if part or slurm.gpu_partition:
        out["slurm_partition"] = part or slurm.gpu_partition
    if hardware and cons.get(hardware):
        out["constraint"] = cons[hardware]
    return out


def measuring_resources(slurm: Any, hardware: str | None = None,
                        run: Runner | None = None) -> dict[str, Any]:
    """Everything a measuring job asks Slurm for besides nodes, GPUs and runtime: its placement,
    `--exclusive` followed by the user's own flags (`slurm.extra`), the node's CPUs for its one
    task (`cpus_per_task`) and the node's memory (`mem_mb`). The config's `slurm.cpus_per_task` /
    `slurm.mem_mb` win over `sinfo`'s answer; without either (no Slurm here: a local run) they
    are left out."""
    res = {**placement(slurm, hardware), "slurm_extra": merge_extra(slurm.extra)}
    shape = node_shape(res.get("slurm_partition"), run)
    cpus = slurm.cpus_per_task or (shape.cpus if shape else None)
    mem = slurm.mem_mb or (shape.mem_mb if shape else None)
    if cpus:
        res["cpus_per_task"] = int(cpus)
    if mem:
        res["mem_mb"] = int(mem)
    return res


# -- after a killed controller ----------------------------------------------------------------


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    name: str
    comment: str


JOBNAME_PREFIX = "wattlife"  # profiles/slurm: slurm-jobname-prefix (job names wattlife_<run id>)


def parse_squeue(text: str, name: str | None = None,
                 prefix: str = JOBNAME_PREFIX) -> list[SlurmJob]:
    """Jobs from `squeue -h -o '%i|%T|%j|%k'` lines: those named `name` (a run's Slurm run ID,
    as its log says), else every one whose name starts with `<prefix>_` (every run of the
    suite)."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) != 4:
            continue
        job = SlurmJob(*parts)
        if (job.name == name) if name else job.name.startswith(f"{prefix}_"):
            jobs.append(job)
    return jobs


def run_jobs(name: str | None = None, run: Runner | None = None) -> list[SlurmJob]:
    """This user's pending and running Slurm jobs of the run `name` (every suite run: None)."""
    out = _run(["squeue", "-h", "--me", "-o", "%i|%T|%j|%k"], run)
    if out is None:
        raise RuntimeError("squeue failed: is Slurm reachable from here?")
    return parse_squeue(out, name)


def cancel_jobs(jobs: Sequence[SlurmJob], run: Runner | None = None) -> None:
    """Cancel `jobs` (scancel <ids>)."""
    if jobs and _run(["scancel", *(j.job_id for j in jobs)], run) is None:
        raise RuntimeError("scancel failed for " + " ".join(j.job_id for j in jobs))


def wait_jobs(name: str | None = None, poll_s: float = 30, run: Runner | None = None,
              sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once no job of the run `name` (every suite run: None) is pending or running."""
    while run_jobs(name, run):
        sleep(poll_s)


def accounting_storage(run: Runner | None = None) -> str | None:
    """AccountingStorageType of this cluster (`scontrol show config`); None where unknown."""
    out = _run(["scontrol", "show", "config"], run)
    for line in (out or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageType":
            return value.strip()
    return None


def status_preflight(status_command: str | None, run: Runner | None = None) -> str | None:
    """Why the executor's job-status query cannot work here (None: it can): `sacct` on a
    cluster without accounting never sees a job end."""
    if status_command not in (None, "sacct"):
        return None
    storage = accounting_storage(run)
    if storage and storage.endswith("/none"):
        return NO_ACCOUNTING.format(storage=storage)
    return None


# -- what a measuring step sees ---------------------------------------------------------------


def _first_int(text: str | None) -> int | None:
    """The first node's count of "N", "N(xK)" or "N,M(xK)"."""
    head = (text or "").split(",")[0].split("(")[0].strip()
    return int(head) if head.isdigit() else None


def step_view(env: Mapping[str, str], allowed: set[int], host: str) -> dict[str, Any]:
    """What this process of a Slurm job holds: the CPUs it may run on against the job's CPUs on
    the node, the job's memory per node and its nodes (environment of a job step)."""
    job_cpus = _first_int(env.get("SLURM_JOB_CPUS_PER_NODE")
                          or env.get("SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"))
    return {"host": host, "job_id": env.get("SLURM_JOB_ID"), "step_id": env.get("SLURM_STEP_ID"),
            "cpus_allowed": len(allowed), "job_cpus_on_node": job_cpus,
            "mem_per_node_mb": _first_int(env.get("SLURM_MEM_PER_NODE")),
            "nodes": _first_int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"))}


def step_problem(view: Mapping[str, Any]) -> str | None:
    """Why a measurement must not run in this step (None: it may): it may use fewer CPUs than
    its job holds on the node (a 1-CPU step of a whole-node job)."""
    need, have = view.get("job_cpus_on_node"), view["cpus_allowed"]
    if view.get("job_id") and need and have < need:
        return (f"Slurm job {view['job_id']}: this step may run on {have} of the job's {need} "
                f"CPUs on {view['host']}; a measurement needs all of them (give the measuring "
                "rules cpus_per_task = the node's CPUs: `slurm.cpus_per_task` or sinfo)")
    return None


def check_step(host: str) -> dict[str, Any] | None:
    """Inside a Slurm job: print what this step holds (one line on stderr, into the run's log)
    and refuse (RuntimeError) a step that holds fewer CPUs than the job. Outside: None."""
    import json
    import os
    import sys

    if not os.environ.get("SLURM_JOB_ID"):
        return None
    view = step_view(os.environ, os.sched_getaffinity(0), host)
    print(f"wattlife: slurm step {json.dumps(view, sort_keys=True)}", file=sys.stderr, flush=True)
    problem = step_problem(view)
    if problem:
        raise RuntimeError(problem)
    return view


# -- power caps on a cluster: the admin's prolog / epilog (profiles/slurm/{prolog,epilog}.sh) -----


def save_limits(state_file: str, backend: str) -> dict[int, float]:
    """Write this node's GPU power limits to `state_file` (the format `wattlife powercap restore`
    reads) before a job starts; an existing file (the prolog ran twice) keeps the oldest."""
    import json
    import os
    from pathlib import Path

    from .devices.powercap import PowerCapController

    path = Path(state_file)
    limits = {int(i): float(g["limit_w"])
              for i, g in PowerCapController(backend=backend).describe()["gpus"].items()}
    if path.exists():
        return limits
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"backend": backend, "pid": os.getpid(), "limits_w": limits}))
    tmp.replace(path)
    return limits
