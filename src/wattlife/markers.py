"""Phase markers: the training code's side of the events contract.

    from wattlife.markers import phase, step

    with step(items=batch_size):
        with phase("forward"): ...
        with phase("backward"): ...

`wattlife run` puts the events path in `WATTLIFE_EVENTS`; without it every marker is a no-op that
costs well under a microsecond. Rows are buffered and flushed at least once a second, so a killed
workload keeps every interval closed more than a second before it died. A failing write (full
disk, read-only folder) never raises into the training loop: it is reported once on stderr and to
`wattlife run` (which records it in meta.json), the rows wait in memory and are written when the
disk takes them again, else to a fallback file at exit (see `wattlife.safewrite`).

With `configure(gpu_timeline=True)` boundaries are CUDA events on the current stream, resolved in
batches (never a synchronise per phase) and mapped to the host clock through an anchor: one host
timestamp taken right after synchronising on one recorded event (re-anchored every minute, between
top-level phases). Two anchors map the GPU clock to the host clock with slightly different offsets
(the clocks drift apart by ~1 ppm, and the host timestamp after a synchronise has its own
latency): a phase converted through the new anchor can start ~0.1 ms before the end of the
previous one, converted through the old (seen on an H200: a `step` 116 µs before the preceding
`checkpoint`'s end). So that written events always nest, a row's start is clamped at write time
to the latest end already written at its depth or above (its preceding sibling's, its parent's
preceding sibling's), its end to no earlier than its start; the amount moved is the row's
`clamp_ns` (0 for almost every row). The same holds where the clock changes from host to GPU.

Host timestamps are the one clock's (`now_ns`: a monotonic clock mapped to epoch ns once, inherited
from `wattlife run`; a wall-clock step changes no phase). A phase name is written as one CSV cell
(quoted when it holds a comma, a quote or a line break) and read back unchanged; a name no file
can hold (empty, NUL, a lone surrogate) is refused when the phase begins (`Recorder.cell`).

`concurrent(name, start_ns, end_ns)` records an interval that ran beside the process's phases (a
background checkpoint write): written as it is, outside the nesting and its clamping
(`contracts.CONCURRENT_PHASES`).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .contracts import EVENTS_HEADER, STEP, csv_cell, phase_name_problem
from .contracts.clock import now_ns
from .errors import InputError
from .nodename import node_name

ENV_EVENTS = "WATTLIFE_EVENTS"
ENV_RUN_ID = "WATTLIFE_RUN_ID"
ENV_STATUS = "WATTLIFE_STATUS"  # abstract unix datagram socket of `wattlife run` for write errors
FLUSH_EVERY_S = 1.0
REANCHOR_EVERY_S = 60.0


def rank_events_path(path: str | Path, rank: int, world_size: int) -> Path:
    """Rank 0 writes `path`; other ranks write `<stem>.rank<N><suffix>` beside it."""
    path = Path(path)
    if world_size <= 1 or rank == 0:
        return path
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


class _CudaClock:
    """Maps CUDA events to the host epoch-ns clock without a synchronise per event."""

    def __init__(self) -> None:
        import torch  # lazy: markers must not import torch unless the GPU timeline is asked for

        self.torch = torch
        self.anchors: list[tuple[Any, int]] = []
        self._anchor()

    def _anchor(self) -> None:
        ev = self.torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        ev.record()
        ev.synchronize()
        self.anchors.append((ev, now_ns()))
        self.anchored_at = time.monotonic()

    def event(self) -> tuple[Any, int]:
        ev = self.torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        ev.record()
        return ev, len(self.anchors) - 1

    def maybe_reanchor(self) -> None:
        if time.monotonic() - self.anchored_at > REANCHOR_EVERY_S:
            self._anchor()

    def to_ns(self, ev: Any, anchor_idx: int) -> int:
        anchor, t0 = self.anchors[anchor_idx]
        return t0 + int(round(anchor.elapsed_time(ev) * 1e6))


class Recorder:
    """Collects phase intervals of one process and appends them to its events file."""

    def __init__(self, path: str | Path, run_id: str | None = None) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.path = rank_events_path(path, self.rank, world)
        self.host = node_name()
        self.run_id = run_id or os.environ.get(ENV_RUN_ID) or self.path.parent.name
        self._prefix = f"{csv_cell(self.run_id)},{csv_cell(self.host)},{self.rank},"
        self._cells: dict[str, str] = {}  # phase name -> its CSV cell, checked once per name
        self._stack: list[_Open] = []
        self._rows: list[str] = []
        # GPU-timeline rows whose events are not resolved yet
        self._pending: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self.step_index = 0
        self.cuda: _CudaClock | None = None
        self._last_end: list[int] = []  # latest end written at each depth (the nesting floor)
        #: (start_ns, end_ns, items, clock) of every `step` row as written (the summary's clock)
        self.step_spans: list[tuple[int, int, float, str]] = []
        from .safewrite import SafeAppender

        self._out = SafeAppender(self.path, EVENTS_HEADER, f"markers (rank {self.rank})",
                                 on_error=self._report)
        atexit.register(self.close)

    def _report(self, msg: dict[str, Any]) -> None:
        """Tell `wattlife run` (if it is listening) about a write problem, for its meta.json."""
        addr = os.environ.get(ENV_STATUS)
        if not addr:
            return
        msg = {"rank": self.rank, "local_rank": self.local_rank, "pid": os.getpid(), **msg}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(json.dumps(msg).encode(), "\0" + addr)
        except OSError:  # wattlife gone or no abstract sockets here: stderr already has it
            pass

    def enable_gpu_timeline(self) -> None:
        if self.cuda is None:
            self.cuda = _CudaClock()

    def cell(self, name: str) -> str:
        """`name` as its events cell; a name no file can hold back is refused at once, one line
        (`contracts.phase_name_problem`)."""
        out = self._cells.get(name) if isinstance(name, str) else None
        if out is None:
            problem = phase_name_problem(name)
            if problem:
                raise InputError(f"markers: {problem}")
            out = self._cells[name] = csv_cell(name)
        return out

    def begin(self, name: str, items: float | None = None) -> "_Open":
        self.cell(name)
        if self.cuda is not None:
            start: Any = self.cuda.event()
        else:
            start = now_ns()
        op = _Open(name, start, items, len(self._stack), self.step_index)
        self._stack.append(op)
        return op

    def end(self, op: "_Open", items: float | None = None) -> None:
        if not self._stack or self._stack[-1] is not op:
            open_names = [o.name for o in self._stack]
            raise InputError(f"phase '{op.name}' ended out of order; open phases: {open_names}")
        self._stack.pop()
        if items is not None:
            op.items = items
        items_s = "" if op.items is None else repr(op.items)
        if self.cuda is not None and not isinstance(op.start, int):
            self._pending.append((op, self.cuda.event(), items_s))
        elif self._pending:  # host-timed (opened before the GPU timeline): keep the end order
            self._pending.append((op, now_ns(), items_s))
        else:
            self._emit(op, op.start, now_ns(), items_s, "host")
        if time.monotonic() - self._last_flush > FLUSH_EVERY_S:
            self.flush()

    def concurrent(self, name: str, start_ns: int, end_ns: int) -> None:
        """Write a finished host-clock interval that ran beside this process's phases (a
        background write): outside the nesting and its clamping (contracts.CONCURRENT_PHASES)."""
        with self._lock:
            self._rows.append(f"{self._prefix}{self.cell(name)},{int(start_ns)},{int(end_ns)},"
                              f"{self.step_index},,{self.local_rank},0,host,0\n")

    def _emit(self, op: "_Open", t0: int, t1: int, items_s: str, clock: str) -> None:
        """Queue one row, rows arriving in the order their phases ended; clamp its start to the
        latest end written at its depth or above, so the rows nest (see the module docstring)."""
        d = op.depth
        floor = max(self._last_end[:d + 1], default=t0)
        s0 = max(t0, floor)
        s1 = max(t1, s0)
        clamp = (s0 - t0) + (s1 - t1)
        if len(self._last_end) <= d:
            self._last_end.extend([s0] * (d + 1 - len(self._last_end)))
        self._last_end[d] = s1
        if op.name == STEP:
            self.step_spans.append((s0, s1, float(items_s or 0.0), clock))
        self._rows.append(f"{self._prefix}{self._cells[op.name]},{s0},{s1},{op.step},{items_s},"
                          f"{self.local_rank},{d},{clock},{clamp}\n")

    def _resolve_pending(self, wait: bool) -> None:
        for k, (op, end, items_s) in enumerate(self._pending):
            if isinstance(end, int):
                self._emit(op, op.start, end, items_s, "host")
                continue
            end_ev, end_anchor = end
            # one stream completes in order: the first unfinished event holds back the rest
            if not wait and not end_ev.query():
                self._pending = self._pending[k:]
                return
            if wait:
                end_ev.synchronize()
            start_ev, start_anchor = op.start
            assert self.cuda is not None  # CUDA-timed ends are queued only with a GPU timeline
            t0 = self.cuda.to_ns(start_ev, start_anchor)
            t1 = self.cuda.to_ns(end_ev, end_anchor)
            self._emit(op, t0, t1, items_s, "cuda")
        self._pending = []

    def flush(self, wait: bool = False) -> None:
        with self._lock:
            if self.cuda is not None and self._pending:
                self._resolve_pending(wait)
                if not self._stack:
                    self.cuda.maybe_reanchor()
            if self._rows and not self._out.closed:
                self._out.write("".join(self._rows))
                self._rows.clear()
            elif not self._out.closed:
                self._out.flush()  # retry rows a failed write left queued
            self._last_flush = time.monotonic()

    def close(self) -> None:
        if self._out.closed:
            return
        self.flush(wait=True)
        summary = self._out.close()
        if summary["write_errors"]:
            self._report({"label": "markers", "summary": summary})


class _Open:
    __slots__ = ("name", "start", "items", "depth", "step")

    def __init__(self, name: str, start: Any, items: float | None, depth: int, step: int) -> None:
        self.name, self.start, self.items, self.depth, self.step = name, start, items, depth, step


_recorder: Recorder | None = None
_resolved = False


def get_recorder() -> Recorder | None:
    """The process's recorder, created on first use from `WATTLIFE_EVENTS`; None when unset."""
    global _recorder, _resolved
    if not _resolved:
        path = os.environ.get(ENV_EVENTS)
        _recorder = Recorder(path) if path else None
        _resolved = True
    return _recorder


