"""One controller per results folder: `<results>/.wattlife-controller.lock` (host, pid, Slurm
job, start), the suite's own lock, separate from Snakemake's (which any run's `--unlock` or
unlock removes for all). Taken by the Snakefile's `onstart` (the controller only, never a job,
never a dry run), released at its end; a second controller on the same results folder refuses at
start with one line naming the first. A lock whose holder has ended (its Slurm job left the
queue, or its process on this host is gone: a killed controller) is taken over."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SetupError
from ..runlock import describe, holder_alive, owner_here, slurm_job_alive, take_file

LOCK = ".wattlife-controller.lock"


def controller_lock(results: str | Path) -> Path:
    return Path(results) / LOCK


def take(results: str | Path, me: dict[str, Any] | None = None,
         job_alive: Callable[[str], bool] = slurm_job_alive) -> Path:
    """Take the results folder's controller lock; RuntimeError (one line naming the holder: its
    Slurm job if it runs in one, host, pid) if a live controller holds it."""
    lock = controller_lock(results)
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = me or owner_here()
    for _ in range(2):
        if take_file(lock, me):
            return lock
        try:
            doc = json.loads(lock.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            doc = {"host": "?", "pid": "?"}
        if holder_alive(doc, me, job_alive):
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(doc.get("started") or 0))
            raise SetupError(
                f"{results}: another controller runs on this results folder: {describe(doc)}, "
                f"since {since} ({lock}); wait for it to end, or remove the lock if it is gone")
        lock.unlink(missing_ok=True)
    raise SetupError(f"{lock}: cannot take the controller lock (another controller took it)")


def release(results: str | Path, pid: int | None = None) -> None:
    """Release the lock if it is this process's (`pid`: the holder's, default this one)."""
    lock = controller_lock(results)
    try:
        doc = json.loads(lock.read_text())
    except (OSError, ValueError):
        return
    if doc.get("pid") == (pid if pid is not None else owner_here()["pid"]) \
            and doc.get("host") == owner_here()["host"]:
        lock.unlink(missing_ok=True)
