"""CMD under the started sampler: the idle baseline, CMD started in its own process group with
its tree tied to wattlife (`guardian`), waited for, the processes it left ended, and the run
recorded in meta.json whatever happened."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess

from .. import guardian, workload_cgroup
from ..contracts.clock import ENV_CLOCK, env_value, now_ns
from ..markers import ENV_EVENTS, ENV_RUN_ID, ENV_STATUS
from .meta import run_meta, write_meta
from .process import StatusListener, die_with_parent, shell_status
from .state import RunState

log = logging.getLogger(__name__)

LEFTOVER_GRACE_S = 5.0


def run_started(st: RunState, reraise_signals: bool = False) -> int:
    """CMD under the started sampler, after `st.idle_s` of idle baseline; returns its exit status
    (see the package docstring); meta.json is written on every path."""
    status = StatusListener()
    if status.address is None:
        st.notes.append("markers' write errors cannot be reported to wattlife here (no abstract "
                        "unix sockets); see the workload's stderr")
    st.relay.install()
    st.t_start = st.t_end = st.idle_end = now_ns()
    st.keep = {p for p, row in guardian.proc_table().items() if row[0] == os.getpid()}
    try:
        _idle_then_run(st, status.address)
    finally:
        st.relay.restore()
        _end_cmd(st)
        st.sampler.stop()
        _load_notes(st)
        markers_reports = status.drain()
        status.close()
        write_meta(st.meta, run_meta(st, markers_reports))
    if reraise_signals:
        st.relay.reraise()
    assert st.rc is not None  # set on every path that gets here: not started, CMD's exit, killed
    return st.rc


def _load_notes(st: RunState) -> None:
    """The CPU backends' word on other processes' load during the run (`devices.cpu_load`):
    into meta.json's sensor_notes, and on stderr as a warning."""
    for b in st.backends:
        for line in getattr(b, "end_notes", lambda: [])():
            st.notes.append(line)
            log.warning(f"wattlife run: warning: {line}")


def _idle_then_run(st: RunState, status_address: str | None) -> None:
    """The idle baseline (cut short by a signal), then CMD, unless a signal came first."""
    relay = st.relay
    if st.idle_s > 0:
        relay.stop_idle.wait(st.idle_s)
    st.idle_end = now_ns()
    env = dict(os.environ, **{ENV_EVENTS: str(st.events.resolve()), ENV_RUN_ID: st.run_id,
                              ENV_CLOCK: env_value()})
    if status_address:
        env[ENV_STATUS] = status_address
    st.t_start = now_ns()
    if relay.pending:
        st.rc = 128 + relay.pending[0]
        st.start_error = f"not started: wattlife got {relay.received[0]} before CMD started"
        return
    _start_cmd(st, env)
    if relay.proc is not None:
        _wait_cmd(st)


def _start_cmd(st: RunState, env: dict[str, str]) -> None:
    """Start CMD in its own process group, watched by the guardian (wattlife a subreaper); a
    command that cannot start gets the shell's status (127 not found, 126 not executable)."""
    try:
        stdin = subprocess.DEVNULL if os.isatty(0) else None
    except OSError:
        stdin = None
    _tie_to_cgroup(st)
    try:
        st.subreaper = guardian.set_subreaper(True)
        st.guard = guard = guardian.Guardian(st.keep, str(st.cgroup.path) if st.cgroup else None)
        st.keep |= guard.pids
        st.relay.proc = proc = subprocess.Popen(
            st.cmd, env=env, stdin=stdin, process_group=0,
            preexec_fn=die_with_parent(os.getpid(), not guard.pid,
                                        st.cgroup.join_self if st.cgroup else None))
        guard.watch(proc.pid)
        if st.cgroup is not None and not st.cgroup.holds(proc.pid):
            st.cgroup_note = f"CMD could not join its cgroup {st.cgroup.path}"
    except OSError as exc:
        st.rc = 127 if exc.errno == errno.ENOENT else 126
        st.start_error = f"cannot start {st.cmd[0]!r}: {exc.strerror or exc}"
        log.error(f"wattlife run: {st.start_error}")


def _tie_to_cgroup(st: RunState) -> None:
    """End what killed runs left in cgroups beside this one (said on stderr and in meta.json),
    then make CMD's cgroup where the machine offers one (`workload_cgroup`)."""
    for line in workload_cgroup.reap_leftovers():
        log.warning(f"wattlife run: {line}")
        st.notes.append(line)
    st.cgroup, st.cgroup_note = workload_cgroup.WorkloadCgroup.create()


def _wait_cmd(st: RunState) -> None:
    """Wait for CMD's exit without reaping it (its pid, and so its group id, stays reserved
    while the processes it left are ended), then reap it."""
    proc = st.relay.proc
    assert proc is not None
    st.relay.forward_pending()
    for b in st.backends:
        if hasattr(b, "watch_pid"):
            b.watch_pid = proc.pid
    while True:
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    st.t_end = now_ns()
    st.leftovers = guardian.end_leftovers(proc.pid, st.keep, LEFTOVER_GRACE_S)
    st.rc = shell_status(proc.wait())


def _end_cmd(st: RunState) -> None:
    """Whatever happened: CMD and its tree end if wattlife itself failed, the guardian is done
    and the subreaper flag put back; a CMD never started has no duration."""
    proc = st.relay.proc
    if proc is not None and proc.returncode is None:  # wattlife itself failed: CMD ends too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        guardian.end_leftovers(proc.pid, st.keep, 0.0)
        st.rc = shell_status(proc.wait())
    if st.cgroup is not None and not st.cgroup.remove():
        st.cgroup_note = f"the cgroup {st.cgroup.path} could not be removed"
    if st.guard is not None:
        st.guard.done()
        guardian.set_subreaper(st.subreaper)
    if proc is None:
        st.t_end = st.t_start
