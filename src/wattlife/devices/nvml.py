"""NVIDIA GPUs through NVML (nvidia-ml-py).

Per GPU, each reader on its own rate (see docs/ARCHITECTURE.md, "Facts measured on the H200"):
- power: the driver's own sample buffer (`nvmlDeviceGetSamples(..., NVML_TOTAL_POWER_SAMPLES)`,
  ~20 ms window averages stamped in epoch microseconds, ~2.4 s of history) drained every
  `drain_s` (default 0.5 s) -> `power_w`, source `nvml-samples`; where the buffer is unsupported,
  `nvmlDeviceGetPowerUsage` polled every sampler interval -> source `nvml-poll`;
- the total-energy counter (mJ, ~4 ms a call) every `counter_s` (default 1 s) -> `energy_j` since
  the sampler started, source `nvml-counter`: the drift anchor;
- telemetry every `telemetry_s` (default 1 s): `util_gpu`, `util_mem` (percent, NVML
  utilisation rates), `sm_clock_mhz`, `mem_clock_mhz`, `power_limit_w`, `mem_used_b`, `temp_c`,
  and on GPUs with GPM (Hopper+) `dram_active`, `sm_active`, `tensor_active` as fractions 0..1
  over the telemetry window.

Which GPUs: those the workload can see. `CUDA_VISIBLE_DEVICES` (indices, `GPU-` UUIDs or unique
UUID prefixes, MIG instances) is resolved to NVML indices (`devices.nvidia`, the vendor class the
power caps use too: one numbering); each sampled GPU is named `gpu<k>` after its CUDA ordinal k
(what `cuda:k` and local rank k mean to the workload), and `info()["gpus"]` records each one's
`contracts.gpus.GpuIdentity` (ordinal, NVML index, UUID, PCI bus id, ...) for meta.json.
NVML errors are never dropped silently: each is counted per call site, device and error
(`info()["nvml_errors"]`), and its first occurrence is printed once.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, NotRequired

from ..contracts.clock import now_ns as now
from ..contracts.clock import wall_step_ns
from ..contracts.sources import GPU_ROLE
from .base import GpuBackendInfo, Row, SensorBackend, SensorUnavailable
from .nvidia import (
    GpmWindow,
    NvidiaGpu,
    NvidiaGpus,
    NvmlError,
    error_reason,
    identity,
    sample_value,
)

log = logging.getLogger(__name__)


class NvmlInfo(GpuBackendInfo):
    """`NvmlBackend.info()`: the GPU role's keys, then how each GPU is read and the NVML errors."""

    devices: dict[str, dict[str, Any]]
    drain_s: float
    counter_s: float
    telemetry_s: float
    cuda_visible_devices: str | None
    mapping_notes: list[str]
    nvml_errors: NotRequired[list[dict[str, Any]]]


class _Gpu:
    """One sampled GPU: the vendor class's `NvidiaGpu`, what it supports, where reading stands."""

    def __init__(self, gpu: NvidiaGpu, use_gpm: bool,
                 err: Callable[[str, str, BaseException], None]) -> None:
        self.gpu, self.device = gpu, gpu.device
        self.name = gpu.name()
        self.uuid: str | None = None
        self.pci_bus_id: str | None = None
        try:
            self.uuid, self.pci_bus_id = gpu.uuid(), gpu.bus_id()
        except (NvmlError, AttributeError) as exc:
            err("identity", self.device, exc)
        self.memory_total_b: int | None = None
        try:
            self.memory_total_b = gpu.memory_total_b()
        except (NvmlError, AttributeError) as exc:
            err("memory_total", self.device, exc)
        self.last_ts_us = int(time.time() * 1e6)
        self.power_mode = self._probe_power(err)
        self.energy0_mj: int | None = None
        try:
            self.energy0_mj = gpu.energy_mj()
        except NvmlError as exc:
            err("energy_counter_probe", self.device, exc)
        self.gpm: GpmWindow | None = None
        if use_gpm:
            try:
                if gpu.gpm_supported():
                    self.gpm = GpmWindow(gpu)
            except (NvmlError, AttributeError) as exc:
                err("gpm_probe", self.device, exc)
        self.limits_w: dict[str, float] = {}
        try:
            lo, hi, default = gpu.limit_range_w()
            self.limits_w = {"min": lo, "max": hi, "default": default,
                             "current": gpu.power_limit_w()}
        except NvmlError as exc:
            err("power_limits", self.device, exc)

    def _probe_power(self, err: Callable[[str, str, BaseException], None]) -> str:
        """`nvml-samples` where the driver's buffer answers (NotFound: supported, no sample
        yet), else `nvml-poll` (the error counted)."""
        try:
            self.gpu.power_samples(0)
        except NvmlError as exc:
            if not exc.not_found:
                err("power_samples_probe", self.device, exc)
                return "nvml-poll"
        return "nvml-samples"


