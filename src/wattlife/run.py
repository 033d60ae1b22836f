"""`wattlife run -- CMD`: the sampler around a command.

Starts the sampler, records an idle baseline, runs CMD with the events path in its environment
(`WATTLIFE_EVENTS`), stops the sampler when it ends, writes meta.json, and returns CMD's exit
status in the shell's convention (128 + N when a signal N ended it).

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
  cannot start, the kernel SIGKILLs CMD itself, `PR_SET_PDEATHSIG`). Processes still in CMD's
  group or below wattlife when CMD has exited get SIGTERM, then SIGKILL after `LEFTOVER_GRACE_S`.
- One run per events file and per trace: exclusive locks (`<events>.lock`, `<trace>.lock`,
  released by the kernel if wattlife dies) make a second run with the same `--events` or `--trace`
  fail with a clear error before it starts.
- Recording faults never touch the workload: a failing write of the trace (sampler) or of events
  (markers, reported to wattlife over an abstract unix socket) is reported once, kept in memory
  and retried, and ends in a fallback file; meta.json records all of it under `recording` and is
  always written (to a fallback file in the temporary folder if its own path fails).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from . import guardian
from .config import SamplerSettings
from .contracts import META_FILE, ContractError, RunMeta, meta_text
from .markers import ENV_EVENTS, ENV_RUN_ID, ENV_STATUS
from .pathlock import PathBusy, PathLock
from .sampler import Sampler, build_backends

LIBRARIES = ["wattlife", "torch", "torchvision", "transformers", "nvidia-ml-py", "numpy", "pandas",
             "snakemake", "psutil"]
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
LEFTOVER_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1

_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


#: commands that start several ranks (one GPU each); any other command is one process
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate",
             "deepspeed", "mpirun", "mpiexec", "srun")


def single_process_gpus(cmd: list[str], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """meta.json's `gpus`: a command that is one process (no launcher among its words) drives
    every GPU it can see, so each visible GPU's entry gets `local_rank` 0; a launcher's ranks
    keep one GPU each (local rank = CUDA ordinal)."""
    words = {t for w in cmd for tok in w.split() for t in (tok, Path(tok).name)}
    if words & set(LAUNCHERS):
        return gpus
    return [{**g, "local_rank": 0} for g in gpus]


def shell_status(returncode: int) -> int:
    """Popen's returncode in the shell's convention: -N (killed by signal N) -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _die_with_parent(parent_pid: int, pdeathsig: bool = True):
    """preexec_fn: the kernel SIGKILLs the child when its parent dies (even by SIGKILL), unless
    the guardian does it (`pdeathsig` False: CMD must outlive wattlife by the moment the guardian
    needs to stop its whole tree, or its children would be orphaned before being found)."""
    def preexec() -> None:
        if _LIBC is not None and pdeathsig:
            _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(128 + signal.SIGKILL)
    return preexec


class EventsLock:
    """An exclusive lock on `<events>.lock` (or on `<trace>.lock`, `option` "--trace") for the
    duration of a run (see the module docstring)."""

    def __init__(self, events: Path, run_id: str, option: str = "--events") -> None:
        self.lock = PathLock(events, f"run_id {run_id}")
        self.path = self.lock.path
        try:
            events.parent.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
        except PathBusy as busy:
            raise RuntimeError(
                f"{option} {events} is in use by another wattlife run ({busy}); two runs "
                f"must not share it: give this run its own {option}") from None
        except OSError as exc:
            raise RuntimeError(f"{option} {events}: cannot create its lock file {self.path}: "
                               f"{exc.strerror}") from exc

    def release(self) -> None:
        self.lock.release()


