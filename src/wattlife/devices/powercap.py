"""Per-GPU power limits with a restore guarantee: `PowerCapController`.

Backends, in a small registry (`CAP_BACKENDS`, `register_cap_backend`; the CLI's choices derive
from it): `nvml` (the NVIDIA vendor class `devices.nvidia`, GPUs by NVML index), `nvidia-smi`
(reads through it, sets by `nvidia-smi -i N -pl W`), `simulated` (no hardware; the limits live in
the controller and in the state file, labelled sim; their range is
`wattlife.simgpu_model.SimGpuModel`'s). Real backends change limits only when the caller opts in
(`allow_real=True`, from `powercap.allow_real` in the config).

Before the first change the original limits are written to a state file; they are restored on
normal exit, on an exception, and on SIGINT/SIGTERM (the controller is a context manager and
installs signal handlers while active). After a SIGKILL, `wattlife powercap restore --state F`
(e.g. in a Slurm epilog) restores from the state file. Caps are validated against each device's
min/max constraint; set them before the workload creates its CUDA context.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from ..contracts.sources import (
    CapBackend,
    cap_backends,
    cap_choices,
    declare_cap_backend,
    forget_cap_backend,
)
from ..errors import InputError, SensorError
from .nvidia import NvidiaGpu, NvidiaGpus, NvmlError

if TYPE_CHECKING:  # imported where used: the CLI lists the backends without loading numpy
    from ..simgpu_model import SimGpuModel

T = TypeVar("T")
log = logging.getLogger(__name__)


class PowerCapError(SensorError):
    pass


class CapDevice(Protocol):
    """What a power-cap backend does, per GPU by its vendor index (NVML index for NVIDIA)."""

    def count(self) -> int: ...
    def get(self, i: int) -> float: ...
    def constraints(self, i: int) -> tuple[float, float, float]: ...
    def set(self, i: int, watts: float) -> None: ...


class _CapRows(Mapping[str, CapBackend]):
    """id -> the power-cap backend's row (`contracts.sources.cap_backends`), live."""

    def __getitem__(self, key: str) -> CapBackend:
        rows = {c.id: c for c in cap_backends()}
        return rows[key]

    def __iter__(self) -> Iterator[str]:
        return iter([c.id for c in cap_backends()])

    def __len__(self) -> int:
        return len(cap_backends())


#: the power-cap backends (rows of `contracts.sources`), in the order the CLI lists them after a
#: command's default
CAP_BACKENDS: Mapping[str, CapBackend] = _CapRows()


def register_cap_backend(spec: CapBackend) -> None:
    """Add a power-cap backend; the CLI's choices, the schema's enum and the state files' check
    derive from it."""
    declare_cap_backend(spec)


def unregister_cap_backend(backend_id: str) -> None:
    """Remove a registered power-cap backend (a test's fake, after the test)."""
    forget_cap_backend(backend_id)


def cap_backend(backend: str) -> CapBackend:
    """The registered backend `backend`; ValueError naming the choices."""
    try:
        return CAP_BACKENDS[backend]
    except KeyError:
        raise InputError(f"powercap.backend must be one of {tuple(CAP_BACKENDS)}, got "
                         f"{backend!r}") from None


def cap_backend_choices(default: str | None = None) -> list[str]:
    """The registered backend ids for a CLI `choices`: `default` first, then the registry's
    order (`--help` lists the default first)."""
    return cap_choices(default)


class _Nvml:
    """Reads and sets through NVML (`devices.nvidia`), every GPU by its NVML index."""

    def __init__(self) -> None:
        try:
            self.gpus = NvidiaGpus()
        except NvmlError as exc:
            if exc.reason == "not installed":
                raise PowerCapError("NVML is not available: nvidia-ml-py is not installed"
                                    ) from None
            raise PowerCapError(f"NVML is not available ({exc.detail}): no NVIDIA driver here"
                                ) from None

    def count(self) -> int:
        return self.gpus.count()

    def _on(self, i: int, act: Callable[[NvidiaGpu], T]) -> T:
        """`act` on GPU `i` (NVML index); the vendor class's NvmlError as a PowerCapError."""
        try:
            return act(self.gpus.by_index(i))
        except NvmlError as exc:
            raise PowerCapError(str(exc)) from None

    def get(self, i: int) -> float:
        return self._on(i, NvidiaGpu.power_limit_w)

    def constraints(self, i: int) -> tuple[float, float, float]:
        return self._on(i, NvidiaGpu.limit_range_w)

    def set(self, i: int, watts: float) -> None:
        self._on(i, lambda g: g.set_power_limit_w(watts))


