"""CMD's whole process tree in a cgroup of its own (cgroup v2, Linux), so that one write to
`cgroup.kill` ends every process of it, wherever it moved (a new session, a double fork).

Why: killing `wattlife run` and its guardian by pid at the same moment left CMD's tree running
(issue 41): nothing of wattlife was left to act. With the tree in a cgroup, a third small process
(the sentinel: `guardian.py --sentinel`, its command line not naming wattlife) that only waits
on a pipe from wattlife writes `cgroup.kill` when wattlife dies without saying "done", whatever
became of the guardian. If all three are killed at once, nothing can act: the next `wattlife
run` started in the same cgroup ends what a dead run's cgroup still holds (`reap_leftovers`,
said on stderr).

The cgroup is a child of wattlife's own (`/proc/self/cgroup`'s `0::` line) on the cgroup v2
mount, named `wattlife-run-<pid>-<start time>` (the owner's pid and its /proc start time, so a
reused pid is not taken for the owner; the pid is read in this process's pid namespace, so two
pid namespaces sharing one parent cgroup would take each other's runs for dead: not guarded).
Where the mount is absent, read-only, or lacks `cgroup.kill` (Linux < 5.14),
`WorkloadCgroup.create` returns None with the reason, and the guardian's tree walk alone
protects the run (its limit: a guardian killed with wattlife). `WATTLIFE_CGROUP=off` turns it
off (tests of the walk alone)."""

from __future__ import annotations

import os
import time
from pathlib import Path

PREFIX = "wattlife-run-"
ENV_OFF = "WATTLIFE_CGROUP"
EMPTY_WAIT_S = 5.0


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `.../unified` on a hybrid
    host), from /proc/self/mountinfo; None without one."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


def own_cgroup() -> str | None:
    """This process's cgroup v2 path ('/...'), from /proc/self/cgroup's `0::` line."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:] or "/"
    except OSError:
        pass
    return None


def start_time(pid: int) -> str | None:
    """Process `pid`'s start time (ticks since boot, /proc/PID/stat field 22); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def parent_dir() -> tuple[Path | None, str]:
    """The directory this process's run cgroups live in, or None and why not."""
    mount, own = cgroup2_mount(), own_cgroup()
    if mount is None or own is None:
        return None, "no cgroup v2 hierarchy mounted"
    return mount / own.lstrip("/"), ""


class WorkloadCgroup:
    """One run's cgroup: `create`, `join_self` (in CMD's child before exec), `kill`, `remove`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls) -> tuple[WorkloadCgroup | None, str]:
        """A new cgroup for this process's CMD, or None and the reason (for meta.json)."""
        if os.environ.get(ENV_OFF, "").lower() in ("off", "0", "no"):
            return None, f"{ENV_OFF}=off"
        parent, why = parent_dir()
        if parent is None:
            return None, why
        me = os.getpid()
        path = parent / f"{PREFIX}{me}-{start_time(me)}"
        try:
            path.mkdir()
        except OSError as exc:
            return None, f"cannot create a cgroup in {parent}: {exc.strerror}"
        if not (path / "cgroup.kill").exists():
            path.rmdir()
            return None, f"{parent}: no cgroup.kill (Linux < 5.14)"
        return cls(path), ""

    def join_self(self) -> None:
        """Move the calling process into the cgroup (CMD's child, before exec: its descendants
        are born inside). Errors are left to `holds` to find."""
        try:
            with open(self.path / "cgroup.procs", "w") as fh:
                fh.write("0")
        except OSError:
            pass

    def holds(self, pid: int) -> bool:
        """Whether process `pid` is in this cgroup."""
        return str(pid) in self.pids()

    def pids(self) -> list[str]:
        try:
            return (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (the kernel's `cgroup.kill`)."""
        kill_cgroup(self.path)

    def remove(self) -> bool:
        """Kill what is left, wait until empty (bounded), remove the directory; whether removed."""
        return remove_cgroup(self.path)


def kill_cgroup(path: Path) -> None:
    try:
        (path / "cgroup.kill").write_text("1")
    except OSError:
        pass


def remove_cgroup(path: Path, wait_s: float = EMPTY_WAIT_S) -> bool:
    """`cgroup.kill`, wait until `cgroup.procs` is empty (killed processes leave it as they
    exit), then rmdir; whether the directory is gone."""
    kill_cgroup(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def leftovers(parent: Path) -> list[Path]:
    """Run cgroups under `parent` whose owner (the pid and start time in the name) is dead."""
    out: list[Path] = []
    try:
        entries = list(parent.glob(f"{PREFIX}*"))
    except OSError:
        return out
    for p in entries:
        pid, _, start = p.name[len(PREFIX):].partition("-")
        if pid.isdigit() and start_time(int(pid)) != start:
            out.append(p)
    return out


def reap_leftovers() -> list[str]:
    """End and remove the cgroups a killed run left beside this process's (its owner, guardian
    and sentinel all killed at once); one sentence per cgroup, for stderr."""
    parent, _ = parent_dir()
    if parent is None:
        return []
    lines = []
    for p in leftovers(parent):
        n = len(WorkloadCgroup(p).pids())
        gone = remove_cgroup(p)
        lines.append(f"ended {n} process(es) left by a killed wattlife run (cgroup {p})"
                     + ("" if gone else "; the cgroup could not be removed"))
    return lines
