"""The Slurm job a run measured in, as meta.json's `slurm` records it (issue 40).

A measuring process inside a job step holds: the job and step ids, the job's nodes, the CPUs it
may run on against the job's CPUs on its node, and the job's memory per node. The step's
environment lacks some of them: the executor plugin starts the job's `srun` with every
`SLURM_*` variable but the job id cleared, so `SLURM_MEM_PER_NODE` is absent there and
meta.json's memory was always null. The record reads what the environment has and asks
`scontrol show job` for the rest (memory per node, node list, name, comment), and the cgroup's
own memory limit where the node enforces one; each value says where it came from.

`job_record` is pure (environment, CPUs, `scontrol`'s text and the cgroup limit in); `current`
gathers them in this process (None outside Slurm).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_scontrol_job(text: str) -> dict[str, str]:
    """`Key=Value` pairs of `scontrol show job -o <id>` (one job; values without spaces, but
    the last key of a line, e.g. Command, may hold them)."""
    out: dict[str, str] = {}
    for tok in re.split(r"\s+(?=[A-Za-z/:]+=)", text.strip()):
        k, sep, v = tok.partition("=")
        if sep and k not in out:
            out[k] = v
    return out


def mem_mb(text: str | None) -> int | None:
    """MB of a Slurm memory value (`19284M`, `2G`, `19284`; None for anything else)."""
    m = _MEM.match((text or "").strip())
    return int(round(float(m[1]) * _MB[m[2]])) if m else None


def _first_int(text: str | None) -> int | None:
    """The first node's count of "N", "N(xK)" or "N,M(xK)"."""
    head = (text or "").split(",")[0].split("(")[0].strip()
    return int(head) if head.isdigit() else None


def job_record(env: Mapping[str, str], allowed: int, host: str, job: Mapping[str, str],
               cgroup_limit_mb: int | None) -> dict[str, Any]:
    """meta.json's `slurm`: job, step, nodes, CPUs allowed against the job's on this node, the
    job's memory per node (`SLURM_MEM_PER_NODE`, else scontrol's MinMemoryNode) and the
    enforced limit (the cgroup's memory.max; None: none readable), with their sources."""
    env_mem = mem_mb(env.get("SLURM_MEM_PER_NODE"))
    job_mem = mem_mb(job.get("MinMemoryNode"))
    return {
        "job_id": env.get("SLURM_JOB_ID"), "step_id": env.get("SLURM_STEP_ID"),
        "job_name": job.get("JobName"),  # (a step's SLURM_JOB_NAME is its command's, e.g. bash)
        "comment": job.get("Comment"),
        "host": host,
        "job_nodelist": job.get("NodeList") or env.get("SLURM_JOB_NODELIST"),
        "step_nodelist": env.get("SLURM_STEP_NODELIST"),
        "nodes": _first_int(job.get("NumNodes") or env.get("SLURM_JOB_NUM_NODES")
                            or env.get("SLURM_NNODES")),
        "cpus_allowed": allowed,
        "job_cpus_on_node": _first_int(env.get("SLURM_JOB_CPUS_PER_NODE")
                                       or env.get("SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0")),
        "mem_per_node_mb": env_mem if env_mem is not None else job_mem,
        "mem_per_node_from": ("SLURM_MEM_PER_NODE" if env_mem is not None
                              else "scontrol MinMemoryNode" if job_mem is not None else None),
        "mem_limit_mb": cgroup_limit_mb,
        "mem_limit_from": "cgroup memory.max" if cgroup_limit_mb is not None else None,
        "partition": job.get("Partition"),
    }


def cgroup_memory_limit_mb(proc: str = "/proc/self/cgroup",
                           root: str = "/sys/fs/cgroup") -> int | None:
    """This process's cgroup v2 memory limit in MB (None: unlimited, v1 or unreadable)."""
    try:
        lines = Path(proc).read_text().splitlines()
        rel = next(ln.split(":", 2)[2] for ln in lines if ln.startswith("0::"))
        value = (Path(root) / rel.lstrip("/") / "memory.max").read_text().strip()
    except (OSError, StopIteration, IndexError):
        return None
    return int(value) // (1 << 20) if value.isdigit() else None


def scontrol_job(job_id: str, timeout: float = 10) -> dict[str, str]:
    """`scontrol show job -o <id>` as key/value pairs ({} when it does not answer)."""
    try:
        p = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_scontrol_job(p.stdout) if p.returncode == 0 else {}


_RECORDS: dict[tuple[str, str | None, str], dict[str, Any]] = {}


def current(host: str | None = None,
            allocation: Callable[[str, str], tuple[int, int | None] | None] | None = None
            ) -> dict[str, Any] | None:
    """This process's Slurm job record (None outside a Slurm job). Asked once per process and
    step: the step check at start asks `scontrol` (with `allocation`, the job's CPUs and memory
    on this node: `slurm_site.job_allocation`), meta.json at the end reuses its answer (a job
    killed at its time limit has seconds left to write it)."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    key = (job_id, os.environ.get("SLURM_STEP_ID"), host or socket.gethostname().split(".")[0])
    if key not in _RECORDS:
        record = job_record(os.environ, len(os.sched_getaffinity(0)), key[2],
                            scontrol_job(job_id), cgroup_memory_limit_mb())
        alloc = allocation(job_id, key[2]) if allocation else None
        _RECORDS[key] = with_node_allocation(record, alloc)
    return dict(_RECORDS[key])


def with_node_allocation(record: dict[str, Any], alloc: tuple[int, int | None] | None
                         ) -> dict[str, Any]:
    """`record` with the job's CPUs and memory on this very node as the controller has them
    (`scontrol show job -d`; a partition mixing node sizes gives each node its own), where known:
    the environment's SLURM_JOB_CPUS_PER_NODE and MinMemoryNode are the first node's."""
    if alloc is None:
        return record
    out = {**record, "job_cpus_on_node": alloc[0]}
    if alloc[1]:
        out.update(mem_per_node_mb=alloc[1], mem_per_node_from="scontrol show job -d (this node)")
    return out
