"""Whole-node power (issue 45): the poller every node source runs in, off the sampler's thread.

A node source (pm_counters, a BMC's Redfish or IPMI DCMI, Slurm's sstat) answers in milliseconds
to seconds, and a BMC may stop answering. So each node backend reads its source in a thread of
its own at the source's own period, every read bounded by a time-out, and the sampler's `poll`
only takes what has arrived (never blocks). A span with no reading longer than `GAP_PERIODS`
periods is a sensor gap: its rows are absent from the trace, it is logged as a warning when it
opens, and listed (with the errors seen) in meta.json: `info()["gaps"]` and `end_notes()`.

Rows: device `node`, metric `power_w` (the source's reading, W) and, where the source has an
energy counter of its own, `energy_j` (J since the first reading, monotone across a counter reset),
each with the source's id as `source`. Each reading is stamped with the one clock when it arrived.
The readers live in `devices.node_sources` and `devices.node_redfish`; `devices.node_select`
builds them from `sampler.node_sources`, and the `node` role of `devices.registry` picks the one
`sampler.node` names.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, cast

from ..contracts.clock import now_ns
from .base import NodeBackendInfo, Row, SensorBackend

log = logging.getLogger(__name__)

NODE_DEVICE = "node"
#: no reading for this many periods is a sensor gap
GAP_PERIODS = 3
#: the distinct error texts kept for meta.json
MAX_ERRORS = 10
MAX_GAPS = 1000


@dataclass(frozen=True)
class NodeReading:
    """One answer of a node source: power (W) and its own energy counter (J), either may be
    absent."""

    power_w: float | None = None
    energy_j: float | None = None
    #: the source says its energy counter restarted since the previous reading
    counter_restarted: bool = False


class NodeReader:
    """A node source: `read()` makes one bounded request (None: no consistent new value this
    time; an exception: the source did not answer)."""

    source = "none"
    period_s = 1.0
    timeout_s = 1.0

    def read(self) -> NodeReading | None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Where it reads (never credentials), for meta.json."""
        return {}

    def close(self) -> None:
        """Release what the reader holds."""


