"""The energy sampler: drives the sensor backends on their own rates and appends the trace.

It runs in a thread of the `wattlife run` process, never inside the workload. Rows go to the
trace file (CSV, trace contract) and are flushed to the OS every `flush_s` (0.5 s), so a SIGKILL of
either process loses at most that much. Each (device, metric) series' update period is measured
as it runs (mean time between changes of value) and reported in meta.json.
"""

from __future__ import annotations

import math
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .devices.base import SensorBackend, SensorUnavailable

TRACE_HEADER = "t_ns,host,device,metric,value,source\n"


class _SeriesStats:
    __slots__ = ("last_value", "first_change", "last_change", "changes", "n", "source", "first_t",
                 "last_t")

    def __init__(self, source: str) -> None:
        self.last_value = None
        self.first_change = self.last_change = 0
        self.changes = self.n = 0
        self.first_t = self.last_t = 0
        self.source = source


class Sampler:
    """Polls backends in a background thread and writes trace rows."""

    def __init__(self, backends: list[SensorBackend], trace_path: str | Path,
                 host: str | None = None, flush_s: float = 0.5) -> None:
        self.backends = backends
        self.trace_path = Path(trace_path)
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        self.host = host or socket.gethostname()
        self.flush_s = flush_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats: dict[tuple[str, str], _SeriesStats] = {}
        self.errors: list[str] = []
        self.rows_written = 0
        self.cpu_time_s = 0.0
        self.start_ns = self.end_ns = 0

    def start(self) -> None:
        self._fh = open(self.trace_path, "w", buffering=1 << 20)
        self._fh.write(TRACE_HEADER)
        self._fh.flush()
        self.start_ns = time.time_ns()
        self._thread = threading.Thread(target=self._loop, name="wattlife-sampler", daemon=True)
        self._thread.start()

    def _record(self, rows: list[tuple], out: list[str]) -> None:
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
        cpu0 = time.thread_time()
        next_due = [0] * len(self.backends)
        buf: list[str] = []
        last_flush = time.monotonic()
        tick = min(b.interval_s for b in self.backends) if self.backends else 0.05
        while True:
            stopping = self._stop.is_set()
            now = time.time_ns()
            for i, b in enumerate(self.backends):
                if now >= next_due[i] or stopping:
                    next_due[i] = now + int(b.interval_s * 1e9)
                    try:
                        self._record(b.final_poll(now) if stopping else b.poll(now), buf)
                    except Exception as exc:  # one sensor's failure must not stop the others
                        msg = f"{b.name}: {type(exc).__name__}: {exc}"
                        if msg not in self.errors:
                            self.errors.append(msg)
                            print(f"wattlife sampler: {msg}", file=sys.stderr)
            if buf and (stopping or time.monotonic() - last_flush >= self.flush_s):
                self._fh.write("".join(buf))
                self._fh.flush()
                self.rows_written += len(buf)
                buf.clear()
                last_flush = time.monotonic()
            if stopping:
                break
            self._stop.wait(tick)
        self.cpu_time_s = time.thread_time() - cpu0

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.end_ns = time.time_ns()
        self._fh.close()
        for b in self.backends:
            b.close()

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


def build_backends(cfg: dict[str, Any], log=print) -> tuple[list[SensorBackend], list[str]]:
    """Backends from the `sampler` config section; returns them and the notes on missing sensors.

    gpu: auto (NVML if a GPU answers, else none) | nvml | sim | none
    cpu: auto (RAPL if readable, else the configured fallback) | rapl | estimate | none
    """
    interval = cfg.get("interval_ms", 50) / 1000.0
    backends: list[SensorBackend] = []
    notes: list[str] = []
    gpu = cfg.get("gpu", "auto")
    if gpu in ("auto", "nvml"):
        from .devices.nvml import NvmlBackend

        nv = cfg.get("nvml", {})
        try:
            backends.append(NvmlBackend(interval_s=interval, drain_s=nv.get("drain_ms", 500) / 1000,
                                        counter_s=nv.get("counter_ms", 1000) / 1000,
                                        telemetry_s=nv.get("telemetry_ms", 1000) / 1000,
                                        gpm=nv.get("gpm", True)))
        except SensorUnavailable as exc:
            if gpu == "nvml":
                raise
            notes.append(f"no GPU sensor: {exc}")
    elif gpu == "sim":
        from .devices.simgpu import SimGpuBackend

        sim = cfg.get("sim_gpu", {})
        backends.append(SimGpuBackend(n_gpus=sim.get("n_gpus", 1),
                                      mem_share=sim.get("mem_share", 0.3),
                                      interval_s=sim.get("interval_ms", 20) / 1000,
                                      cap_w=sim.get("cap_w")))
        notes.append("GPU power is SIMULATED (source=sim): no GPU was measured")
    cpu = cfg.get("cpu", "auto")
    if cpu in ("auto", "rapl"):
        from .devices.rapl import RaplBackend

        try:
            backends.append(RaplBackend(cfg.get("rapl_root", "/sys/class/powercap"), interval))
        except SensorUnavailable as exc:
            if cpu == "rapl" and cfg.get("cpu_fallback", "estimate") == "none":
                raise
            fallback = cfg.get("cpu_fallback", "estimate")
            notes.append(f"{exc}; CPU energy falls back to '{fallback}'")
            log(f"wattlife: {exc}; CPU energy falls back to '{fallback}'")
            cpu = fallback
    if cpu == "estimate":
        from .devices.cpu_estimate import CpuEstimateBackend

        est = cfg.get("cpu_estimate", {})
        backends.append(CpuEstimateBackend(est.get("idle_w", 50.0), est.get("max_w", 200.0),
                                           interval))
        notes.append("CPU power is ESTIMATED from utilisation (source=estimate), not measured")
    return backends, notes
