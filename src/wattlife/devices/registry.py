"""The SENSOR BACKEND registry: each backend declared once, everything else derived from it.

A `SensorBackendSpec` names a backend (`nvml`, `sim`, `rapl`, `estimate`, the node sources
`pm_counters`, `redfish`, `ipmi`, `slurm`), the sampler role it answers (`RoleSpec`: the sampler
key choosing it, `sampler.gpu`, `sampler.cpu` or `sampler.node`), the sampler
keys it reads, the sources it writes (each declared in the source registry,
`contracts.sources`), the device kinds it makes, the factory building it and whether `auto`
tries it. From the registry derive: the sampler's choices (`choices`, `fallback_choices`; the
CLI's `--gpu` / `--cpu`, the schema's enums: `schema_enums`, asserted equal to
`resources/schema.yaml` by the tests) and `sampler.build_backends` (`build_role`).

`auto` tries the role's `auto` backends in declaration order, the first that answers is used;
none answering leaves the role to its fallback (`RoleSpec.fallback_key`: `sampler.cpu_fallback`)
with a note, or unmeasured with a note. An explicit choice that cannot read its sensor raises
`SensorUnavailable`, unless the role's fallback is set. A role's key absent (None: `sampler.node`
has no schema default, so that job slices stay as they were) is `none`.

The backends' rows (`SensorBackendSpec`: id, role, settings keys, the sources each declares, kinds,
factory by name) live in `contracts.sources` (so that the readers of tables, which import no
device code, know every backend's sources); this module checks each row against its roles and
the device-kind registry, resolves its factory and builds. To add a backend: its module beside
this one (with its factory) and one row in `contracts.sources`' `_BUILT_IN_BACKENDS`; the
schema's `sampler` enums are the rows' (`config.loading.schema` fills them). To add a role (as
`node`, issue 45): one `RoleSpec` in `_ROLES`, its key in the schema's `sampler` section, in
`config.sections` (`_SamplerTop`) and in `config.loading.REGISTRY_KEYS`, and its backends' rows.
Devices import no config: a factory takes the sampler's settings (`config.sections.SamplerSettings`)
as `Any` and the sampler interval in seconds.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from ..contracts.kinds import KINDS
from ..contracts.sources import (
    AUTO,
    CPU_ROLE,
    GPU_ROLE,
    NODE_ROLE,
    NONE,
    SensorBackendSpec,
    backend_choices,
    declare_backend,
    declared_backends,
    fallback_choices,
    forget_backend,
)
from ..errors import InputError
from .base import SensorBackend, SensorUnavailable

#: what a factory returns: the backends it built and the notes on them (for meta.json)
Built = tuple[list[SensorBackend], list[str]]
BackendFactory = Callable[[Any, float], Built]


@dataclass(frozen=True)
class RoleSpec:
    """A sampler role: the `sampler.<role>` key choosing its backend, the key naming its
    fallback (None: no fallback), the note when no sensor answers ({exc}, {fallback}) and
    whether that note is also logged."""

    role: str
    fallback_key: str | None
    unavailable: str
    log: bool = False


def positive_seconds(value: Any, key: str) -> float:
    """Milliseconds from the config as seconds; anything but a finite number > 0 is an error
    naming `key` (a negative interval would make the sampler spin)."""
    try:
        ms = float(value)
    except (TypeError, ValueError):
        ms = math.nan
    if not (math.isfinite(ms) and ms > 0):
        raise InputError(f"{key} must be a number of milliseconds > 0, got {value!r}")
    return ms / 1000.0


def nvml_backends(s: Any, interval_s: float) -> Built:
    from .nvml import NvmlBackend

    nv = s.nvml
    b = NvmlBackend(interval_s=interval_s,
                    drain_s=positive_seconds(nv.drain_ms, "sampler.nvml.drain_ms"),
                    counter_s=positive_seconds(nv.counter_ms, "sampler.nvml.counter_ms"),
                    telemetry_s=positive_seconds(nv.telemetry_ms, "sampler.nvml.telemetry_ms"),
                    gpm=nv.gpm)
    return [b], list(b.notes)  # CUDA_VISIBLE_DEVICES mapping


def sim_gpu_backends(s: Any, interval_s: float) -> Built:
    from .simgpu import SimGpuBackend

    sim = s.sim_gpu
    b = SimGpuBackend(n_gpus=sim.n_gpus, mem_share=sim.mem_share,
                      interval_s=positive_seconds(sim.interval_ms, "sampler.sim_gpu.interval_ms"),
                      cap_w=sim.cap_w)
    return [b], ["GPU power is SIMULATED (source=sim): no GPU was measured"]


def rapl_backends(s: Any, interval_s: float) -> Built:
    from .rapl import RaplBackend

    return [RaplBackend(s.rapl_root, interval_s)], []


def cpu_estimate_backends(s: Any, interval_s: float) -> Built:
    from .cpu_estimate import CpuEstimateBackend

    est = s.cpu_estimate
    return ([CpuEstimateBackend(est.idle_w, est.max_w, interval_s)],
            ["CPU power is ESTIMATED from utilisation (source=estimate), not measured"])


def pm_counters_backends(s: Any, interval_s: float) -> Built:
    from .node_emulator_launch import EmulatorTerms
    from .node_select import pm_counters_reader, polled

    # an emulator's CPU and GPU terms are the sampler's own estimate and simulated GPUs
    est, sim = s.cpu_estimate, s.sim_gpu
    terms = EmulatorTerms(est.idle_w, est.max_w, sim.n_gpus if s.gpu == "sim" else 0,
                          sim.mem_share, sim.cap_w)
    return polled(pm_counters_reader(s.node_sources, terms), interval_s)


def redfish_backends(s: Any, interval_s: float) -> Built:
    from .node_select import polled, redfish_reader

    return polled(redfish_reader(s.node_sources), interval_s)


def ipmi_backends(s: Any, interval_s: float) -> Built:
    from .node_select import ipmi_reader, polled

    # `auto` reads a configured BMC only; `sampler.node: ipmi` without a host reads in-band
    return polled(ipmi_reader(s.node_sources, in_band=s.node != AUTO), interval_s)


def sstat_backends(s: Any, interval_s: float) -> Built:
    from .node_select import polled, slurm_reader

    return polled(slurm_reader(s.node_sources), interval_s)


_ROLES: dict[str, RoleSpec] = {r.role: r for r in (
    RoleSpec(GPU_ROLE, None, "no GPU sensor: {exc}"),
    RoleSpec(CPU_ROLE, "cpu_fallback", "{exc}; CPU energy falls back to '{fallback}'", log=True),
    RoleSpec(NODE_ROLE, None, "no node power source (sampler.node: auto): {exc}"),
)}
_BACKENDS: dict[str, SensorBackendSpec] = {}


def register_backend(spec: SensorBackendSpec) -> SensorBackendSpec:
    """Add a backend (its row declared in `contracts.sources` too, with the sources it
    declares); its role and every source it writes must be registered, its id new."""
    if spec.id in _BACKENDS or spec.id in (AUTO, NONE):
        raise ValueError(f"sensor backend {spec.id!r} is already registered or reserved")
    _check(spec)
    if not any(d is spec for d in declared_backends()):
        declare_backend(spec)
    _BACKENDS[spec.id] = spec
    return spec


def _check(spec: SensorBackendSpec) -> None:
    """A row's role and device kinds must be registered (a developer's mistake, at import)."""
    if spec.role not in _ROLES:
        raise ValueError(f"sensor backend {spec.id!r}: role {spec.role!r} is not one of "
                         f"{list(_ROLES)}")
    unknown = [k for k in spec.kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"sensor backend {spec.id!r}: device kinds {unknown} are not declared "
                         "in the device-kind registry (contracts.kinds)")


def unregister_backend(backend_id: str) -> None:
    """Remove a registered backend and the sources it declared (a test's fake, after the test)."""
    del _BACKENDS[backend_id]
    forget_backend(backend_id)


for _spec in declared_backends():
    register_backend(_spec)


def factory(spec: SensorBackendSpec) -> BackendFactory:
    """The spec's factory; one named `"module:function"` is imported now."""
    if not isinstance(spec.factory, str):
        return spec.factory
    module, _, name = spec.factory.partition(":")
    return cast(BackendFactory, getattr(importlib.import_module(module), name))


def roles() -> tuple[RoleSpec, ...]:
    """The sampler roles, in the order the sampler builds (and polls) their backends."""
    return tuple(_ROLES.values())


def backend_specs(role: str | None = None) -> tuple[SensorBackendSpec, ...]:
    """The registered backends (of one role), in declaration order."""
    return tuple(b for b in _BACKENDS.values() if role is None or b.role == role)


def choices(role: str) -> list[str]:
    """`sampler.<role>`'s allowed values: auto, the role's backends, none."""
    return backend_choices(role)


def schema_enums() -> dict[str, list[str]]:
    """The `sampler` keys' enums as the registry makes them (the schema must list these)."""
    out: dict[str, list[str]] = {}
    for r in roles():
        out[r.role] = choices(r.role)
        if r.fallback_key:
            out[r.fallback_key] = fallback_choices(r.role)
    return out


def build_role(role: RoleSpec, s: Any, interval_s: float,
               log: Callable[[str], Any]) -> Built:
    """The backends of one role as `sampler.<role>` chooses (see the module's docstring)."""
    choice = getattr(s, role.role)
    fallback = getattr(s, role.fallback_key) if role.fallback_key else NONE
    if choice is None or choice == NONE:
        return [], []
    allowed = choices(role.role)
    if choice not in allowed:
        raise InputError(f"sampler.{role.role}: expected one of {allowed}, got {choice!r}")
    tried = [b for b in backend_specs(role.role) if b.auto] if choice == AUTO \
        else [_BACKENDS[choice]]
    notes: list[str] = []
    for spec in tried:
        try:
            return factory(spec)(s, interval_s)
        except SensorUnavailable as exc:
            if choice != AUTO and fallback == NONE:
                raise
            notes.append(role.unavailable.format(exc=exc, fallback=fallback))
            if role.log:
                log(f"wattlife: {notes[-1]}")
    if fallback == NONE:
        return [], notes
    if fallback not in fallback_choices(role.role):
        raise InputError(f"sampler.{role.fallback_key}: expected one of "
                         f"{fallback_choices(role.role)}, got {fallback!r}")
    built, more = factory(_BACKENDS[fallback])(s, interval_s)
    return built, notes + more
