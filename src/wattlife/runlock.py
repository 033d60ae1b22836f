"""One measuring job per run folder: a lock that names its Slurm job, host and process.

A cell (or PFI cap) whose controller was killed may still be running as an orphaned Slurm job
when the workflow is run again; a second job on the same cell would measure it twice and write
the same folder. The measuring entry points (`wattlife run`, `launch-node`, `pfi-sweep --cap`)
hold `<run folder>/.wattlife-run.lock` while they run: a job that finds it held by a live job
refuses to start, naming that job. A lock whose Slurm job has left the queue (or, outside
Slurm, whose process on this host has ended) is stale and taken over. Processes of the same
job (launch-node under pfi-sweep, every node of a multi-node job) share it through the
environment (`WATTLIFE_RUN_LOCK`).

(Separate from the fetch/upload destination locks of the preparation stage.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import SetupError

LOCK_NAME = ".wattlife-run.lock"
ENV = "WATTLIFE_RUN_LOCK"


def owner_here() -> dict[str, Any]:
    """Who takes a lock now: the Slurm job (if any), this host and process."""
    return {"job_id": os.environ.get("SLURM_JOB_ID"), "host": socket.gethostname(),
            "pid": os.getpid(), "started": time.time()}


def slurm_job_alive(job_id: str, run: Callable[..., Any] = subprocess.run) -> bool:
    """Whether Slurm still has the job queued or running (unknown: alive, the safe answer)."""
    try:
        p = run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return True
    if p.returncode != 0:  # squeue says "Invalid job id" for a job that has left the queue
        return "invalid job id" not in (p.stderr or "").lower()
    return bool(p.stdout.strip())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def holder_alive(doc: dict[str, Any], me: dict[str, Any],
                 job_alive: Callable[[str], bool] = slurm_job_alive) -> bool:
    """Whether the lock's holder `doc` may still be running (seen by `me`)."""
    if doc.get("job_id"):
        return job_alive(str(doc["job_id"]))
    if doc.get("host") == me.get("host"):
        return _pid_alive(int(doc.get("pid") or 0))
    return True  # another host, no Slurm job to ask: only its owner knows


def describe(doc: dict[str, Any]) -> str:
    job = f"Slurm job {doc['job_id']}" if doc.get("job_id") else "a process"
    return f"{job} (host {doc.get('host')}, pid {doc.get('pid')})"


def take_file(lock: Path, me: dict[str, Any]) -> bool:
    """Create `lock` with `me` in it, atomically (content and name at once); False if it exists."""
    tmp = lock.with_name(f"{lock.name}.{me['host']}.{me['pid']}.tmp")
    tmp.write_text(json.dumps(me))
    try:
        os.link(tmp, lock)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def run_folder_lock(folder: str | Path,
                    job_alive: Callable[[str], bool] = slurm_job_alive) -> Iterator[Path]:
    """Hold `folder`'s run lock while the body runs; RuntimeError if another live job holds it.
    Processes of one Slurm job (the nodes of a multi-node job) share it."""
    folder = Path(folder)
    lock = folder / LOCK_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # no folder, no run: the run itself refuses, naming its option
        yield lock
        return
    me = owner_here()
    if os.environ.get(ENV) == str(lock.resolve()):  # ours: taken by a parent of this process
        yield lock
        return
    for _ in range(2):  # a stale lock is removed once, then taken
        try:
            if take_file(lock, me):
                break
        except OSError:  # an unwritable folder: the run itself refuses, naming its option
            yield lock
            return
        try:
            doc = json.loads(lock.read_text())
        except FileNotFoundError:  # released meanwhile
            continue
        except (OSError, ValueError):
            doc = {"host": "?", "pid": "?"}
        if doc.get("job_id") and doc["job_id"] == me["job_id"]:  # another node of this job
            yield lock
            return
        if holder_alive(doc, me, job_alive):
            stop = ("cancel it (wattlife slurm-orphans --cancel)" if doc.get("job_id") else
                    f"stop it (kill {doc.get('pid')} on {doc.get('host')})")
            raise SetupError(
                f"{folder}: {describe(doc)} is measuring this run already ({lock}); wait for "
                f"it or {stop}, or remove the lock if it is gone")
        lock.unlink(missing_ok=True)
    else:
        raise SetupError(f"{lock}: cannot take the run lock (another job took it meanwhile)")
    before = os.environ.get(ENV)
    os.environ[ENV] = str(lock.resolve())
    try:
        yield lock
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
        lock.unlink(missing_ok=True)
