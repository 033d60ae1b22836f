"""`wattlife run -- CMD`: the sampler around a command.

Starts the sampler, creates the events file (its header; the markers append CMD's phases, so
an unmarked command's run has one too), records an idle baseline, runs CMD with the events path
in its environment (`WATTLIFE_EVENTS`), stops the sampler when it ends, writes meta.json, and
returns CMD's exit status in the shell's convention (128 + N when a signal N ended it).

Process handling (what a user at a terminal or a batch system sees):
- CMD runs in its own process group, so a terminal's Ctrl-C (SIGINT to the foreground group) or a
  signal to wattlife's group reaches wattlife only; wattlife forwards SIGINT, SIGTERM, SIGHUP and
  SIGQUIT to CMD's group exactly once each time it gets one. (A signal sent to every process of a
  job, as Slurm's `scancel` does, reaches CMD directly as well as through wattlife.) Ctrl-Z
  (SIGTSTP) stops CMD's group and then wattlife; SIGCONT (`fg`, `bg`) continues both. When stdin
  is a terminal, CMD gets /dev/null as stdin: from a background group, reading the terminal would
  stop it.
- CMD and its whole tree die with wattlife, even by SIGKILL, however deep the tree and whatever
  group or session its processes moved to (`guardian.py`: wattlife is a child subreaper, and a
  guardian process stops and kills the recorded tree if wattlife is killed; where the guardian
  cannot start, the kernel SIGKILLs CMD itself, `PR_SET_PDEATHSIG`); the guardian's command line
  does not name wattlife, so `pkill -9 -f wattlife` leaves it to act; where a cgroup v2 is
  writable, CMD's tree is in a cgroup of its own that a second process, the sentinel, also kills
  (`workload_cgroup`; the limits: see `guardian.py`). Processes still in CMD's
  group or below wattlife when CMD has exited get SIGTERM, then SIGKILL after `LEFTOVER_GRACE_S`.
- One run per events file and per trace: exclusive locks (`<events>.lock`, `<trace>.lock`,
  released by the kernel if wattlife dies) make a second run with the same `--events` or `--trace`
  fail with a clear error before it starts.
- Recording faults never touch the workload: a failing write of the trace (sampler) or of events
  (markers, reported to wattlife over an abstract unix socket) is reported once, kept in memory
  and retried, and ends in a fallback file; meta.json records all of it under `recording` and is
  always written (to a fallback file in the temporary folder if its own path fails).

Modules: `process` (the locks, the markers' status socket, how CMD is started), `signals` (the
handlers while CMD runs), `state` (`RunState`: what one run carries), `started` (CMD under the
started sampler), `meta` (meta.json).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..config import SamplerSettings
from ..contracts import EVENTS_HEADER, META_FILE
from ..devices.base import SensorBackend
from ..errors import SetupError
from ..sampler import Sampler, build_backends
from .meta import LAUNCHERS, LIBRARIES, library_versions, single_process_gpus, write_meta
from .process import EventsLock, StatusListener, shell_status
from .signals import FORWARDED
from .started import LEFTOVER_GRACE_S, run_started
from .state import RunState

__all__ = ["FORWARDED", "LAUNCHERS", "LEFTOVER_GRACE_S", "LIBRARIES", "EventsLock", "RunState",
           "StatusListener", "library_versions", "run_under_sampler", "shell_status",
           "single_process_gpus", "write_meta"]


def run_under_sampler(cmd: list[str], trace: str | Path, events: str | Path,
                      meta: str | Path | None = None, *, settings: SamplerSettings,
                      run_id: str | None = None, cell: dict[str, Any] | None = None,
                      reraise_signals: bool = False) -> int:
    """Run `cmd` under the sampler; return its exit status. See the module docstring.
    `settings`: the typed `sampler` settings, built at the edge (the CLI, a sweep's caller);
    meta.json records them (`SamplerSettings.as_dict`).

    Raises RuntimeError/ValueError (one line, naming the option) only before CMD is started:
    an unwritable trace or events folder, an events file in use, a bad sampler setting.
    `reraise_signals`: for callers that run several commands (a sweep): if wattlife got SIGINT or
    SIGTERM (forwarded to CMD), once CMD has ended and meta.json is written the signal goes to
    the handler that was installed before (e.g. PowerCapController's, which restores the caps),
    or raises KeyboardInterrupt / SystemExit(128 + N), so the caller stops instead of going on.
    """
    trace, events = Path(trace), Path(events)
    meta = Path(meta) if meta else trace.with_name(META_FILE)
    run_id = run_id or trace.parent.name
    try:
        events.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"--events {events}: cannot create its folder: {exc.strerror}") from exc
    # everything that can refuse comes before the previous run's events are removed
    backends, notes = build_backends(settings)
    sampler, lock, trace_lock = _start_sampler(backends, trace, events, run_id)
    try:
        return run_started(RunState(cmd=cmd, events=events, meta=meta, run_id=run_id, cell=cell,
                                    settings=settings, sampler=sampler, backends=backends,
                                    notes=notes, idle_s=float(settings.idle_baseline_s)),
                           reraise_signals)
    finally:
        lock.release()
        trace_lock.release()


def _start_sampler(backends: list[SensorBackend], trace: Path, events: Path, run_id: str
                   ) -> tuple[Sampler, EventsLock, EventsLock]:
    """Lock the events and the trace, start the sampler, start a fresh events file; on any
    failure, undo what was done (backends closed, locks released) and raise."""
    lock = trace_lock = None
    sampler = Sampler(backends, trace)
    try:
        lock = EventsLock(events, run_id)
        trace_lock = EventsLock(trace, run_id, "--trace")
        sampler.start()
        _fresh_events(events)
    except BaseException:
        if sampler.start_ns:
            sampler.stop()  # closes the backends too
        else:
            for b in backends:
                b.close()
        for held in (lock, trace_lock):
            if held is not None:
                held.release()
        raise
    return sampler, lock, trace_lock


def _fresh_events(events: Path) -> None:
    """A rerun of the cell starts a fresh events file: the previous run's (its ranks' too)
    removed, then the file created holding its header alone, so that every run leaves one
    whatever CMD marks (an unmarked command's has no rows); the markers append to it. A device
    or fifo in its place (or a link to one) is left alone."""
    try:
        if events.is_file():
            events.unlink()
        for old in events.parent.glob(f"{events.stem}.rank*{events.suffix}"):
            old.unlink()
    except OSError as exc:
        raise SetupError(f"--events {events}: cannot remove the previous run's events: "
                           f"{exc.strerror}") from exc
    try:
        fd = os.open(events, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # not a regular file: left alone
    except OSError as exc:
        raise SetupError(f"--events {events}: cannot create it: {exc.strerror}") from exc
    try:
        os.write(fd, EVENTS_HEADER.encode())
    except OSError as exc:
        raise SetupError(f"--events {events}: cannot write its header: {exc.strerror}") from exc
    finally:
        os.close(fd)
