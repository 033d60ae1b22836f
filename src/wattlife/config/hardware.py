"""A GPU's power-cap profile (`hardware/<name>.yaml` in the package, or a path)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .build import freeze
from .loading import ConfigError, resource_path, strict_yaml


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU's power-cap profile (`hardware/<name>.yaml` in the package, or a path)."""

    gpu_model: str
    tdp_w: float
    min_cap_w: float
    max_cap_w: float
    peak_tflops_bf16: float
    gpus_per_node: int
    grid_w: tuple[float, ...]
    grid_large_w: tuple[float, ...]
    large_job_gpus: int

    def grid(self, gpus: int) -> tuple[float, ...]:
        """The cap grid of a job of `gpus` GPUs."""
        large = gpus >= self.large_job_gpus and self.grid_large_w
        return self.grid_large_w if large else self.grid_w


def hardware_profile(name_or_path: str | Path) -> HardwareProfile:
    """A hardware profile by name (`h200`, `h100`: shipped in the package) or path."""
    p = Path(name_or_path)
    if not p.exists():
        p = resource_path("hardware", f"{name_or_path}.yaml")
    if not p.exists():
        names = sorted(x.stem for x in resource_path("hardware").glob("*.yaml"))
        raise FileNotFoundError(f"hardware profile {str(name_or_path)!r} not found (a path, or one "
                                f"of {names})")
    d = strict_yaml(p.read_text(), p) or {}
    names = [f.name for f in dataclasses.fields(HardwareProfile)]
    missing = [k for k in names if k not in d]
    if missing:
        raise ConfigError(f"{p}: missing hardware profile keys {missing}")
    prof = HardwareProfile(**{k: freeze(d[k]) for k in names})
    bad = [c for c in prof.grid_w + prof.grid_large_w if not prof.min_cap_w <= c <= prof.max_cap_w]
    if bad:
        raise InputError(f"{p}: caps {bad} outside [{prof.min_cap_w}, {prof.max_cap_w}] W")
    return prof