class StatusListener:
    """Receives the markers' write-error reports (abstract unix datagram socket, Linux)."""

    def __init__(self) -> None:
        self.address: str | None = f"wattlife-{os.getpid()}-{secrets.token_hex(6)}"
        self.messages: list[dict[str, Any]] = []
        self.sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind("\0" + self.address)
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            self.sock, self.address = None, None

    def drain(self) -> list[dict[str, Any]]:
        while self.sock is not None:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            try:
                self.messages.append(json.loads(data))
            except ValueError:
                self.messages.append({"unparsed": data.decode(errors="replace")})
        return self.messages

    def close(self) -> None:
        self.drain()
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _write_meta(meta: Path, doc: RunMeta) -> str:
    """Write meta.json atomically (`contracts.meta_text`: validated, with its schema version);
    if its path fails, to the temporary folder. Returns the path."""
    try:
        text = meta_text(doc)
    except ContractError as exc:  # a bug here must not lose the record: write it as it is
        print(f"wattlife run: {exc}; written anyway", file=sys.stderr)
        text = json.dumps(doc.to_dict(), indent=2, default=str)
    try:
        meta.parent.mkdir(parents=True, exist_ok=True)
        tmp = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(meta)
        return str(meta)
    except OSError as exc:
        try:
            tmp.unlink()
        except (OSError, UnboundLocalError):
            pass
        try:
            fd, name = tempfile.mkstemp(prefix="wattlife-meta-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        except OSError as exc2:
            print(f"wattlife run: cannot write {meta} ({exc.strerror or exc}) nor a fallback "
                  f"({exc2.strerror or exc2}); meta.json follows on stderr", file=sys.stderr)
            print(text, file=sys.stderr)
            return "<stderr>"
        print(f"wattlife run: cannot write {meta} ({exc.strerror or exc}); meta.json is in {name}",
              file=sys.stderr)
        return name


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
        raise RuntimeError(f"--events {events}: cannot create its folder: {exc.strerror}") from exc
    # everything that can refuse comes before the previous run's events are removed
    backends, notes = build_backends(settings, log=lambda msg: print(msg, file=sys.stderr))
    lock = trace_lock = None
    sampler = Sampler(backends, trace)
    try:
        lock = EventsLock(events, run_id)
        trace_lock = EventsLock(trace, run_id, "--trace")
        sampler.start()
        try:  # a rerun of the cell starts a fresh events file (a device or fifo is left alone)
            if events.is_file():
                events.unlink()
            for old in events.parent.glob(f"{events.stem}.rank*{events.suffix}"):
                old.unlink()
        except OSError as exc:
            raise RuntimeError(f"--events {events}: cannot remove the previous run's events: "
                               f"{exc.strerror}") from exc
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
    try:
        return _run_started(cmd, sampler, backends, notes, events, meta, settings,
                            float(settings.idle_baseline_s), run_id, cell, reraise_signals)
    finally:
        lock.release()
        trace_lock.release()


def _run_started(cmd: list[str], sampler: Sampler, backends: list, notes: list[str],
                 events: Path, meta: Path, settings: SamplerSettings, idle_s: float,
                 run_id: str, cell: dict[str, Any] | None, reraise_signals: bool = False) -> int:
    """CMD under the started sampler, after `idle_s` of idle baseline; `settings` are recorded
    in meta.json."""
    status = StatusListener()
    if status.address is None:
        notes.append("markers' write errors cannot be reported to wattlife here (no abstract "
                     "unix sockets); see the workload's stderr")
    received: list[str] = []
    forwarded: list[str] = []
    pending: list[int] = []  # got while CMD was being started: forwarded once it exists
    proc: subprocess.Popen | None = None
    stop_idle = threading.Event()

    def forward(signum: int) -> None:
        assert proc is not None  # called only once CMD is started
        if proc.returncode is None:
            try:  # CMD is not reaped until after the wait below, so its group id is still its own
                os.killpg(proc.pid, signum)
                forwarded.append(signal.Signals(signum).name)
            except ProcessLookupError:
                pass

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        if proc is not None:
            forward(signum)
        else:
            pending.append(signum)
            stop_idle.set()  # during the idle baseline: CMD is not started at all

    def on_stop(signum: int, _frame: Any) -> None:
        """Ctrl-Z: CMD's group stops too, then wattlife stops itself the default way."""
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # stops here until SIGCONT
        signal.signal(signum, on_stop)

    def on_cont(_signum: int, _frame: Any) -> None:
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    old = {s: signal.signal(s, on_signal) for s in FORWARDED}
    old[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, on_stop)
    old[signal.SIGCONT] = signal.signal(signal.SIGCONT, on_cont)
    t_start = t_end = idle_end = time.time_ns()
    start_error: str | None = None
    rc: int | None = None
    leftovers = 0
    guard: guardian.Guardian | None = None
    subreaper = False
    keep = {p for p, row in guardian.proc_table().items() if row[0] == os.getpid()}
    try:
        if idle_s > 0:
            stop_idle.wait(idle_s)
        idle_end = time.time_ns()
        env = dict(os.environ, **{ENV_EVENTS: str(events.resolve()), ENV_RUN_ID: run_id})
        if status.address:
            env[ENV_STATUS] = status.address
        t_start = time.time_ns()
        if pending:
            rc = 128 + pending[0]
            start_error = f"not started: wattlife got {received[0]} before CMD started"
        else:
            try:
                stdin = subprocess.DEVNULL if os.isatty(0) else None
            except OSError:
                stdin = None
            try:
                subreaper = guardian.set_subreaper(True)
                guard = guardian.Guardian(keep)
                keep.add(guard.pid or 0)
                proc = subprocess.Popen(cmd, env=env, stdin=stdin, process_group=0,
                                        preexec_fn=_die_with_parent(os.getpid(), not guard.pid))
                guard.watch(proc.pid)
            except OSError as exc:
                # the shell's statuses: 127 not found, 126 found but not executable
                rc = 127 if exc.errno == errno.ENOENT else 126
                start_error = f"cannot start {cmd[0]!r}: {exc.strerror or exc}"
                print(f"wattlife run: {start_error}", file=sys.stderr)
            if proc is not None:
                while pending:  # a signal that came during Popen: the handler saw no proc yet
                    forward(pending.pop(0))
                for b in backends:
                    if hasattr(b, "watch_pid"):
                        b.watch_pid = proc.pid
                while True:  # wait for CMD's exit without reaping it (its pid stays reserved)
                    try:
                        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                        break
                    except ChildProcessError:
                        break
                    except InterruptedError:
                        continue
                t_end = time.time_ns()
                leftovers = guardian.end_leftovers(proc.pid, keep, LEFTOVER_GRACE_S)
                rc = shell_status(proc.wait())
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if proc is not None and proc.returncode is None:  # wattlife itself failed: CMD ends too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            guardian.end_leftovers(proc.pid, keep, 0.0)
            rc = shell_status(proc.wait())
        if guard is not None:
            guard.done()
            guardian.set_subreaper(subreaper)
        if proc is None:
            t_end = t_start
        sampler.stop()
        markers_reports = status.drain()
        status.close()
        info = []
        for b in backends:
            try:
                info.append(b.info())
            except Exception as exc:
                info.append({"backend": b.name, "error": f"{type(exc).__name__}: {exc}"})
        gpu_info: dict[str, Any] = next((i for i in info if "gpu_model" in i), {})
        trace_rec = sampler.write_summary()
        recording = {
            "trace": trace_rec,
            "events": markers_reports,
            "complete": (not trace_rec.get("write_errors") and not markers_reports
                         and not sampler.errors),
        }
        doc = RunMeta(
            run_id=run_id, host=socket.gethostname(), cmd=list(cmd),
            cell=cell or {}, start_ns=sampler.start_ns, end_ns=sampler.end_ns,
            workload_start_ns=t_start, workload_end_ns=t_end,
            idle_baseline={"start_ns": sampler.start_ns, "end_ns": idle_end},
            exit_code=rc,
            exit_signal=(signal.Signals(-proc.returncode).name
                         if proc is not None and proc.returncode < 0 else None),
            start_error=start_error,
            signals={"received": received, "forwarded_to_cmd_group": forwarded,
                     "leftover_processes_ended": leftovers},
            gpu_model=gpu_info.get("gpu_model"), driver=gpu_info.get("driver"),
            gpus=single_process_gpus(list(cmd), gpu_info.get("gpus", [])),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            sampler={"settings": settings.as_dict(), "backends": info, "sensors": sampler.sensors(),
                     "rows": sampler.rows_written, "cpu_time_s": sampler.cpu_time_s,
                     "errors": sampler.errors},
            recording=recording,
            sensor_notes=notes, platform=platform.platform(),
            python=sys.version.split()[0], libraries=library_versions(),
        )
        _write_meta(meta, doc)
    stop = [signal.Signals[n] for n in received if n in ("SIGINT", "SIGTERM")]
    if reraise_signals and stop:
        before = old[stop[0]]
        if callable(before) and before is not signal.default_int_handler:
            before(stop[0], None)
        if stop[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + stop[0])
    assert rc is not None  # set on every path that gets here: not started, CMD's exit, or killed
    return rc