class _NvidiaSmi(_Nvml):
    """Reads through NVML, sets through `nvidia-smi -i N -pl W` (what the PFI paper used)."""

    def set(self, i: int, watts: float) -> None:
        out = subprocess.run(["nvidia-smi", "-i", str(i), "-pl", f"{watts:.0f}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise PowerCapError(f"nvidia-smi -i {i} -pl {watts:.0f} failed: {out.stderr.strip()}")


class _Simulated:
    """No hardware: limits in memory, constraints of the simulated GPU model."""

    def __init__(self, n: int = 1, model: SimGpuModel | None = None) -> None:
        from ..simgpu_model import SimGpuModel

        self.min_w, self.max_w = (model or SimGpuModel()).cap_range_w
        self.limits = [self.max_w] * n

    def count(self) -> int:
        return len(self.limits)

    def get(self, i: int) -> float:
        return self.limits[i]

    def constraints(self, i: int) -> tuple[float, float, float]:
        return self.min_w, self.max_w, self.max_w

    def set(self, i: int, watts: float) -> None:
        self.limits[i] = watts


def nvml_caps(n_sim: int) -> CapDevice:
    """The `nvml` backend's device (`contracts.sources` names it)."""
    return _Nvml()


def nvidia_smi_caps(n_sim: int) -> CapDevice:
    """The `nvidia-smi` backend's device."""
    return _NvidiaSmi()


def simulated_caps(n_sim: int) -> CapDevice:
    """The `simulated` backend's device: `n_sim` simulated GPUs."""
    return _Simulated(n_sim)


def _make(backend: str, n_sim: int = 1) -> CapDevice:
    make = cap_backend(backend).make
    if isinstance(make, str):
        module, _, name = make.partition(":")
        make = getattr(importlib.import_module(module), name)
    return cast(CapDevice, make(n_sim))


class PowerCapController:
    """Set per-GPU power caps and always put the original limits back."""

    def __init__(self, backend: str = "simulated", state_file: str | Path = "powercap-state.json",
                 allow_real: bool = False, gpus: list[int] | None = None, n_sim: int = 1) -> None:
        self.backend, self.allow_real = backend, allow_real
        self.dev = _make(backend, n_sim)
        self.state_file = Path(state_file)
        self.gpus = list(range(self.dev.count())) if gpus is None else gpus
        self._saved: dict[int, float] | None = None
        self._own_state = False  # this controller wrote the state file (so it removes it)
        self._old_handlers: dict[int, Any] = {}
        self._depth = 0  # `with` nesting of this controller: only the outermost level acts

    def describe(self) -> dict[str, Any]:
        gpus: dict[int, dict[str, float]] = {}
        out: dict[str, Any] = {"backend": self.backend,
                               "source": cap_backend(self.backend).source,
                               "gpus": gpus}
        for i in self.gpus:
            lo, hi, default = self.dev.constraints(i)
            gpus[i] = {"limit_w": self.dev.get(i), "min_w": lo, "max_w": hi,
                              "default_w": default}
        return out

    def _save(self) -> None:
        """Remember the limits before the first change. The state file keeps the oldest
        originals: if one exists (another live controller, or a killed one whose caps were
        never restored), it is left as it is and not removed by this controller's restore."""
        if self._saved is not None:
            return
        saved = {i: self.dev.get(i) for i in self.gpus}
        if self.state_file.exists():
            read_state(self.state_file)  # malformed: refuse before changing anything
            self._own_state = False
            log.warning(f"wattlife powercap: {self.state_file} already holds original limits "
                        "(another controller, or a killed run not yet restored); it is kept as "
                        "it is")
        else:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_name(self.state_file.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"backend": self.backend, "pid": os.getpid(),
                                       "n_gpus": self.dev.count(), "limits_w": saved}))
            tmp.replace(self.state_file)
            self._own_state = True
        self._saved = saved

    def set_cap(self, watts: float) -> None:
        """Set every managed GPU to `watts`, after checking each one's constraints."""
        if not cap_backend(self.backend).simulated and not self.allow_real:
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
        """Put back the limits seen before this controller's first change (once)."""
        if self._saved is None:
            return {}
        for i, w in self._saved.items():
            self.dev.set(i, w)
        restored, self._saved = self._saved, None
        if self._own_state:
            self.state_file.unlink(missing_ok=True)
            self._own_state = False
        return restored

    def __enter__(self) -> "PowerCapController":
        self._depth += 1
        if self._depth > 1:  # nested `with` of the same controller: the outer level owns it all
            return self

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
        self._depth -= 1
        if self._depth > 0:
            return
        try:
            self.restore()
        finally:
            for s, h in self._old_handlers.items():
                if h is not None:  # None: a handler not installed from Python; cannot be reset
                    signal.signal(s, h)
            self._old_handlers.clear()