def configure(events_path: str | Path | None = None, run_id: str | None = None,
              gpu_timeline: bool = False) -> Recorder | None:
    """Set the events path explicitly (else the environment's) and the clock of the boundaries."""
    global _recorder, _resolved
    if events_path is not None:
        if _recorder is not None:
            _recorder.close()
        _recorder = Recorder(events_path, run_id)
        _resolved = True
    rec = get_recorder()
    if rec is not None and gpu_timeline:
        rec.enable_gpu_timeline()
    return rec


def reset() -> None:
    """Close the current recorder and forget it (tests, or a new run in the same process)."""
    global _recorder, _resolved
    if _recorder is not None:
        _recorder.close()
    _recorder, _resolved = None, False


class phase:
    """Context manager and decorator marking one phase interval; nests."""

    __slots__ = ("name", "items", "_op")

    def __init__(self, name: str, items: float | None = None) -> None:
        self.name, self.items = name, items
        self._op: _Open | None = None

    def __enter__(self) -> "phase":
        rec = _recorder if _resolved else get_recorder()
        if rec is not None:
            self._op = rec.begin(self.name, self.items)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._op is not None:
            assert _recorder is not None, "a phase ended after markers.reset()"
            _recorder.end(self._op, self.items)  # the body may have set the items it did
            self._op = None

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        name, items = self.name, self.items

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(name, items):
                return fn(*args, **kwargs)

        return wrapper


class step(phase):
    """One training step carrying the work it did (`items`: images, tokens) for throughput."""

    __slots__ = ()

    def __init__(self, items: float | None = None, name: str = STEP) -> None:
        super().__init__(name, items)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        rec = _recorder if _resolved else get_recorder()
        if rec is not None:
            rec.step_index += 1


def begin(name: str, items: float | None = None) -> Any:
    """Explicit begin; returns a token for `end`. None when no recorder is active."""
    rec = get_recorder()
    return rec.begin(name, items) if rec is not None else None


def end(token: Any, items: float | None = None) -> None:
    """Explicit end of the phase `begin` returned."""
    if token is not None:
        assert _recorder is not None, "a phase ended after markers.reset()"
        _recorder.end(token, items)


def concurrent(name: str, start_ns: int, end_ns: int) -> None:
    """Record `name` over [start_ns, end_ns] (epoch ns of `now_ns`, the host clock), an interval
    that overlapped this process's phases (e.g. `checkpoint_write`); a no-op without a recorder."""
    rec = get_recorder()
    if rec is not None:
        rec.concurrent(name, start_ns, end_ns)


def step_spans() -> list[tuple[int, int, float, str]]:
    """Every `step` row this process has written, as written: (start_ns, end_ns, items, clock),
    GPU-timed rows resolved first (waits for the GPU). Empty without a recorder."""
    rec = get_recorder()
    if rec is None:
        return []
    rec.flush(wait=True)
    return list(rec.step_spans)


def flush() -> None:
    rec = get_recorder()
    if rec is not None:
        rec.flush()
