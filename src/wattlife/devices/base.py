"""The interface every sensor backend implements, and the typed `info()` of each role."""

from __future__ import annotations

from typing import Any, ClassVar, NotRequired, TypedDict

from ..contracts.gpus import GpuIdentityDict
from ..errors import SensorError

Row = tuple[int, str, str, float, str]  # t_ns, device, metric, value, source

#: what a backend senses: one of the sampler's roles (`devices.registry`: GPU_ROLE, CPU_ROLE, ...)
#: or "other"; meta.json's GPU facts come from the backend whose role is the GPU role
Role = str


class SensorUnavailable(SensorError):
    """A backend cannot read its sensor here; the message says why, in words for the user."""


class BackendInfo(TypedDict):
    """`info()` of any backend (meta.json's `sampler.backends[]`): its name; each role adds its
    keys (a backend that failed to describe itself: `error`, written by `wattlife run`)."""

    backend: str
    error: NotRequired[str]


class GpuBackendInfo(BackendInfo):
    """`info()` of a GPU backend: the model (first GPU's), the driver, and one
    `contracts.gpus.GpuIdentity` entry per sampled GPU (absent: a simulated GPU, no identity)."""

    gpu_model: str | None
    driver: str | None
    gpus: NotRequired[list[GpuIdentityDict]]


class CpuBackendInfo(BackendInfo, total=False):
    """`info()` of a CPU backend: its devices and source, what its energy covers, the load of
    the watched process tree (`cpu_load.TreeLoad.summary`), and an estimate's model."""

    devices: list[str]
    source: str
    energy_scope: str
    load: dict[str, Any]
    model: str
    idle_w: float
    max_w: float


class NodeBackendInfo(BackendInfo, total=False):
    """`info()` of a whole-node backend (`devices.node.NodePoller`): its source and metrics, the
    configured and the observed reading period, counts of readings, failures and gaps (with
    their spans), the reading thread's CPU time, and the reader's own description (endpoint,
    chassis, host: never a credential)."""

    devices: list[str]
    source: str
    metrics: list[str]
    period_s: float
    timeout_s: float
    reading_period_s: float | None
    readings: int
    cpu_time_s: float
    failures: int
    inconsistent_reads: int
    counter_resets: int
    gap_after_s: float
    gaps: list[list[int]]
    errors: list[str]


class SensorBackend:
    """A source of trace rows. `poll` is called by the sampler every `interval_s` seconds."""

    name = "base"
    role: ClassVar[Role] = "other"
    interval_s = 0.05

    def poll(self, now_ns: int) -> list[Row]:  # pragma: no cover - interface
        raise NotImplementedError

    def final_poll(self, now_ns: int) -> list[Row]:
        """Last readings when the sampler stops (backends with buffers drain them here)."""
        return self.poll(now_ns)

    def info(self) -> BackendInfo:
        """Static facts for meta.json (model, driver, sensors and their sources): a
        `BackendInfo`, a `GpuBackendInfo` for role "gpu"."""
        return {"backend": self.name}

    def close(self) -> None:
        """Release the device (NVML shutdown, file handles)."""
