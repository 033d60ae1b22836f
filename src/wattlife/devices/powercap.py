"""Per-GPU power limits with a restore guarantee: `PowerCapController`.

Backends: `nvml` (nvidia-ml-py setter), `nvidia-smi` (`nvidia-smi -i N -pl W`), `simulated` (no
hardware; the limits live in the controller and in the state file, labelled sim). Real backends
change limits only when the caller opts in (`allow_real=True`, from `powercap.allow_real` in the config).

Before the first change the original limits are written to a state file; they are restored on
normal exit, on an exception, and on SIGINT/SIGTERM (the controller is a context manager and
installs signal handlers while active). After a SIGKILL, `wattlife powercap restore --state F`
(e.g. in a Slurm epilog) restores from the state file. Caps are validated against each device's
min/max constraint; set them before the workload creates its CUDA context.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

BACKENDS = ("nvml", "nvidia-smi", "simulated")


class PowerCapError(RuntimeError):
    pass


class _Nvml:
    def __init__(self) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()

    def count(self) -> int:
        return self.nv.nvmlDeviceGetCount()

    def _h(self, i: int):
        return self.nv.nvmlDeviceGetHandleByIndex(i)

    def get(self, i: int) -> float:
        return self.nv.nvmlDeviceGetPowerManagementLimit(self._h(i)) / 1000.0

    def constraints(self, i: int) -> tuple[float, float, float]:
        lo, hi = self.nv.nvmlDeviceGetPowerManagementLimitConstraints(self._h(i))
        default = self.nv.nvmlDeviceGetPowerManagementDefaultLimit(self._h(i))
        return lo / 1000.0, hi / 1000.0, default / 1000.0

    def set(self, i: int, watts: float) -> None:
        self.nv.nvmlDeviceSetPowerManagementLimit(self._h(i), int(round(watts * 1000)))


class _NvidiaSmi(_Nvml):
    """Reads through NVML, sets through `nvidia-smi -i N -pl W` (what the PFI paper used)."""

    def set(self, i: int, watts: float) -> None:
        out = subprocess.run(["nvidia-smi", "-i", str(i), "-pl", f"{watts:.0f}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise PowerCapError(f"nvidia-smi -i {i} -pl {watts:.0f} failed: {out.stderr.strip()}")


class _Simulated:
    """No hardware: limits in memory, constraints of the simulated GPU model."""

    def __init__(self, n: int = 1, min_w: float = 200.0, max_w: float = 700.0) -> None:
        self.limits = [max_w] * n
        self.min_w, self.max_w = min_w, max_w

    def count(self) -> int:
        return len(self.limits)

    def get(self, i: int) -> float:
        return self.limits[i]

    def constraints(self, i: int) -> tuple[float, float, float]:
        return self.min_w, self.max_w, self.max_w

    def set(self, i: int, watts: float) -> None:
        self.limits[i] = watts


def _make(backend: str, n_sim: int = 1) -> Any:
    if backend == "nvml":
        return _Nvml()
    if backend == "nvidia-smi":
        return _NvidiaSmi()
    if backend == "simulated":
        return _Simulated(n_sim)
    raise ValueError(f"powercap.backend must be one of {BACKENDS}, got {backend!r}")


class PowerCapController:
    """Set per-GPU power caps and always put the original limits back."""

    def __init__(self, backend: str = "simulated", state_file: str | Path = "powercap-state.json",
                 allow_real: bool = False, gpus: list[int] | None = None, n_sim: int = 1) -> None:
        self.backend, self.allow_real = backend, allow_real
        self.dev = _make(backend, n_sim)
        self.state_file = Path(state_file)
        self.gpus = list(range(self.dev.count())) if gpus is None else gpus
        self._saved: dict[int, float] | None = None
        self._old_handlers: dict[int, Any] = {}

    def describe(self) -> dict[str, Any]:
        out = {"backend": self.backend, "source": "sim" if self.backend == "simulated" else "nvml",
               "gpus": {}}
        for i in self.gpus:
            lo, hi, default = self.dev.constraints(i)
            out["gpus"][i] = {"limit_w": self.dev.get(i), "min_w": lo, "max_w": hi,
                              "default_w": default}
        return out

    def _save(self) -> None:
        if self._saved is not None:
            return
        self._saved = {i: self.dev.get(i) for i in self.gpus}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"backend": self.backend, "pid": os.getpid(),
                                   "limits_w": self._saved}))
        tmp.replace(self.state_file)

    def set_cap(self, watts: float) -> None:
        """Set every managed GPU to `watts`, after checking each one's constraints."""
        if self.backend != "simulated" and not self.allow_real:
            raise PowerCapError(f"powercap backend '{self.backend}' changes real GPU power limits; "
                                "set powercap.allow_real: true in the config to opt in")
        for i in self.gpus:
            lo, hi, _ = self.dev.constraints(i)
            if not lo <= watts <= hi:
                raise PowerCapError(f"cap {watts:g} W outside GPU {i}'s range [{lo:g}, {hi:g}] W")
        self._save()
        for i in self.gpus:
            self.dev.set(i, watts)

    def restore(self) -> dict[int, float]:
        if self._saved is None:
            return {}
        for i, w in self._saved.items():
            self.dev.set(i, w)
        restored, self._saved = self._saved, None
        self.state_file.unlink(missing_ok=True)
        return restored

    def __enter__(self) -> "PowerCapController":
        def handler(signum: int, frame: Any) -> None:
            self.restore()
            old = self._old_handlers.get(signum)
            if callable(old):
                old(signum, frame)
            else:
                if signum == signal.SIGINT:
                    raise KeyboardInterrupt
                raise SystemExit(128 + signum)

        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old_handlers[s] = signal.signal(s, handler)
            except ValueError:  # not the main thread: rely on __exit__
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.restore()
        finally:
            for s, h in self._old_handlers.items():
                signal.signal(s, h)
            self._old_handlers.clear()


def restore_from_state(state_file: str | Path) -> dict[int, float]:
    """Restore the limits a killed controller saved (for a Slurm epilog). No file: nothing to do."""
    state_file = Path(state_file)
    if not state_file.exists():
        return {}
    doc = json.loads(state_file.read_text())
    backend = doc["backend"]
    if backend == "simulated":
        state_file.unlink()
        return {int(k): v for k, v in doc["limits_w"].items()}
    dev = _make(backend)
    limits = {int(k): float(v) for k, v in doc["limits_w"].items()}
    for i, w in limits.items():
        dev.set(i, w)
    state_file.unlink()
    return limits
