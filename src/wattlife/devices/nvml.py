"""NVIDIA GPUs through NVML (nvidia-ml-py).

Per GPU, each reader on its own rate (see DESIGN.md, "Facts measured on the H200"):
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
"""

from __future__ import annotations

import time
from typing import Any

from .base import Row, SensorBackend, SensorUnavailable

GPM_METRICS = {  # trace metric -> pynvml constant name
    "dram_active": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}


def _nvml():
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise SensorUnavailable("NVML: nvidia-ml-py is not installed") from exc
    return pynvml


def _sample_value(nv: Any, value_type: int, value: Any) -> float:
    return {
        nv.NVML_VALUE_TYPE_DOUBLE: lambda v: v.dVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_INT: lambda v: v.uiVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda v: v.ulVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda v: v.ullVal,
        nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda v: v.sllVal,
        nv.NVML_VALUE_TYPE_SIGNED_INT: lambda v: v.siVal,
    }[value_type](value)


class _Gpu:
    def __init__(self, nv: Any, index: int, use_gpm: bool) -> None:
        self.index, self.device = index, f"gpu{index}"
        self.h = nv.nvmlDeviceGetHandleByIndex(index)
        self.name = nv.nvmlDeviceGetName(self.h)
        self.name = self.name.decode() if isinstance(self.name, bytes) else self.name
        self.last_ts_us = int(time.time() * 1e6)
        try:
            nv.nvmlDeviceGetSamples(self.h, nv.NVML_TOTAL_POWER_SAMPLES, 0)
            self.power_mode = "nvml-samples"
        except nv.NVMLError as exc:
            self.power_mode = "nvml-samples" if isinstance(exc, nv.NVMLError_NotFound) else "nvml-poll"
        try:
            self.energy0_mj = nv.nvmlDeviceGetTotalEnergyConsumption(self.h)
        except nv.NVMLError:
            self.energy0_mj = None
        self.gpm = None
        if use_gpm:
            try:
                if nv.nvmlGpmQueryDeviceSupport(self.h).isSupportedDevice:
                    self.gpm = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
                    nv.nvmlGpmSampleGet(self.h, self.gpm[0])
            except (nv.NVMLError, AttributeError):
                self.gpm = None
        try:
            lo, hi = nv.nvmlDeviceGetPowerManagementLimitConstraints(self.h)
            self.limits_w = {"min": lo / 1000, "max": hi / 1000,
                             "default": nv.nvmlDeviceGetPowerManagementDefaultLimit(self.h) / 1000,
                             "current": nv.nvmlDeviceGetPowerManagementLimit(self.h) / 1000}
        except nv.NVMLError:
            self.limits_w = {}