class NvmlBackend(SensorBackend):
    name = "nvml"
    role = GPU_ROLE

    def __init__(self, interval_s: float = 0.05, drain_s: float = 0.5, counter_s: float = 1.0,
                 telemetry_s: float = 1.0, indices: list[int] | None = None,
                 gpm: bool = True, visible: str | None = "env") -> None:
        """`indices`: NVML indices to sample, named gpu<index> (overrides `visible`). `visible`:
        a CUDA_VISIBLE_DEVICES value; "env" (default) reads it from the environment."""
        self.errors: Counter[tuple[str, str, str]] = Counter()
        try:
            self.nvml = NvidiaGpus()
        except NvmlError as exc:
            if exc.reason == "not installed":  # pragma: no cover - dependency of the package
                raise SensorUnavailable("NVML: nvidia-ml-py is not installed") from exc
            raise SensorUnavailable(
                f"NVML: cannot initialise ({exc.detail}); no NVIDIA driver here") from exc
        if self.nvml.count() == 0:
            raise SensorUnavailable("NVML: no GPU visible")
        self.interval_s, self.drain_s = interval_s, min(drain_s, 1.0)
        self.counter_s, self.telemetry_s = counter_s, telemetry_s
        if visible == "env":
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.visible = visible
        self.notes: list[str] = []
        if indices is not None:
            chosen = [self.nvml.by_index(i) for i in indices]
        else:
            chosen, self.notes = self.nvml.visible(visible)
        for note in self.notes:
            log.info(f"wattlife nvml: {note}")
        if not chosen:
            raise SensorUnavailable(f"NVML: no GPU to sample ({'; '.join(self.notes)})")
        self.gpus = [_Gpu(g, gpm, self._err) for g in chosen]
        self._next = {"drain": 0, "counter": 0, "telemetry": 0}
        self.driver = self.nvml.driver()

    def _err(self, call: str, device: str, exc: BaseException) -> None:
        """Count an NVML error (call site, device, error); print its first occurrence."""
        key = (call, device, exc.reason if isinstance(exc, NvmlError) else error_reason(exc))
        if key not in self.errors:
            log.warning(f"wattlife nvml: {device} {call}: {key[2]} (counted in meta.json)")
        self.errors[key] += 1

    def _due(self, key: str, now_ns: int, period_s: float) -> bool:
        if now_ns >= self._next[key]:
            self._next[key] = now_ns + int(period_s * 1e9)
            return True
        return False

    def _drain(self, g: _Gpu) -> list[Row]:
        """New samples of the driver's power buffer. `last_ts_us` moves only once every sample is
        converted: a failed read is retried from the same point (the buffer holds ~2.4 s)."""
        try:
            vtype, samples = g.gpu.power_samples(g.last_ts_us)
        except NvmlError as exc:
            if not exc.not_found:  # NotFound: no new sample since last_ts, not an error
                self._err("power_samples", g.device, exc)
            return []
        rows = []
        last = g.last_ts_us
        # the driver stamps samples in wall time: onto the one clock, by the wall clock's step
        # against the mapping now (a step inside this batch's ~0.5 s misplaces its older samples)
        shift = wall_step_ns()
        try:
            for s in samples:
                ts = s.timeStamp
                if ts > g.last_ts_us:
                    rows.append((ts * 1000 - shift, g.device, "power_w",
                                 sample_value(g.gpu.nv, vtype, s.sampleValue) / 1000.0,
                                 "nvml-samples"))
                    last = max(last, ts)
        except KeyError as exc:  # a value type this code does not know
            self._err("power_samples_value_type", g.device, exc)
            return []
        g.last_ts_us = last
        rows.sort()
        return rows

    def _telemetry(self, g: _Gpu, now_ns: int) -> list[Row]:
        gpu, d = g.gpu, g.device
        rows: list[Row] = []

        def add(metric: str, fn: Callable[[], float]) -> None:
            try:
                rows.append((now_ns, d, metric, float(fn()), "nvml-poll"))
            except NvmlError as exc:
                self._err(metric, d, exc)

        try:
            util_gpu, util_mem = gpu.utilization()
            rows += [(now_ns, d, "util_gpu", util_gpu, "nvml-poll"),
                     (now_ns, d, "util_mem", util_mem, "nvml-poll")]
        except NvmlError as exc:
            self._err("utilization", d, exc)
        add("sm_clock_mhz", lambda: gpu.clock_mhz("sm"))
        add("mem_clock_mhz", lambda: gpu.clock_mhz("mem"))
        add("power_limit_w", gpu.enforced_limit_w)
        add("mem_used_b", gpu.memory_used_b)
        add("temp_c", gpu.temperature_c)
        if g.gpm is not None:
            try:
                rows += [(now_ns, d, m, v, "nvml-poll") for m, v in g.gpm.read().items()]
            except NvmlError as exc:
                self._err("gpm_metrics", d, exc)
        return rows

    def poll(self, now_ns: int) -> list[Row]:
        rows: list[Row] = []
        drain = self._due("drain", now_ns, self.drain_s)
        counter = self._due("counter", now_ns, self.counter_s)
        telemetry = self._due("telemetry", now_ns, self.telemetry_s)
        for g in self.gpus:
            if g.power_mode == "nvml-samples":
                if drain:
                    rows += self._drain(g)
            else:
                try:
                    rows.append((now_ns, g.device, "power_w", g.gpu.power_w(), "nvml-poll"))
                except NvmlError as exc:
                    self._err("power_usage", g.device, exc)
            if counter and g.energy0_mj is not None:
                try:  # a failure here must not lose the samples drained above
                    mj = g.gpu.energy_mj()
                    rows.append((now(), g.device, "energy_j",
                                 (mj - g.energy0_mj) / 1000.0, "nvml-counter"))
                except NvmlError as exc:
                    self._err("energy_counter", g.device, exc)
            if telemetry:
                rows += self._telemetry(g, now_ns)
        return rows

    def final_poll(self, now_ns: int) -> list[Row]:
        self._next["drain"] = self._next["counter"] = 0
        return self.poll(now_ns)

    def info(self) -> NvmlInfo:
        return {"backend": self.name, "driver": self.driver,
                "gpu_model": self.gpus[0].name if self.gpus else None,
                "devices": {g.device: {"name": g.name, "power_source": g.power_mode,
                                        "energy_counter": g.energy0_mj is not None,
                                        "gpm": g.gpm is not None, "power_limits_w": g.limits_w}
                            for g in self.gpus},
                "drain_s": self.drain_s, "counter_s": self.counter_s,
                "telemetry_s": self.telemetry_s,
                "cuda_visible_devices": self.visible, "mapping_notes": self.notes,
                "gpus": [identity(g.gpu, g.name, g.uuid, g.pci_bus_id, g.memory_total_b,
                                  g.limits_w).to_json() for g in self.gpus],
                "nvml_errors": [{"call": c, "device": d, "error": e, "count": n}
                                for (c, d, e), n in sorted(self.errors.items())]}

    def close(self) -> None:
        for g in self.gpus:
            for exc in g.gpm.free() if g.gpm is not None else []:
                self._err("gpm_free", g.device, exc)
        try:
            self.nvml.shutdown()
        except NvmlError as exc:
            self._err("shutdown", "all", exc)
