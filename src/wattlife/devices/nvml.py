"""NVIDIA GPUs through NVML (nvidia-ml-py).

Per GPU, each reader on its own rate (see docs/MEASUREMENTS.md, "Facts measured on the H200"):
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
UUID prefixes, MIG instances) is resolved to NVML indices (`resolve_visible_devices`); each sampled
GPU is named `gpu<k>` after its CUDA ordinal k (what `cuda:k` and local rank k mean to the
workload), and `info()["gpus"]` records ordinal, NVML index, UUID and PCI bus id for meta.json.
NVML errors are never dropped silently: each is counted per call site, device and error
(`info()["nvml_errors"]`), and its first occurrence is printed once.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter
from typing import Any

from ..contracts.clock import now_ns as now
from ..contracts.clock import wall_step_ns
from .base import Row, SensorBackend, SensorUnavailable

log = logging.getLogger(__name__)

GPM_METRICS = {  # trace metric -> pynvml constant name
    "dram_active": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise SensorUnavailable("NVML: nvidia-ml-py is not installed") from exc
    return pynvml


def sample_value(nv: Any, value_type: int, value: Any) -> float:
    """An NVML sample or field value as a float, whatever its value type."""
    result: float = {
        nv.NVML_VALUE_TYPE_DOUBLE: lambda v: v.dVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_INT: lambda v: v.uiVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda v: v.ulVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda v: v.ullVal,
        nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda v: v.sllVal,
        nv.NVML_VALUE_TYPE_SIGNED_INT: lambda v: v.siVal,
    }[value_type](value)
    return result


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def resolve_visible_devices(value: str | None, nv: Any) -> tuple[list[int], list[str]]:
    """NVML indices of the GPUs `CUDA_VISIBLE_DEVICES=value` shows, in CUDA ordinal order, and
    notes for meta.json. None: every GPU. Entries: an index, a `GPU-` UUID or a unique prefix of
    one, or a MIG instance (`MIG-<uuid>`, `MIG-GPU-<uuid>/<gi>/<ci>`), which maps to its parent GPU
    (whose power covers all its instances: said in a note). As in CUDA, the first invalid entry
    ends the list (noted)."""
    n = nv.nvmlDeviceGetCount()
    if value is None:
        return list(range(n)), []
    uuids = []
    for i in range(n):
        try:
            uuids.append(_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))))
        except nv.NVMLError:
            uuids.append("")
    out: list[int] = []
    notes: list[str] = []
    tokens = [t.strip() for t in value.split(",")] if value.strip() else []
    for pos, tok in enumerate(tokens):
        idx: int | None = None
        why = ""
        if re.fullmatch(r"\d+", tok):
            idx = int(tok) if int(tok) < n else None
            why = f"there are {n} GPU(s)"
        elif tok.startswith("MIG-"):
            m = re.fullmatch(r"MIG-(GPU-[^/]+)/\d+/\d+", tok)
            if m:
                idx = uuids.index(m.group(1)) if m.group(1) in uuids else None
            else:
                try:
                    h = nv.nvmlDeviceGetHandleByUUID(tok)
                    idx = nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h))
                except (nv.NVMLError, AttributeError):
                    idx = None
            why = "no GPU here has this MIG instance"
            if idx is not None:
                notes.append(f"CUDA_VISIBLE_DEVICES entry {tok} is a MIG instance of GPU {idx}: "
                             "its power and energy are those of the whole GPU, all instances")
        elif tok.startswith("GPU-"):
            hits = [i for i, u in enumerate(uuids) if u.startswith(tok)]
            idx = hits[0] if len(hits) == 1 else None
            why = "it matches no GPU's UUID" if not hits else f"it matches {len(hits)} GPUs' UUIDs"
        else:
            why = "expected an index, a GPU- UUID or a MIG- instance"
        if idx is None:
            rest = ", ".join(tokens[pos:])
            notes.append(f"CUDA_VISIBLE_DEVICES={value!r}: entry {tok!r} is invalid ({why}); as "
                         f"in CUDA, it and what follows ({rest}) are ignored")
            break
        if idx in out:
            notes.append(f"CUDA_VISIBLE_DEVICES={value!r}: GPU {idx} named twice; sampled once")
            continue
        out.append(idx)
    if not out:
        notes.append(f"CUDA_VISIBLE_DEVICES={value!r}: the workload sees no GPU")
    return out, notes


class _Gpu:
    def __init__(self, nv: Any, index: int, use_gpm: bool, ordinal: int, err: Any) -> None:
        self.index, self.ordinal, self.device = index, ordinal, f"gpu{ordinal}"
        self.h = nv.nvmlDeviceGetHandleByIndex(index)
        self.name = _text(nv.nvmlDeviceGetName(self.h))
        self.uuid = self.pci_bus_id = None
        try:
            self.uuid = _text(nv.nvmlDeviceGetUUID(self.h))
            self.pci_bus_id = _text(nv.nvmlDeviceGetPciInfo(self.h).busId)
        except (nv.NVMLError, AttributeError) as exc:
            err("identity", self.device, exc)
        self.last_ts_us = int(time.time() * 1e6)
        try:
            nv.nvmlDeviceGetSamples(self.h, nv.NVML_TOTAL_POWER_SAMPLES, 0)
            self.power_mode = "nvml-samples"
        except nv.NVMLError as exc:  # NotFound: supported, no sample yet; else poll the power
            self.power_mode = ("nvml-samples" if isinstance(exc, nv.NVMLError_NotFound)
                               else "nvml-poll")
            if self.power_mode == "nvml-poll":
                err("power_samples_probe", self.device, exc)
        try:
            self.energy0_mj = nv.nvmlDeviceGetTotalEnergyConsumption(self.h)
        except nv.NVMLError as exc:
            err("energy_counter_probe", self.device, exc)
            self.energy0_mj = None
        self.gpm = None
        if use_gpm:
            try:
                if nv.nvmlGpmQueryDeviceSupport(self.h).isSupportedDevice:
                    self.gpm = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
                    nv.nvmlGpmSampleGet(self.h, self.gpm[0])
            except (nv.NVMLError, AttributeError) as exc:
                err("gpm_probe", self.device, exc)
                self.gpm = None
        try:
            lo, hi = nv.nvmlDeviceGetPowerManagementLimitConstraints(self.h)
            self.limits_w = {"min": lo / 1000, "max": hi / 1000,
                             "default": nv.nvmlDeviceGetPowerManagementDefaultLimit(self.h) / 1000,
                             "current": nv.nvmlDeviceGetPowerManagementLimit(self.h) / 1000}
        except nv.NVMLError as exc:
            err("power_limits", self.device, exc)
            self.limits_w = {}


class NvmlBackend(SensorBackend):
    name = "nvml"

    def __init__(self, interval_s: float = 0.05, drain_s: float = 0.5, counter_s: float = 1.0,
                 telemetry_s: float = 1.0, indices: list[int] | None = None,
                 gpm: bool = True, visible: str | None = "env") -> None:
        """`indices`: NVML indices to sample, named gpu<index> (overrides `visible`). `visible`:
        a CUDA_VISIBLE_DEVICES value; "env" (default) reads it from the environment."""
        nv = _nvml()
        self.errors: Counter[tuple[str, str, str]] = Counter()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise SensorUnavailable(
                f"NVML: cannot initialise ({exc}); no NVIDIA driver here") from exc
        self.nv = nv
        n = nv.nvmlDeviceGetCount()
        if n == 0:
            raise SensorUnavailable("NVML: no GPU visible")
        self.interval_s, self.drain_s = interval_s, min(drain_s, 1.0)
        self.counter_s, self.telemetry_s = counter_s, telemetry_s
        if visible == "env":
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.visible = visible
        self.notes: list[str] = []
        if indices is not None:
            pairs = [(i, i) for i in indices]
        else:
            chosen, self.notes = resolve_visible_devices(visible, nv)
            pairs = list(zip(chosen, range(len(chosen)), strict=True))
        for note in self.notes:
            log.info(f"wattlife nvml: {note}")
        if not pairs:
            raise SensorUnavailable(f"NVML: no GPU to sample ({'; '.join(self.notes)})")
        self.gpus = [_Gpu(nv, i, gpm, k, self._err) for i, k in pairs]
        self._next = {"drain": 0, "counter": 0, "telemetry": 0}
        drv = nv.nvmlSystemGetDriverVersion()
        self.driver = drv.decode() if isinstance(drv, bytes) else drv

    def _err(self, call: str, device: str, exc: BaseException) -> None:
        """Count an NVML error (call site, device, error); print its first occurrence."""
        key = (call, device, type(exc).__name__ + (f": {exc}" if str(exc) else ""))
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
        nv = self.nv
        try:
            vtype, samples = nv.nvmlDeviceGetSamples(g.h, nv.NVML_TOTAL_POWER_SAMPLES, g.last_ts_us)
        except nv.NVMLError_NotFound:  # no new sample since last_ts: not an error
            return []
        except nv.NVMLError as exc:
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
                                 sample_value(nv, vtype, s.sampleValue) / 1000.0, "nvml-samples"))
                    last = max(last, ts)
        except KeyError as exc:  # a value type this code does not know
            self._err("power_samples_value_type", g.device, exc)
            return []
        g.last_ts_us = last
        rows.sort()
        return rows

    def _telemetry(self, g: _Gpu, now_ns: int) -> list[Row]:
        nv, h, d = self.nv, g.h, g.device
        rows: list[Row] = []

        def add(metric: str, fn: Any) -> None:
            try:
                rows.append((now_ns, d, metric, float(fn()), "nvml-poll"))
            except nv.NVMLError as exc:
                self._err(metric, d, exc)

        util = None
        try:
            util = nv.nvmlDeviceGetUtilizationRates(h)
        except nv.NVMLError as exc:
            self._err("utilization", d, exc)
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
            except nv.NVMLError as exc:
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
                    mw = self.nv.nvmlDeviceGetPowerUsage(g.h)
                    rows.append((now_ns, g.device, "power_w", mw / 1000.0, "nvml-poll"))
                except self.nv.NVMLError as exc:
                    self._err("power_usage", g.device, exc)
            if counter and g.energy0_mj is not None:
                try:  # a failure here must not lose the samples drained above
                    mj = self.nv.nvmlDeviceGetTotalEnergyConsumption(g.h)
                    rows.append((now(), g.device, "energy_j",
                                 (mj - g.energy0_mj) / 1000.0, "nvml-counter"))
                except self.nv.NVMLError as exc:
                    self._err("energy_counter", g.device, exc)
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
                "telemetry_s": self.telemetry_s,
                "cuda_visible_devices": self.visible, "mapping_notes": self.notes,
                "gpus": [{"device": g.device, "cuda_ordinal": g.ordinal, "nvml_index": g.index,
                          "uuid": g.uuid, "pci_bus_id": g.pci_bus_id, "name": g.name,
                          "local_rank": g.ordinal} for g in self.gpus],
                "nvml_errors": [{"call": c, "device": d, "error": e, "count": n}
                                for (c, d, e), n in sorted(self.errors.items())]}

    def close(self) -> None:
        for g in self.gpus:
            for s in g.gpm or []:
                try:
                    self.nv.nvmlGpmSampleFree(s)
                except self.nv.NVMLError as exc:
                    self._err("gpm_free", g.device, exc)
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError as exc:
            self._err("shutdown", "all", exc)
