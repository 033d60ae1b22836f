"""No process started by `wattlife run` outlives it, however deep CMD's process tree (Linux).

Two parts (`wattlife.run` uses both):
- While wattlife lives, it is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a descendant whose
  parent dies (a wrapper's child, a daemon that forked twice) is re-parented to wattlife, not to
  PID 1, so when CMD has ended `end_leftovers` finds every descendant still alive by its parent
  chain, whatever process group or session it moved to (torchrun's workers call setsid), and ends
  it (SIGTERM, then SIGKILL).
- If wattlife itself is killed (SIGKILL, the OOM killer), nothing of it runs: the guardian, a
  small process started beside CMD (this file run as a script, stdlib only, in its own process
  group so a terminal's signals do not reach it), notices. It records CMD's tree every
  `SCAN_S` (pid, start time, group, session) and reads a pipe from wattlife: "cmd PID" when CMD
  has started, "done" when wattlife has ended CMD itself. End of file without "done" means wattlife
  died: the guardian stops (SIGSTOP) every recorded process still alive with the same start time,
  every process in a group or session that one of them leads (CMD's group included, so children
  started after the last scan are caught) and their descendants, until no new one appears, then
  SIGKILLs them all. Its command line (`python -S /dev/fd/N PID KEEP`: the script read through an
  inherited descriptor) does not name wattlife, so a `pkill -9 -f wattlife` that kills wattlife
  leaves it to act. The limit: a guardian killed by its own pid at the same time as wattlife
  leaves CMD's tree running (the kernel's PR_SET_PDEATHSIG ends CMD alone, and only where the
  guardian could not start: set while the guardian runs, it would kill CMD before the guardian
  walks its tree).
- Where CMD's tree is in a cgroup of its own (`workload_cgroup`), the guardian writes its
  `cgroup.kill` first, and a second process, the sentinel (`--sentinel`, stdlib only, no scans),
  reads a pipe of its own from wattlife and does the same on end of file without "done" (both
  are told the cgroup through their pipes, so no command line names wattlife): a guardian
  killed by pid together with wattlife no longer leaves CMD's tree running. Killing all three
  at once leaves it to the next `wattlife run` in that cgroup (`reap_leftovers`).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

SCAN_LOG_ENV = "WATTLIFE_GUARDIAN_LOG"  # a file: each scan appends the pids it has recorded
SCAN_S = 1.0  # CMD is alive when the guardian acts, so its tree is walked then; the scans
# are for processes orphaned earlier (adopted by wattlife, re-parented to PID 1 when it dies)
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

Proc = tuple[int, int, int, str, str]  # ppid, pgid, sid, start time, state


def proc_table() -> dict[int, Proc]:
    """Every process in /proc: pid -> (ppid, process group, session, start time, state)."""
    out: dict[int, Proc] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for d in entries:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
                out[int(d)] = (int(f[1]), int(f[2]), int(f[3]), f[19], f[0])
            except (OSError, IndexError, ValueError):
                continue
    return out


def descendants(table: dict[int, Proc], roots: set[int]) -> set[int]:
    """`roots` and every process below them by parent chain (those present in `table`)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def live(table: dict[int, Proc], pids: set[int]) -> set[int]:
    """The non-zombie ones of `pids`."""
    return {p for p in pids if p in table and table[p][4] != "Z"}


def set_subreaper(on: bool) -> bool:
    """Make this process a child subreaper (or not); returns the previous setting."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prev = ctypes.c_int(0)
        libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(prev), 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
        return bool(prev.value)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


def end_leftovers(cmd_pid: int, keep: set[int], grace_s: float) -> int:
    """CMD (`cmd_pid`, exited, not yet reaped) is over: end what is left of its group and of this
    process's descendants (adopted as subreaper), except `keep` (children that are not CMD's: the
    guardian, children a caller had before). SIGTERM, then SIGKILL after `grace_s`; adopted ones
    are reaped. Returns how many processes were left."""
    me = os.getpid()

    def left() -> set[int]:
        t = proc_table()
        mine = descendants(t, {p for p, row in t.items() if row[0] == me and p not in keep})
        group = {p for p, row in t.items() if row[1] == cmd_pid}
        return live(t, (mine | group) - {cmd_pid, me})

    first = left()
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        rest = left()
        for p in rest:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while rest and time.monotonic() < deadline:
            time.sleep(0.05)
            rest = left()
        if not rest:
            break
    reap_adopted(keep | {cmd_pid})
    return len(first)


def reap_adopted(keep: set[int]) -> None:
    """Reap this process's exited children other than `keep` (orphans it adopted as subreaper)."""
    me = os.getpid()
    for p, row in proc_table().items():
        if row[0] == me and row[4] == "Z" and p not in keep:
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass


def _start_script(args: list[str]) -> subprocess.Popen[bytes] | None:
    """This file run as a script with `args`, a pipe from this process on its stdin, in its own
    process group; None if it cannot start. The script is read through an inherited descriptor,
    so its command line (`python -S /dev/fd/N ...`) does not name wattlife: a `pkill -f
    wattlife` that kills wattlife leaves it to act."""
    try:
        fd = os.open(Path(__file__).resolve(), os.O_RDONLY)
    except OSError:
        return None
    try:
        return subprocess.Popen([sys.executable, "-S", f"/dev/fd/{fd}", *args],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                process_group=0, pass_fds=(fd,))
    except OSError:
        return None
    finally:
        os.close(fd)


class Guardian:
    """wattlife's side of the guardian (and of the sentinel where CMD has a cgroup): start
    them, tell the guardian CMD's pid, tell both when all is done."""

    def __init__(self, keep: set[int], cgroup: str | None = None) -> None:
        """`keep`: this process's children that are not CMD's (the guardian leaves them alone);
        `cgroup`: the directory of CMD's cgroup, if it has one."""
        self.proc = _start_script([str(os.getpid()), ",".join(map(str, sorted(keep)))])
        self.sentinel = _start_script(["--sentinel"]) if cgroup else None
        if cgroup:  # through the pipes: a command line naming the cgroup (wattlife-run-...)
            for proc in (self.proc, self.sentinel):  # would be killed by `pkill -f wattlife`
                _say(proc, f"cgroup {cgroup}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def pids(self) -> set[int]:
        """The guardian's and the sentinel's pids (children of wattlife that are not CMD's)."""
        return {p.pid for p in (self.proc, self.sentinel) if p is not None}

    def watch(self, cmd_pid: int) -> None:
        _say(self.proc, f"cmd {cmd_pid}")

    def done(self) -> None:
        """wattlife has ended CMD and its tree itself: guardian and sentinel exit without acting."""
        for proc in (self.proc, self.sentinel):
            if proc is None:
                continue
            _say(proc, "done")
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _say(proc: subprocess.Popen[bytes] | None, line: str) -> None:
    if proc is not None and proc.stdin is not None:
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass


def _ignore_signals() -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, signal.SIG_IGN)


def _kill_cgroup(cgroup: str | None, remove_s: float = 0.0) -> None:
    """SIGKILL every process of CMD's cgroup, then (`remove_s` > 0) remove the emptied cgroup,
    trying for that long (stdlib only: this file runs as a script; `workload_cgroup` is the
    same for wattlife)."""
    if not cgroup:
        return
    try:
        with open(os.path.join(cgroup, "cgroup.kill"), "w") as fh:
            fh.write("1")
    except OSError:
        return
    deadline = time.monotonic() + remove_s
    while time.monotonic() < deadline:
        try:
            os.rmdir(cgroup)
            return
        except FileNotFoundError:
            return
        except OSError:  # busy until the killed processes have exited
            time.sleep(0.02)


def _sentinel() -> None:
    """The sentinel's loop: wait for end of file on the pipe from wattlife; without "done"
    before it, wattlife died: kill CMD's cgroup (named by a "cgroup PATH" line)."""
    _ignore_signals()
    buf = b""
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        buf += data
        if b"\ndone\n" in b"\n" + buf:
            return
    lines = [w.decode() for w in buf.split(b"\n") if w.startswith(b"cgroup ")]
    _kill_cgroup(lines[0][7:] if lines else None, remove_s=5.0)


def _guard(root: int, before: set[int]) -> None:
    """The guardian's loop (see the module docstring); `before`: wattlife's children that are not
    CMD's (left alone). A "cgroup PATH" line names CMD's cgroup, killed first if wattlife dies."""
    _ignore_signals()
    me = os.getpid()
    cgroup: str | None = None
    cmd = 0
    seen: dict[int, Proc] = {}
    log = os.environ.get(SCAN_LOG_ENV)
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], SCAN_S)
        if ready:
            data = os.read(0, 4096)
            if not data:
                break  # wattlife has gone without saying "done"
            *lines, buf = (buf + data).split(b"\n")
            for line in lines:
                if line == b"done":
                    return
                if line.startswith(b"cmd "):
                    cmd = int(line.split()[1])
                elif line.startswith(b"cgroup "):
                    cgroup = line[7:].decode()
        t = proc_table()  # CMD and what wattlife adopted: children of wattlife's not seen before
        roots = {p for p, row in t.items() if row[0] == root and p not in before} | {cmd}
        for p in descendants(t, roots) - {me, root}:
            seen[p] = t[p]
        if log:  # for diagnosis and tests: what the guardian would end now
            with open(log, "a") as fh:
                fh.write(" ".join(map(str, sorted(seen))) + "\n")
    _kill_cgroup(cgroup)
    if cmd:
        seen.setdefault(cmd, (root, cmd, 0, "", "R"))
    _end_tree(seen, me, root)
    _kill_cgroup(cgroup, remove_s=5.0)


def _end_tree(seen: dict[int, Proc], me: int, root: int) -> None:
    """Stop, then kill, every recorded process still alive, the groups and sessions they lead, and
    everything below them (see the module docstring)."""
    stopped: set[int] = set()
    for _ in range(50):
        t = proc_table()
        same = {p for p, row in seen.items() if p in t and (not row[3] or t[p][3] == row[3])}
        leaders = same | {p for p in seen if p not in t}  # a group outlives its leader
        members = {p for p, row in t.items() if row[1] in leaders or row[2] in leaders}
        victims = live(t, descendants(t, same | members)) - {me, root, 1}
        new = victims - stopped
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        stopped |= new
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":
    if sys.argv[1] == "--sentinel":
        _sentinel()
    else:
        _guard(int(sys.argv[1]), {int(p) for p in sys.argv[2].split(",") if p})