class NvmlBackend(SensorBackend):
    name = "nvml"

    def __init__(self, interval_s: float = 0.05, drain_s: float = 0.5, counter_s: float = 1.0,
                 telemetry_s: float = 1.0, indices: list[int] | None = None,
                 gpm: bool = True) -> None:
        nv = _nvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise SensorUnavailable(f"NVML: cannot initialise ({exc}); no NVIDIA driver here") from exc
        self.nv = nv
        n = nv.nvmlDeviceGetCount()
        if n == 0:
            raise SensorUnavailable("NVML: no GPU visible")
        self.interval_s, self.drain_s = interval_s, min(drain_s, 1.0)
        self.counter_s, self.telemetry_s = counter_s, telemetry_s
        self.gpus = [_Gpu(nv, i, gpm) for i in (indices if indices is not None else range(n))]
        self._next = {"drain": 0, "counter": 0, "telemetry": 0}
        drv = nv.nvmlSystemGetDriverVersion()
        self.driver = drv.decode() if isinstance(drv, bytes) else drv

    def _due(self, key: str, now_ns: int, period_s: float) -> bool:
        if now_ns >= self._next[key]:
            self._next[key] = now_ns + int(period_s * 1e9)
            return True
        return False

    def _drain(self, g: _Gpu) -> list[Row]:
        nv = self.nv
        try:
            vtype, samples = nv.nvmlDeviceGetSamples(g.h, nv.NVML_TOTAL_POWER_SAMPLES, g.last_ts_us)
        except nv.NVMLError_NotFound:  # no new sample since last_ts
            return []
        rows = []
        last = g.last_ts_us
        for s in samples:
            ts = s.timeStamp
            if ts > g.last_ts_us:
                rows.append((ts * 1000, g.device, "power_w",
                             _sample_value(nv, vtype, s.sampleValue) / 1000.0, "nvml-samples"))
                last = max(last, ts)
        g.last_ts_us = last
        rows.sort()
        return rows

    def _telemetry(self, g: _Gpu, now_ns: int) -> list[Row]:
        nv, h, d = self.nv, g.h, g.device
        rows: list[Row] = []

        def add(metric: str, fn: Any) -> None:
            try:
                rows.append((now_ns, d, metric, float(fn()), "nvml-poll"))
            except nv.NVMLError:
                pass

        util = None
        try:
            util = nv.nvmlDeviceGetUtilizationRates(h)
        except nv.NVMLError:
            pass
        if util is not None:
            rows += [(now_ns, d, "util_gpu", float(util.gpu), "nvml-poll"),
                     (now_ns, d, "util_mem", float(util.memory), "nvml-poll")]
        add("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        add("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        add("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
        add("mem_used_b", lambda: nv.nvmlDeviceGetMemoryInfo(h).used)
        add("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        if g.gpm is not None:
            try:
                nv.nvmlGpmSampleGet(h, g.gpm[1])
                mg = nv.c_nvmlGpmMetricsGet_t()
                mg.version = nv.NVML_GPM_METRICS_GET_VERSION
                mg.numMetrics = len(GPM_METRICS)
                mg.sample1, mg.sample2 = g.gpm[0], g.gpm[1]
                for i, const in enumerate(GPM_METRICS.values()):
                    mg.metrics[i].metricId = getattr(nv, const)
                nv.nvmlGpmMetricsGet(mg)
                for i, metric in enumerate(GPM_METRICS):
                    if mg.metrics[i].nvmlReturn == nv.NVML_SUCCESS:
                        rows.append((now_ns, d, metric, mg.metrics[i].value / 100.0, "nvml-poll"))
                g.gpm.reverse()  # this sample starts the next window
            except nv.NVMLError:
                pass
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
                    mw = self.nv.nvmlDeviceGetPowerUsage(g.h)
                    rows.append((now_ns, g.device, "power_w", mw / 1000.0, "nvml-poll"))
                except self.nv.NVMLError:
                    pass
            if counter and g.energy0_mj is not None:
                mj = self.nv.nvmlDeviceGetTotalEnergyConsumption(g.h)
                rows.append((time.time_ns(), g.device, "energy_j", (mj - g.energy0_mj) / 1000.0,
                             "nvml-counter"))
            if telemetry:
                rows += self._telemetry(g, now_ns)
        return rows

    def final_poll(self, now_ns: int) -> list[Row]:
        self._next["drain"] = self._next["counter"] = 0
        return self.poll(now_ns)

    def info(self) -> dict[str, Any]:
        return {"backend": self.name, "driver": self.driver,
                "gpu_model": self.gpus[0].name if self.gpus else None,
                "devices": {g.device: {"name": g.name, "power_source": g.power_mode,
                                        "energy_counter": g.energy0_mj is not None,
                                        "gpm": g.gpm is not None, "power_limits_w": g.limits_w}
                            for g in self.gpus},
                "drain_s": self.drain_s, "counter_s": self.counter_s,
                "telemetry_s": self.telemetry_s}

    def close(self) -> None:
        for g in self.gpus:
            for s in g.gpm or []:
                try:
                    self.nv.nvmlGpmSampleFree(s)
                except self.nv.NVMLError:
                    pass
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass
