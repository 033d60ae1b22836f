"""CPU power estimate for hosts without RAPL, charged to the run's own process tree. Every number
it produces is labelled `estimate`.

Model: P = idle_w + (max_w - idle_w) * u_job, with u_job the share of the machine's CPUs that
the run's process tree (CMD and its descendants: `devices.cpu_load.TreeLoad`) used over the
interval since the previous reading, `idle_w` and `max_w` per host from the config
(`sampler.cpu_estimate`). The machine's idle power is the run's (as on a node of its own); the
rest of the machine's load is not: it is reported beside it (`util_cpu_others`, and the whole
machine's `util_cpu_host`), and a run during which other processes used more than
`OTHERS_WARN_SHARE` of the machine is flagged (meta.json's sensor_notes). It captures how busy the
CPUs were, not their frequency, voltage or memory traffic (which others' load changes too); treat
it as an order of magnitude, never as a measurement.
"""

from __future__ import annotations

from typing import cast

from ..errors import InputError
from .base import CpuBackendInfo, Row, SensorBackend
from .cpu_load import TreeLoad, WatchesTree


class CpuEstimateBackend(WatchesTree, SensorBackend):
    name = "cpu-estimate"
    role = "cpu"
    load_warning = ("the estimate charges the run its own tree's CPU time only, but their load "
                    "also changes clocks and contention")

    def __init__(self, idle_w: float = 50.0, max_w: float = 200.0,
                 interval_s: float = 0.05) -> None:
        if not 0 <= idle_w <= max_w:
            raise InputError("sampler.cpu_estimate: need 0 <= idle_w <= max_w, "
                             f"got {idle_w}, {max_w}")
        self.idle_w, self.max_w, self.interval_s = idle_w, max_w, interval_s
        self.load = TreeLoad()

    def power_w(self, util: float) -> float:
        return self.idle_w + (self.max_w - self.idle_w) * util

    def poll(self, now_ns: int) -> list[Row]:
        job, host, others = self.load.sample()
        return [(now_ns, "cpu0", "power_w", self.power_w(job), "estimate"),
                (now_ns, "cpu0", "util_cpu", job * 100.0, "estimate"),
                (now_ns, "cpu0", "util_cpu_host", host * 100.0, "estimate"),
                (now_ns, "cpu0", "util_cpu_others", others * 100.0, "estimate")]

    def info(self) -> CpuBackendInfo:
        info = {"backend": self.name, "devices": ["cpu0"], "source": "estimate",
                "model": "P = idle_w + (max_w - idle_w) * u_job; u_job: the CPU time of the "
                         "run's process tree (CMD and its descendants) over wall time x CPUs",
                "idle_w": self.idle_w, "max_w": self.max_w, **self.load.summary()}
        return cast(CpuBackendInfo, info)  # the load summary's keys, spread (TreeLoad.summary)