def state_form() -> str:
    """The state file's form, for messages (the backends: the registry's)."""
    return ('JSON {"backend": ' + "|".join(f'"{b}"' for b in CAP_BACKENDS)
            + ', "limits_w": {"<gpu index>": <watts>, ...}}')


def read_state(state_file: str | Path) -> tuple[str, dict[int, float]]:
    """The backend and the limits of a state file; PowerCapError (one line) if malformed."""
    state_file = Path(state_file)
    try:
        doc = json.loads(state_file.read_text())
    except OSError as exc:
        raise PowerCapError(f"state file {state_file}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise PowerCapError(f"state file {state_file}: not JSON ({exc}); expected {state_form()}"
                            ) from None
    try:
        backend = doc["backend"]
        if backend not in CAP_BACKENDS:
            raise ValueError(f"backend {backend!r}")
        limits = {int(k): float(v) for k, v in doc["limits_w"].items()}
        bad = [w for w in limits.values() if not 0 < w < float("inf")]
        if bad or any(i < 0 for i in limits):
            raise ValueError(f"limits {doc['limits_w']}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing key {exc}" if isinstance(exc, KeyError) else f"bad {exc}"
        raise PowerCapError(f"state file {state_file}: {what}; expected {state_form()}") from None
    return backend, limits


def _simulated_indices(state_file: Path, limits: dict[int, float]) -> None:
    """A simulated state names GPUs 0..n_gpus-1 of the controller that wrote it (`n_gpus`, else
    as many as it lists): another index is a PowerCapError naming it, never "restored"."""
    try:
        n = int(json.loads(state_file.read_text()).get("n_gpus", len(limits)))
    except (OSError, ValueError, TypeError, AttributeError):
        n = len(limits)
    bad = sorted(i for i in limits if i >= n)
    if bad:
        raise PowerCapError(f"state file {state_file}: simulated GPU index {bad[0]} does not "
                            f"exist (the controller had {n}: 0..{n - 1}); nothing restored")


def restore_from_state(state_file: str | Path) -> dict[int, float]:
    """Restore the limits a killed controller saved (for a Slurm epilog). No file: nothing to do.
    The file is removed only once every limit is set back; on any error it stays, and the error
    is a PowerCapError naming it."""
    state_file = Path(state_file)
    if not state_file.exists():
        return {}
    backend, limits = read_state(state_file)
    if cap_backend(backend).simulated:  # its limits died with its process: check the file only
        _simulated_indices(state_file, limits)
    else:
        try:
            dev = _make(backend)
            n = dev.count()
            if any(i >= n for i in limits):
                raise PowerCapError(f"state file {state_file}: GPU index "
                                    f"{max(limits)} does not exist here ({n} GPU(s))")
            for i, w in limits.items():
                dev.set(i, w)
        except PowerCapError as exc:
            raise PowerCapError(f"{exc}; {state_file} is kept for a retry") from None
    state_file.unlink()
    return limits