class EnergyCounter:
    """A source's energy counter as J since its first reading; a decrease (the counter was reset)
    adds nothing for that interval and is counted."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.total = 0.0
        self.resets = 0

    def add(self, raw: float, restarted: bool = False) -> float:
        if restarted and self.last is not None:
            self.resets += 1
        elif self.last is not None:
            if raw >= self.last:
                self.total += raw - self.last
            else:
                self.resets += 1
        self.last = raw
        return self.total


class NodePoller(SensorBackend):
    """A node source read in its own thread; `poll` hands over the rows that have arrived."""

    name = "node"
    role = "node"

    def __init__(self, reader: NodeReader, interval_s: float = 0.05) -> None:
        self.reader = reader
        self.interval_s = interval_s  # how often the sampler collects, not the source's period
        self.source = reader.source
        self._rows: deque[Row] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counter = EnergyCounter()
        self._lock = threading.Lock()
        self.readings = self.failures = self.inconsistent = 0
        self.first_ok_ns = 0
        self.started_ns = self.last_ok_ns = now_ns()
        self.gaps: list[list[int]] = []
        self.errors: list[str] = []
        self._in_gap = False
        self.cpu_time_s = 0.0  # the reading thread's own CPU time (beside the sampler's)

    @property
    def gap_s(self) -> float:
        """No reading for this long is a gap (whether the source failed or answered slowly)."""
        return GAP_PERIODS * self.reader.period_s

    def _start(self) -> None:
        self.started_ns = self.last_ok_ns = now_ns()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"wattlife-node-{self.source}")
        self._thread.start()

    def _loop(self) -> None:
        period = self.reader.period_s
        cpu0 = time.thread_time()
        while not self._stop.is_set():
            t0 = now_ns()
            self.read_once()
            spent = (now_ns() - t0) / 1e9
            self.cpu_time_s = time.thread_time() - cpu0
            self._stop.wait(max(period - spent, 0.0))

    def read_once(self) -> None:
        """One read of the source now, in the caller's thread (the poller's own thread calls it
        every period); its rows wait for `take`."""
        try:
            reading = self.reader.read()
        except Exception as exc:  # the source did not answer: a failure, maybe a gap
            if not self._stop.is_set():
                self._failed(f"{type(exc).__name__}: {exc}")
            return
        t = now_ns()
        if self._stop.is_set():  # it ended after the sampler's last poll: dropped, not counted
            return
        if reading is None:
            self.inconsistent += 1
            self._check_gap(t)
            return
        rows: list[Row] = []
        if reading.power_w is not None:
            rows.append((t, NODE_DEVICE, "power_w", float(reading.power_w), self.source))
        if reading.energy_j is not None:
            rows.append((t, NODE_DEVICE, "energy_j", self._counter.add(float(reading.energy_j),
                                                                 reading.counter_restarted),
                         self.source))
        with self._lock:
            self._rows.extend(rows)
            self._ok(t)

    def _ok(self, t: int) -> None:
        if self._in_gap or (t - self.last_ok_ns) / 1e9 > self.gap_s:
            self._close_gap(t)
        self.readings += 1
        self.first_ok_ns = self.first_ok_ns or t
        self.last_ok_ns = t

    def _close_gap(self, t: int) -> None:
        if len(self.gaps) < MAX_GAPS:
            self.gaps.append([self.last_ok_ns, t])
        log.warning("node power (%s): a reading again after %.1f s without one (a sensor gap)",
                    self.source, (t - self.last_ok_ns) / 1e9)
        self._in_gap = False

    def _failed(self, message: str) -> None:
        self.failures += 1
        if message not in self.errors and len(self.errors) < MAX_ERRORS:
            self.errors.append(message)
        self._check_gap(now_ns())

    def _check_gap(self, t: int) -> None:
        if not self._in_gap and (t - self.last_ok_ns) / 1e9 > self.gap_s:
            self._in_gap = True
            log.warning("node power (%s): no reading for %.1f s (a sensor gap; last error: %s)",
                        self.source, (t - self.last_ok_ns) / 1e9,
                        self.errors[-1] if self.errors else "none")

    def poll(self, now_ns: int) -> list[Row]:
        """The rows that arrived since the last poll (starts the reading thread at the first)."""
        if self._thread is None:
            self._start()
        return self.take()

    def take(self) -> list[Row]:
        """The rows read so far and not yet taken."""
        with self._lock:
            rows = list(self._rows)
            self._rows.clear()
        return rows

    def final_poll(self, now_ns: int) -> list[Row]:
        """Tell the thread to stop and take what has arrived, without waiting for a read in
        flight (the sampler's last polls, and so the trace's end, never wait on a slow source:
        that read is dropped); a source silent up to the end closes its gap at the end."""
        self._stop.set()
        rows = self.take()
        end = now_ns
        with self._lock:
            if self._in_gap or (end - self.last_ok_ns) / 1e9 > self.gap_s:
                self._in_gap = False
                if len(self.gaps) < MAX_GAPS:
                    self.gaps.append([self.last_ok_ns, end])
        return rows

    def reading_period_s(self) -> float | None:
        """The observed mean time between readings."""
        if self.readings < 2:
            return None
        return (self.last_ok_ns - self.first_ok_ns) / 1e9 / (self.readings - 1)

    def info(self) -> NodeBackendInfo:
        return cast(NodeBackendInfo, {
                "backend": f"node-{self.source}", "devices": [NODE_DEVICE], "source": self.source,
                "metrics": self.metrics(), **self.reader.describe(),
                "period_s": self.reader.period_s, "timeout_s": self.reader.timeout_s,
                "reading_period_s": self.reading_period_s(), "readings": self.readings,
                "cpu_time_s": self.cpu_time_s,
                "failures": self.failures, "inconsistent_reads": self.inconsistent,
                "counter_resets": self._counter.resets, "gap_after_s": self.gap_s,
                "gaps": [list(g) for g in self.gaps], "errors": list(self.errors)})

    def metrics(self) -> list[str]:
        """The metrics this source gives (read from the reader's class)."""
        return list(getattr(self.reader, "metrics", ("power_w",)))

    def end_notes(self) -> list[str]:
        """meta.json's sensor_notes: the gaps, each with its span."""
        if not self.gaps and self.readings:
            return []
        if not self.readings:
            last = self.errors[-1] if self.errors else "no error, no reading"
            return [f"node power ({self.source}): no reading during the whole run ({last}); "
                    "the trace has no node rows"]
        total = sum(b - a for a, b in self.gaps) / 1e9
        return [f"node power ({self.source}): {len(self.gaps)} sensor gap(s), {total:.1f} s in "
                f"all, without node rows (meta.json sampler.backends gaps); last error: "
                f"{self.errors[-1] if self.errors else 'none'}"]

    def close(self) -> None:
        """End the thread (a read in flight ends within its time-out, a command it runs too),
        then release the reader."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.reader.timeout_s + 1.0)
        self.reader.close()
