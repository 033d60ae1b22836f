"""NVIDIA GPUs through NVML (nvidia-ml-py): the one vendor class that identifies, reads and caps.

Zeus's GPU classes are the model: `NvidiaGpus` opens NVML once and hands out `NvidiaGpu`s, each
of which reads its identity, power, energy and telemetry and reads or sets its power limit.
Every NVML failure is one error type, `NvmlError` (its `reason` is the NVML error's class and
text, as meta.json counts it; `not_found` marks NVML's "no data yet"). The sensor
(`devices.nvml`) and the power-cap backends (`devices.powercap`) both use it.

One GPU numbering: a GPU has the vendor's own index (`index`, the NVML index) and its visible
ordinal (`ordinal`, the workload's `cuda:k` and the trace's device name `gpu<k>`).
`NvidiaGpus.visible(CUDA_VISIBLE_DEVICES)` is the one place that maps one to the other
(`resolve_visible_devices`); `NvidiaGpus.by_index(i)` numbers a GPU by its NVML index (the cap
backends, whose state files name NVML indices, and the sensor's explicit `indices`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..contracts.gpus import GpuIdentity
from ..contracts.kinds import GPU

GPM_METRICS = {  # trace metric -> pynvml constant name
    "dram_active": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}


class NvmlError(RuntimeError):
    """An NVML call failed (or NVML is missing). `reason`: the NVML error's class and text (the
    key meta.json counts it by); `detail`: its text alone; `not_found`: NVML's NotFound."""

    def __init__(self, message: str, reason: str = "", detail: str = "",
                 not_found: bool = False) -> None:
        super().__init__(message)
        self.reason, self.detail, self.not_found = reason or message, detail, not_found


def error_reason(exc: BaseException) -> str:
    """An error as meta.json counts it: its class name, then its text where it has one."""
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


def load_nvml() -> Any:
    """The pynvml module; NvmlError (reason "not installed") where nvidia-ml-py is missing."""
    try:
        import pynvml
    except ImportError:  # pragma: no cover - dependency of the package
        raise NvmlError("nvidia-ml-py is not installed", reason="not installed") from None
    return pynvml


def sample_value(nv: Any, value_type: int, value: Any) -> float:
    """An NVML sample or field value as a float, whatever its value type."""
    return float({
        nv.NVML_VALUE_TYPE_DOUBLE: lambda v: v.dVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_INT: lambda v: v.uiVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda v: v.ulVal,
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda v: v.ullVal,
        nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda v: v.sllVal,
        nv.NVML_VALUE_TYPE_SIGNED_INT: lambda v: v.siVal,
    }[value_type](value))


def text(v: Any) -> str:
    """An NVML string (bytes in old bindings) as str."""
    return v.decode() if isinstance(v, bytes) else str(v)


