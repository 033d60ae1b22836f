"""A simulated GPU sensor backend: power readings of the simulated GPU model, labelled `sim`.

The physical model (step time, power, the clock a cap allows, the cap limits) is
`wattlife.simgpu_model.SimGpuModel`; this module only turns it into sensor rows. It exists so
that the demo and the tests can run the whole pipeline on a machine without a GPU; it never
stands in for a measurement.
"""

from __future__ import annotations

import os
from typing import Any

from ..contracts.kinds import GPU
from ..contracts.sources import GPU_ROLE
from ..simgpu_model import CapRefused, SimGpuModel
from .base import GpuBackendInfo, Row, SensorBackend


class SimGpuInfo(GpuBackendInfo):
    """`SimGpuBackend.info()`: the GPU role's keys (no `gpus`: a simulated GPU has no identity),
    labelled `sim`, with the model's settings."""

    source: str
    devices: list[str]
    mem_share: float
    cap_w: float
    model: str
    pid_watched: int


class SimGpuBackend(SensorBackend):
    """Simulated GPU power readings, driven by the CPU activity of the watched process tree.

    The demo runs its training on the CPU; this backend turns that process tree's CPU
    utilisation into the activity of `n_gpus` simulated GPUs, so phase boundaries show in the
    simulated power. Labelled `sim` in every row."""

    name = "sim-gpu"
    role = GPU_ROLE

    def __init__(self, model: SimGpuModel | None = None, n_gpus: int = 1, mem_share: float = 0.3,
                 interval_s: float = 0.02, cap_w: float | None = None) -> None:
        self.model = model or SimGpuModel()
        self.n_gpus, self.mem_share, self.interval_s = n_gpus, mem_share, interval_s
        self.cap_w = cap_w if cap_w is not None else self.model.tdp_w
        self.watch_pid: int | None = None
        self._procs: dict[int, Any] = {}
        self._last_telemetry = 0

    def _activity(self) -> float:
        """The watched tree's CPU utilisation since the last poll (1.0 = one CPU busy, capped);
        a process is counted from its second poll on (`cpu_percent` needs a first reading)."""
        import psutil

        from .cpu_load import tree_processes

        procs = tree_processes(self.watch_pid, self._procs)
        if procs is None:
            return 0.0
        total = 0.0
        for proc, first in procs:
            try:
                share = proc.cpu_percent(None)
            except psutil.Error:
                continue
            total += 0.0 if first else share
        return min(1.0, total / 100.0)

    def poll(self, now_ns: int) -> list[Row]:
        act = self._activity()
        f, g = 1.0, 1.0
        if act > 0:
            try:
                op = self.model.operating_point(self.cap_w, self.mem_share)
                f, g = op.f, op.g
            except CapRefused:  # the limit is a ceiling: the lowest state, held at the cap
                f, g = self.model.f_min, self.model.g_min
        p = min(float(self.model.power(f, self.mem_share, act, g)), self.cap_w)
        rows: list[Row] = [(now_ns, GPU.device(i), "power_w", p, "sim") for i in range(self.n_gpus)]
        if now_ns - self._last_telemetry > 1_000_000_000:
            self._last_telemetry = now_ns
            clock_mhz = f * self.model.sm_clock_max_mhz
            for i in range(self.n_gpus):
                rows += [(now_ns, GPU.device(i), "power_limit_w", self.cap_w, "sim"),
                         (now_ns, GPU.device(i), "sm_clock_mhz", clock_mhz, "sim"),
                         (now_ns, GPU.device(i), "util_gpu", act * 100.0, "sim")]
        return rows

    def info(self) -> SimGpuInfo:
        return {"backend": self.name, "source": "sim", "gpu_model": self.model.name,
                "devices": [GPU.device(i) for i in range(self.n_gpus)], "mem_share": self.mem_share,
                "cap_w": self.cap_w, "driver": "none (simulated)",
                "model": "see wattlife.simgpu_model", "pid_watched": self.watch_pid or os.getpid()}
