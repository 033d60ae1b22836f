"""The interface every sensor backend implements."""

from __future__ import annotations

from typing import Any

from ..errors import SensorError

Row = tuple[int, str, str, float, str]  # t_ns, device, metric, value, source


class SensorUnavailable(SensorError):
    """A backend cannot read its sensor here; the message says why, in words for the user."""


class SensorBackend:
    """A source of trace rows. `poll` is called by the sampler every `interval_s` seconds."""

    name = "base"
    interval_s = 0.05

    def poll(self, now_ns: int) -> list[Row]:  # pragma: no cover - interface
        raise NotImplementedError

    def final_poll(self, now_ns: int) -> list[Row]:
        """Last readings when the sampler stops (backends with buffers drain them here)."""
        return self.poll(now_ns)

    def info(self) -> dict[str, Any]:
        """Static facts for meta.json (model, driver, sensors and their sources)."""
        return {"backend": self.name}

    def close(self) -> None:
        """Release the device (NVML shutdown, file handles)."""
