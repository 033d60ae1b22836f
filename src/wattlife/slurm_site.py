"""What a measuring job asks Slurm for, and how a run recovers after its controller was killed.

A measuring job (a training cell, a PFI cap) owns whole nodes of any size: `--exclusive` and
`--mem=0` (SBATCH_MEM_PER_NODE): every CPU and all the memory a job may have on each node,
whatever the partition mixes. It runs its measurement in a job step of its own that holds all of
it (`srun --whole`, wattlife.launch), and that step checks it holds every CPU the job has on its
node. The job lands on the partition / constraint its hardware profile names
(`slurm.partitions`, `slurm.constraints`).

The rules wire these (rules/common.smk); the functions here are pure apart from the few that
call `squeue`, `scancel` or `scontrol` (given `run`, for tests). A killed controller's jobs:
`wattlife.slurm_orphans`; site values checked at start: `wattlife.slurm_preflight`.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from .errors import SetupError

log = logging.getLogger(__name__)

Runner = Callable[..., subprocess.CompletedProcess[str]]

# the sbatch flags every measuring job needs (whole nodes: every CPU, all allocatable memory),
# kept whatever a user's `slurm_extra` says
MEASURING_EXTRA = ("--exclusive",)
NO_ACCOUNTING = ("this cluster has no Slurm accounting (AccountingStorageType={storage}): sacct "
                 "never sees a job end and the run would wait forever; add "
                 "--slurm-status-command squeue (and keep MinJobAge >= 300 s in slurm.conf)")


def _run(args: Sequence[str], run: Runner | None = None, timeout: float = 20) -> str | None:
    """stdout of a Slurm client command; None where it is absent or fails."""
    try:
        p = (run or subprocess.run)(list(args), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


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


def measuring_resources(slurm: Any, hardware: str | None = None) -> dict[str, Any]:
    """Everything a measuring job asks Slurm for besides nodes, GPUs and runtime: its placement,
    whole nodes whatever their size (`--exclusive` followed by the user's own flags,
    `slurm.extra`; and no `--mem`: `whole_node_memory` makes
    that every node's allocatable memory, RealMemory less MemSpecLimit), and one CPU for the
    executor's own step (`cpus_per_task`; the measurement runs in a step of its own holding the
    whole node, wattlife.launch.whole_step). `mem_mb` 0 keeps the profile's default memory off
    (the executor plugin then gives no --mem; it refuses one in slurm_extra). The config's
    `slurm.cpus_per_task` / `slurm.mem_mb` replace 1 / the whole node."""
    return {**placement(slurm, hardware), "slurm_extra": merge_extra(slurm.extra),
            "cpus_per_task": int(slurm.cpus_per_task or 1), "mem_mb": int(slurm.mem_mb or 0)}


def whole_node_memory(environ: MutableMapping[str, str]) -> None:
    """Make an `sbatch` without `--mem` ask for all of each node's memory: SBATCH_MEM_PER_NODE=0
    (sbatch's own input variable, = `--mem=0`) in the controller's environment, unless already
    set. A job with `--mem N` on its command line (every non-measuring job: the profile's
    default mem_mb) keeps N; a site default (DefMemPerCPU) no longer shrinks a measuring job."""
    environ.setdefault("SBATCH_MEM_PER_NODE", "0")


def node_request(nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """Nodes (and GPUs on each) of a measuring job, as the executor plugin takes them: a GPU job
    `--nodes=N --gres=gpu:G`; a CPU-only one also `--ntasks=N` (the plugin's default, one task,
    would shrink its allocation to one node)."""
    if gpus_per_node:
        return {"nodes": nodes, "gres": f"gpu:{gpus_per_node}"}
    return {"nodes": nodes, "tasks": nodes}


# -- the status query (orphans of a killed controller: wattlife.slurm_orphans) -------------


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


def count_cpu_ids(ids: str) -> int:
    """CPUs in a `CPU_IDs=` list such as "0-3,8,10-11"."""
    n = 0
    for part in ids.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def parse_job_detail(text: str, node: str,
                     expand: Callable[[str], list[str]]) -> tuple[int, int | None] | None:
    """(CPUs, memory MB) the job holds on `node`, from `scontrol show job -d` lines
    `Nodes=<host list> CPU_IDs=<ids> Mem=<MB> ...` (`expand`: a host list's names); None where
    no line names it."""
    for line in text.splitlines():
        m = re.match(r"\s*Nodes=(\S+)\s+CPU_IDs=(\S+)(?:\s+Mem=(\d+))?", line)
        if m and node in expand(m.group(1)):
            return count_cpu_ids(m.group(2)), int(m.group(3)) if m.group(3) else None
    return None


def job_allocation(job_id: str, node: str,
                   run: Runner | None = None) -> tuple[int, int | None] | None:
    """What job `job_id` holds on `node` (CPUs, memory MB), as the controller has it."""
    out = _run(["scontrol", "show", "job", "-d", job_id], run)

    def expand(hosts: str) -> list[str]:
        names = _run(["scontrol", "show", "hostnames", hosts], run)
        return names.split() if names else [hosts]

    return parse_job_detail(out, node, expand) if out else None


def step_view(env: Mapping[str, str], allowed: set[int], host: str,
              alloc: tuple[int, int | None] | None = None) -> dict[str, Any]:
    """What this process of a Slurm job holds: the CPUs it may run on against the job's CPUs on
    this node (`alloc`, the controller's (CPUs, MB) for it; else the job's environment, the
    first node's), the job's memory on the node and its nodes."""
    job_cpus = alloc[0] if alloc else _first_int(env.get("SLURM_JOB_CPUS_PER_NODE")
                                                 or env.get("SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"))
    mem = alloc[1] if alloc and alloc[1] else _first_int(env.get("SLURM_MEM_PER_NODE"))
    return {"host": host, "job_id": env.get("SLURM_JOB_ID"), "step_id": env.get("SLURM_STEP_ID"),
            "cpus_allowed": len(allowed), "job_cpus_on_node": job_cpus,
            "mem_per_node_mb": mem,
            "nodes": _first_int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"))}


def step_problem(view: Mapping[str, Any]) -> str | None:
    """Why a measurement must not run in this step (None: it may): it may use fewer CPUs than
    its job holds on the node (a 1-CPU step of a whole-node job)."""
    need, have = view.get("job_cpus_on_node"), view["cpus_allowed"]
    if view.get("job_id") and need and have < need:
        return (f"Slurm job {view['job_id']}: this step may run on {have} of the job's {need} "
                f"CPUs on {view['host']}; a measurement needs all of them (start it in a step "
                "of the whole node: `srun --whole --cpu-bind=none`, as wattlife.launch does)")
    return None


def check_step(host: str) -> dict[str, Any] | None:
    """Inside a Slurm job: print what this step holds against what the job holds on this node
    `host` (one line on stderr, into the run's log) and refuse (RuntimeError) a step that holds
    fewer CPUs than the job. Outside: None."""
    import json
    import os

    from .slurm_job import current

    if not os.environ.get("SLURM_JOB_ID"):
        return None
    # the environment's view, completed by scontrol (memory per node, node list: slurm_job)
    view = {**step_view(os.environ, os.sched_getaffinity(0), host),
            **(current(host, job_allocation) or {})}
    log.info(f"wattlife: slurm step {json.dumps(view, sort_keys=True)}")
    problem = step_problem(view)
    if problem:
        raise SetupError(problem)
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
