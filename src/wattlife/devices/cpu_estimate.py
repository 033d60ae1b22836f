"""CPU power estimate for hosts without RAPL. Every number it produces is labelled `estimate`.

Model: P = idle_w + (max_w - idle_w) * u, with u the whole host's CPU utilisation (0..1) over the
interval since the previous reading (psutil), `idle_w` and `max_w` per host from the config
(`sampler.cpu_estimate`). It captures how busy the CPU was, not its frequency, voltage or memory
traffic; treat it as an order of magnitude, never as a measurement.
"""

from __future__ import annotations

from typing import Any

import psutil

from .base import Row, SensorBackend


class CpuEstimateBackend(SensorBackend):
    name = "cpu-estimate"

    def __init__(self, idle_w: float = 50.0, max_w: float = 200.0,
                 interval_s: float = 0.05) -> None:
        if not 0 <= idle_w <= max_w:
            raise ValueError("sampler.cpu_estimate: need 0 <= idle_w <= max_w, "
                             f"got {idle_w}, {max_w}")
        self.idle_w, self.max_w, self.interval_s = idle_w, max_w, interval_s
        psutil.cpu_percent(interval=None)  # first call primes the counters

    def power_w(self, util: float) -> float:
        return self.idle_w + (self.max_w - self.idle_w) * util

    def poll(self, now_ns: int) -> list[Row]:
        util = psutil.cpu_percent(interval=None) / 100.0
        return [(now_ns, "cpu0", "power_w", self.power_w(util), "estimate"),
                (now_ns, "cpu0", "util_cpu", util * 100.0, "estimate")]

    def info(self) -> dict[str, Any]:
        return {"backend": self.name, "devices": ["cpu0"], "source": "estimate",
                "model": "P = idle_w + (max_w - idle_w) * cpu_utilisation",
                "idle_w": self.idle_w, "max_w": self.max_w, "n_cpus": psutil.cpu_count()}
