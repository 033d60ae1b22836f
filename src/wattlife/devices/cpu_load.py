"""CPU load of the run's own process tree beside the rest of the machine's (psutil, /proc).

The tree is CMD and its descendants (`watch_pid`, set by `wattlife run` once CMD has started):
the CPU time of each live process, plus what the tree's processes (CMD included) have reaped of
their ended children (`children_user` + `children_system`). A drop while an ended child waits to
be reaped is held at the previous total, so the sum never falls. Shares are of the whole machine
(all its CPUs, as `psutil.cpu_times` counts them): `job` = the tree's CPU seconds over wall time
x CPUs, `host` = the machine's busy share, `others` = host - job (never below 0). A descendant
that left the tree (reparented to wattlife, the subreaper, after its parent ended) is no longer
counted from then on."""

from __future__ import annotations

import time
from typing import Any

import psutil

#: others' mean share of the machine above which a run's CPU energy is flagged (meta.json's
#: sensor_notes and stderr): RAPL reads the whole package, the estimate its load
OTHERS_WARN_SHARE = 0.10


def tree_processes(pid: int | None, cache: dict[int, psutil.Process]
                   ) -> list[tuple[psutil.Process, bool]] | None:
    """The live process tree of `pid` (it and its descendants) as `cache`'s Process objects, each
    with whether it was first seen now; None when `pid` is None or gone. `cache` (pid -> Process)
    keeps one object per process across calls (psutil checks pid reuse on it, and per-object
    state such as `cpu_percent`'s last reading lives there); processes no longer in the tree are
    dropped from it. The one walk of CMD's tree (`TreeLoad`, the simulated GPU's activity)."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return None
    first = [p.pid not in cache for p in procs]
    out = [(cache.setdefault(p.pid, p), f) for p, f in zip(procs, first, strict=True)]
    for gone in set(cache) - {p.pid for p in procs}:
        del cache[gone]
    return out


def _busy_total() -> tuple[float, float]:
    t = psutil.cpu_times()
    total = sum(t)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


class TreeLoad:
    """Samples the job's and the machine's CPU shares; accumulates their means while CMD runs."""

    def __init__(self) -> None:
        self.watch_pid: int | None = None
        self.n_cpus = psutil.cpu_count() or 1
        self._tree_s = 0.0
        self._last = (time.monotonic(), 0.0, *_busy_total())
        self._procs: dict[int, psutil.Process] = {}
        self._sum = {"job": 0.0, "others": 0.0, "host": 0.0, "wall": 0.0}
        self.others_max = 0.0

    def tree_seconds(self) -> float:
        """CPU seconds of CMD's tree so far (module docstring); 0 before CMD started."""
        if self.watch_pid is None:
            return 0.0
        procs = tree_processes(self.watch_pid, self._procs)
        if procs is None:
            return self._tree_s
        total = 0.0
        for proc, _ in procs:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        self._tree_s = max(self._tree_s, total)
        return self._tree_s

    def sample(self) -> tuple[float, float, float]:
        """(job, host, others) shares of the machine since the previous sample."""
        t, tree0, busy0, total0 = self._last
        now, tree = time.monotonic(), self.tree_seconds()
        busy, total = _busy_total()
        self._last = (now, tree, busy, total)
        dt = now - t
        host = min(1.0, max(0.0, (busy - busy0) / (total - total0))) if total > total0 else 0.0
        job = min(1.0, max(0.0, (tree - tree0) / (dt * self.n_cpus))) if dt > 0 else 0.0
        others = max(0.0, host - job)
        if self.watch_pid is not None and dt > 0:
            for k, v in (("job", job), ("others", others), ("host", host), ("wall", 1.0)):
                self._sum[k] += v * dt
            self.others_max = max(self.others_max, others)
        return job, host, others

    def summary(self) -> dict[str, Any]:
        """Mean shares of the machine while CMD ran (meta.json's backend info)."""
        w = self._sum["wall"]
        mean = {k: (self._sum[k] / w if w else None) for k in ("job", "others", "host")}
        return {"scope": "process tree of CMD", "n_cpus": self.n_cpus,
                "job_cpu_share": mean["job"], "others_cpu_share": mean["others"],
                "host_cpu_share": mean["host"], "others_cpu_share_max": self.others_max,
                "job_cpu_s": self._tree_s}

    def warning(self, what: str) -> str | None:
        """One line when others' mean load passed OTHERS_WARN_SHARE, naming what it distorts."""
        s = self.summary()
        if s["others_cpu_share"] is None or s["others_cpu_share"] <= OTHERS_WARN_SHARE:
            return None
        return (f"other processes used {s['others_cpu_share']:.0%} of this machine's "
                f"{self.n_cpus} CPUs on average while the run's own tree used "
                f"{s['job_cpu_share']:.0%}: {what}")


class WatchesTree:
    """A backend with a `TreeLoad` (`self.load`): `wattlife run` sets `watch_pid` to CMD's pid
    (as it does for the simulated GPU), and reads `end_notes()` once the run has ended."""

    load: TreeLoad
    load_warning = "its CPU energy includes theirs"

    @property
    def watch_pid(self) -> int | None:
        return self.load.watch_pid

    @watch_pid.setter
    def watch_pid(self, pid: int | None) -> None:
        self.load.watch_pid = pid

    def end_notes(self) -> list[str]:
        """What meta.json's sensor_notes should say once the run has ended."""
        line = self.load.warning(self.load_warning)
        return [line] if line else []