class NvidiaGpu:
    """One GPU: NVML index `index`, visible ordinal `ordinal` (trace device `gpu<ordinal>`)."""

    def __init__(self, nv: Any, index: int, ordinal: int) -> None:
        self.nv, self.index, self.ordinal = nv, index, ordinal
        self.device = GPU.device(ordinal)
        try:
            self.handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            raise self.error("open the device", exc) from exc

    def error(self, what: str, exc: BaseException) -> NvmlError:
        """The NvmlError of a failed NVML call (`what` could not be done)."""
        return NvmlError(f"GPU {self.index}: NVML cannot {what}: {exc}", error_reason(exc),
                         str(exc), isinstance(exc, self.nv.NVMLError_NotFound))

    def call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(handle, *args)`; an NVML error is an NvmlError saying `what` could not be done."""
        try:
            return fn(self.handle, *args)
        except self.nv.NVMLError as exc:
            raise self.error(what, exc) from exc

    # identity --------------------------------------------------------------------------------
    def name(self) -> str:
        return text(self.call("read the name", self.nv.nvmlDeviceGetName))

    def uuid(self) -> str:
        return text(self.call("read the UUID", self.nv.nvmlDeviceGetUUID))

    def bus_id(self) -> str:
        return text(self.call("read the PCI info", self.nv.nvmlDeviceGetPciInfo).busId)

    def memory_total_b(self) -> int:
        return int(self.call("read the memory info", self.nv.nvmlDeviceGetMemoryInfo).total)

    # power and energy ------------------------------------------------------------------------
    def power_samples(self, since_us: int) -> tuple[int, list[Any]]:
        """(value type, samples) of the driver's power buffer newer than `since_us`
        (NvmlError with `not_found` when there is none)."""
        vtype, samples = self.call("read the power samples", self.nv.nvmlDeviceGetSamples,
                                   self.nv.NVML_TOTAL_POWER_SAMPLES, since_us)
        return int(vtype), list(samples)

    def power_w(self) -> float:
        return float(self.call("read the power", self.nv.nvmlDeviceGetPowerUsage)) / 1000.0

    def energy_mj(self) -> int:
        return int(self.call("read the energy counter",
                             self.nv.nvmlDeviceGetTotalEnergyConsumption))

    # power limits ----------------------------------------------------------------------------
    def power_limit_w(self) -> float:
        return float(self.call("read the power limit",
                               self.nv.nvmlDeviceGetPowerManagementLimit)) / 1000.0

    def enforced_limit_w(self) -> float:
        return float(self.call("read the enforced power limit",
                               self.nv.nvmlDeviceGetEnforcedPowerLimit)) / 1000.0

    def limit_range_w(self) -> tuple[float, float, float]:
        """(min, max, default) power limit, W."""
        lo, hi = self.call("read the power limit range",
                           self.nv.nvmlDeviceGetPowerManagementLimitConstraints)
        default = self.call("read the default power limit",
                            self.nv.nvmlDeviceGetPowerManagementDefaultLimit)
        return lo / 1000.0, hi / 1000.0, default / 1000.0

    def set_power_limit_w(self, watts: float) -> None:
        self.call(f"set the power limit to {watts:g} W",
                  self.nv.nvmlDeviceSetPowerManagementLimit, int(round(watts * 1000)))

    # telemetry -------------------------------------------------------------------------------
    def utilization(self) -> tuple[float, float]:
        """(GPU, memory) utilisation, percent."""
        u = self.call("read the utilisation", self.nv.nvmlDeviceGetUtilizationRates)
        return float(u.gpu), float(u.memory)

    def clock_mhz(self, which: str) -> float:
        """The SM (`sm`) or memory (`mem`) clock, MHz."""
        kind = self.nv.NVML_CLOCK_SM if which == "sm" else self.nv.NVML_CLOCK_MEM
        return float(self.call(f"read the {which} clock", self.nv.nvmlDeviceGetClockInfo, kind))

    def memory_used_b(self) -> float:
        return float(self.call("read the memory info", self.nv.nvmlDeviceGetMemoryInfo).used)

    def temperature_c(self) -> float:
        return float(self.call("read the temperature", self.nv.nvmlDeviceGetTemperature,
                               self.nv.NVML_TEMPERATURE_GPU))

    def gpm_supported(self) -> bool:
        return bool(self.call("query GPM support",
                              self.nv.nvmlGpmQueryDeviceSupport).isSupportedDevice)


class GpmWindow:
    """GPM metrics (Hopper+) of one GPU over consecutive windows: each `read` covers the time
    since the previous one (two samples, swapped after every read)."""

    def __init__(self, gpu: NvidiaGpu) -> None:
        nv = self.nv = gpu.nv
        self.gpu = gpu
        try:
            self.samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
        except nv.NVMLError as exc:
            raise gpu.error("allocate GPM samples", exc) from exc
        gpu.call("take a GPM sample", nv.nvmlGpmSampleGet, self.samples[0])

    def read(self) -> dict[str, float]:
        """{trace metric: fraction 0..1} of the window that ends now (metrics NVML could not
        compute are left out)."""
        nv = self.nv
        self.gpu.call("take a GPM sample", nv.nvmlGpmSampleGet, self.samples[1])
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRICS)
        mg.sample1, mg.sample2 = self.samples[0], self.samples[1]
        for i, const in enumerate(GPM_METRICS.values()):
            mg.metrics[i].metricId = getattr(nv, const)
        try:
            nv.nvmlGpmMetricsGet(mg)
        except nv.NVMLError as exc:
            raise self.gpu.error("compute the GPM metrics", exc) from exc
        out = {metric: mg.metrics[i].value / 100.0 for i, metric in enumerate(GPM_METRICS)
               if mg.metrics[i].nvmlReturn == nv.NVML_SUCCESS}
        self.samples.reverse()  # this sample starts the next window
        return out

    def free(self) -> list[NvmlError]:
        """Free both samples; the failures, one per sample that could not be freed."""
        failed = []
        for s in self.samples:
            try:
                self.nv.nvmlGpmSampleFree(s)
            except self.nv.NVMLError as exc:
                failed.append(self.gpu.error("free a GPM sample", exc))
        return failed


class NvidiaGpus:
    """NVML opened once (`nvmlInit`; `shutdown` closes it): the GPUs by NVML index or as a
    `CUDA_VISIBLE_DEVICES` value shows them. NvmlError where NVML or its driver is missing."""

    def __init__(self) -> None:
        nv = self.nv = load_nvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlError(f"NVML cannot initialise: {exc}", error_reason(exc), str(exc)
                            ) from exc

    def count(self) -> int:
        return int(self.nv.nvmlDeviceGetCount())

    def driver(self) -> str:
        return text(self.nv.nvmlSystemGetDriverVersion())

    def by_index(self, index: int, ordinal: int | None = None) -> NvidiaGpu:
        """GPU `index` (NVML index), named `gpu<ordinal>` (default: its index)."""
        return NvidiaGpu(self.nv, index, index if ordinal is None else ordinal)

    def visible(self, value: str | None) -> tuple[list[NvidiaGpu], list[str]]:
        """The GPUs `CUDA_VISIBLE_DEVICES=value` shows, in visible-ordinal order (GPU k is
        `gpu<k>`), and the notes of `resolve_visible_devices`."""
        indices, notes = resolve_visible_devices(value, self.nv)
        return [self.by_index(i, k) for k, i in enumerate(indices)], notes

    def shutdown(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError as exc:
            raise NvmlError(f"NVML cannot shut down: {exc}", error_reason(exc), str(exc)
                            ) from exc


def identity(gpu: NvidiaGpu, model: str | None, uuid: str | None, bus_id: str | None,
             memory_total_b: int | None, limits_w: dict[str, float]) -> GpuIdentity:
    """The vendor-neutral identity (`contracts.gpus`) of a GPU whose facts were read."""
    rng: dict[str, float] = {k: limits_w[k] for k in ("default", "min", "max") if k in limits_w}
    return GpuIdentity(device=gpu.device, ordinal=gpu.ordinal, vendor_index=gpu.index, uuid=uuid,
                       model=model, bus_id=bus_id, local_rank=gpu.ordinal,
                       memory_total_b=memory_total_b, power_limits_w=rng or None)


def _uuids(nv: Any, n: int) -> list[str]:
    out = []
    for i in range(n):
        try:
            out.append(text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))))
        except nv.NVMLError:
            out.append("")
    return out


def _mig_parent(tok: str, uuids: list[str], nv: Any) -> int | None:
    """The NVML index of the GPU a MIG instance entry belongs to (None: no such instance)."""
    m = re.fullmatch(r"MIG-(GPU-[^/]+)/\d+/\d+", tok)
    if m:
        return uuids.index(m.group(1)) if m.group(1) in uuids else None
    try:
        h = nv.nvmlDeviceGetHandleByUUID(tok)
        return int(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)))
    except (nv.NVMLError, AttributeError):
        return None


def _entry(tok: str, n: int, uuids: list[str], nv: Any) -> tuple[int | None, str]:
    """(NVML index or None, why not) of one CUDA_VISIBLE_DEVICES entry."""
    if re.fullmatch(r"\d+", tok):
        return (int(tok) if int(tok) < n else None), f"there are {n} GPU(s)"
    if tok.startswith("MIG-"):
        return _mig_parent(tok, uuids, nv), "no GPU here has this MIG instance"
    if tok.startswith("GPU-"):
        hits = [i for i, u in enumerate(uuids) if u.startswith(tok)]
        why = "it matches no GPU's UUID" if not hits else f"it matches {len(hits)} GPUs' UUIDs"
        return (hits[0] if len(hits) == 1 else None), why
    return None, "expected an index, a GPU- UUID or a MIG- instance"


def resolve_visible_devices(value: str | None, nv: Any) -> tuple[list[int], list[str]]:
    """NVML indices of the GPUs `CUDA_VISIBLE_DEVICES=value` shows, in CUDA ordinal order, and
    notes for meta.json. None: every GPU. Entries: an index, a `GPU-` UUID or a unique prefix of
    one, or a MIG instance (`MIG-<uuid>`, `MIG-GPU-<uuid>/<gi>/<ci>`), which maps to its parent GPU
    (whose power covers all its instances: said in a note). As in CUDA, the first invalid entry
    ends the list (noted)."""
    n = nv.nvmlDeviceGetCount()
    if value is None:
        return list(range(n)), []
    uuids = _uuids(nv, n)
    out: list[int] = []
    notes: list[str] = []
    tokens = [t.strip() for t in value.split(",")] if value.strip() else []
    for pos, tok in enumerate(tokens):
        idx, why = _entry(tok, n, uuids, nv)
        if idx is not None and tok.startswith("MIG-"):
            notes.append(f"CUDA_VISIBLE_DEVICES entry {tok} is a MIG instance of GPU {idx}: "
                         "its power and energy are those of the whole GPU, all instances")
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
