"""The energy sampler: drives the sensor backends on their own rates and appends the trace.

It runs in a thread of the `wattlife run` process, never inside the workload. Rows go to the
trace file (CSV, trace contract) and are flushed to the OS every `flush_s` (0.5 s), so a SIGKILL of
either process loses at most that much. A failing write (full disk) never stops the sampler: it is
reported once, the rows wait in memory and are retried, else go to a fallback file at the end
(`wattlife.safewrite`); `write_summary()` says what happened, for meta.json. Each (device,
metric) series' update period is measured as it runs (mean time between changes of value) and
reported in meta.json. Readings are stamped by the one clock (`contracts.clock.now_ns`), and at
every flush the wall clock is compared with its mapping (`WallSteps`: meta.json's `clock`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import SamplerSettings
from .contracts import TRACE_HEADER, ZSTD_SUFFIX
from .contracts.clock import WallSteps, now_ns
from .devices.base import Row, SensorBackend
from .devices.registry import build_role, positive_seconds, roles
from .errors import SetupError
from .nodename import node_name
from .safewrite import FrameAppender, SafeAppender

log = logging.getLogger(__name__)


class _SeriesStats:
    __slots__ = ("last_value", "first_change", "last_change", "changes", "n", "source", "first_t",
                 "last_t")

    def __init__(self, source: str) -> None:
        self.last_value: float | None = None
        self.first_change = self.last_change = 0
        self.changes = self.n = 0
        self.first_t = self.last_t = 0
        self.source = source


STALL_TICKS = 2  # the thread late by this many ticks outside its polls: a stall
MAX_STALLS = 1000


class Sampler:
    """Polls backends in a background thread and writes trace rows."""

    def __init__(self, backends: list[SensorBackend], trace_path: str | Path,
                 host: str | None = None, flush_s: float = 0.5) -> None:
        self.backends = backends
        self.trace_path = Path(trace_path)
        self.host = host or node_name()
        self.flush_s = flush_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats: dict[tuple[str, str], _SeriesStats] = {}
        self.errors: list[str] = []
        self.rows_written = 0
        self.cpu_time_s = 0.0
        self.start_ns = self.end_ns = 0
        self._out: SafeAppender | None = None
        self._summary: dict[str, Any] | None = None
        self.wall_steps: WallSteps | None = None
        #: windows [from, to] (ns, the polls' timestamps) in which this thread was not scheduled
        #: for more than `STALL_TICKS` ticks outside its polls (an overloaded machine, a slow
        #: flush): every device it polls goes unread then; `wattlife check` tells such gaps from
        #: a sensor's (`check.stalls`). meta.json's `sampler.stalls` (the first `MAX_STALLS`).
        self.stalls: list[list[int]] = []

    def start(self) -> None:
        """Open the trace (an unopenable path raises RuntimeError: nothing was started yet) and
        start the polling thread."""
        try:
            appender = FrameAppender if self.trace_path.suffix == ZSTD_SUFFIX else SafeAppender
            self._out = appender(self.trace_path, TRACE_HEADER, "sampler", truncate=True,
                                 strict_open=True)
        except OSError as exc:
            raise SetupError(f"--trace {self.trace_path}: cannot open it: "
                               f"{exc.strerror or exc}") from None
        self._out.flush()
        self.wall_steps = WallSteps()
        self.start_ns = now_ns()
        self._thread = threading.Thread(target=self._loop, name="wattlife-sampler", daemon=True)
        self._thread.start()

    def _record(self, rows: list[Row], out: list[str]) -> None:
        host = self.host
        stats = self._stats
        for t, dev, metric, value, source in rows:
            if not math.isfinite(value):  # a sensor's "no value" (e.g. a GPM window too short)
                continue
            out.append(f"{t},{host},{dev},{metric},{value!r},{source}\n")
            st = stats.get((dev, metric))
            if st is None:
                st = stats[(dev, metric)] = _SeriesStats(source)
            if st.n == 0:
                st.first_t = t
            st.last_t = t
            st.n += 1
            if value != st.last_value:
                if st.changes == 0:
                    st.first_change = t
                st.last_change = t
                st.changes += 1
                st.last_value = value

    def _loop(self) -> None:
        assert self._out is not None  # start() opens the trace before it starts this thread
        cpu0 = time.thread_time()
        next_due = [0] * len(self.backends)
        buf: list[str] = []
        last_flush = time.monotonic()
        tick = min(b.interval_s for b in self.backends) if self.backends else 0.05
        prev = polling = 0
        while True:
            stopping = self._stop.is_set()
            now = now_ns()
            if prev and now - prev - polling > STALL_TICKS * tick * 1e9 \
                    and len(self.stalls) < MAX_STALLS:
                self.stalls.append([prev, now])
            prev = now
            for i, b in enumerate(self.backends):
                if now >= next_due[i] or stopping:
                    next_due[i] = now + int(b.interval_s * 1e9)
                    try:
                        self._record(b.final_poll(now) if stopping else b.poll(now), buf)
                    except Exception as exc:  # one sensor's failure must not stop the others
                        msg = f"{b.name}: {type(exc).__name__}: {exc}"
                        if msg not in self.errors:
                            self.errors.append(msg)
                            log.warning(f"wattlife sampler: {msg}")
            polling = now_ns() - now  # time in the polls: a slow sensor is not a stall
            if stopping or time.monotonic() - last_flush >= self.flush_s:
                if buf:
                    self._out.write("".join(buf))
                    buf.clear()
                else:
                    self._out.flush()  # retry what a failed write left queued
                self.rows_written = self._out.rows_written
                last_flush = time.monotonic()
                assert self.wall_steps is not None
                self.wall_steps.see()
            if stopping:
                break
            self._stop.wait(tick)
        self.cpu_time_s = time.thread_time() - cpu0

    def stop(self) -> None:
        """Last readings, close the trace (fallback file for unwritten rows), release devices.
        Never raises: what went wrong is in `errors` and `write_summary()`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.end_ns = now_ns()
        if self._out is not None:
            self._summary = self._out.close()
            self.rows_written = self._out.rows_written
        for b in self.backends:
            try:
                b.close()
            except Exception as exc:
                self.errors.append(f"{b.name}: close: {type(exc).__name__}: {exc}")

    def write_summary(self) -> dict[str, Any]:
        """The trace's rows written, dropped, left in a fallback file, and write errors."""
        if self._summary is not None:
            return self._summary
        return self._out.summary() if self._out is not None else {}

    def sensors(self) -> list[dict[str, Any]]:
        """Each series with its source, its reading period (mean seconds between readings) and its
        measured update period (mean seconds between changes of value: how often the sensor
        really refreshes when it is read faster than that)."""
        out = []
        for (dev, metric), st in sorted(self._stats.items()):
            period = ((st.last_change - st.first_change) / 1e9 / (st.changes - 1)
                      if st.changes > 1 else None)
            reading = (st.last_t - st.first_t) / 1e9 / (st.n - 1) if st.n > 1 else None
            out.append({"device": dev, "metric": metric, "source": st.source, "readings": st.n,
                        "reading_period_s": reading, "update_period_s": period})
        return out


def with_sim_gpu_cap(settings: SamplerSettings, cap_w: float | None) -> SamplerSettings:
    """The sampler settings with the simulated GPU's cap set, so its power follows the cap a
    sweep set."""
    return dataclasses.replace(settings, sim_gpu=dataclasses.replace(settings.sim_gpu,
                                                                     cap_w=cap_w))


def build_backends(s: SamplerSettings, log: Callable[[str], Any] = log.warning
                   ) -> tuple[list[SensorBackend], list[str]]:
    """Backends from the typed `sampler` settings (built at the edge, by the CLI: nothing here
    reads a configuration mapping); returns them and the notes on missing sensors.

    Each role of the sensor-backend registry (`devices.registry`: gpu, cpu, then node) is built as
    its `sampler.<role>` key chooses: auto (its `auto` backends, the first that answers, else
    the role's fallback) | one of its backends | none.
    """
    interval = positive_seconds(s.interval_ms, "sampler.interval_ms")
    backends: list[SensorBackend] = []
    notes: list[str] = []
    for role in roles():
        built, said = build_role(role, s, interval, log)
        backends += built
        notes += said
    return backends, notes
