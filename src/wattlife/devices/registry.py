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

To add a backend: its module beside this one and one `SensorBackendSpec` in `_BUILT_IN` (its
sources in `contracts.sources`). To add a role (as `node`, issue 45): one `RoleSpec` in `_ROLES`,
its key in the schema's `sampler` section and in `config.sections` (`_SamplerTop`), and its
backends' specs. Devices import no config: a factory takes the sampler's settings
(`config.sections.SamplerSettings`) as `Any` and the sampler interval in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..contracts.kinds import CPU, DRAM, GPU, KINDS, NODE
from ..contracts.sources import source_spec
from ..errors import InputError
from .base import SensorBackend, SensorUnavailable

AUTO = "auto"
NONE = "none"
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


@dataclass(frozen=True)
class SensorBackendSpec:
    """One sensor backend: id (the sampler choice), role, the sampler keys it reads, the sources
    it writes, the device kinds it makes, its factory, whether `auto` tries it, whether it may
    be a role's fallback (it never fails), and what it is (words)."""

    id: str
    role: str
    settings: tuple[str, ...]
    sources: tuple[str, ...]
    kinds: tuple[str, ...]
    factory: BackendFactory
    auto: bool = False
    fallback: bool = False
    about: str = ""


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


def _nvml(s: Any, interval_s: float) -> Built:
    from .nvml import NvmlBackend

    nv = s.nvml
    b = NvmlBackend(interval_s=interval_s,
                    drain_s=positive_seconds(nv.drain_ms, "sampler.nvml.drain_ms"),
                    counter_s=positive_seconds(nv.counter_ms, "sampler.nvml.counter_ms"),
                    telemetry_s=positive_seconds(nv.telemetry_ms, "sampler.nvml.telemetry_ms"),
                    gpm=nv.gpm)
    return [b], list(b.notes)  # CUDA_VISIBLE_DEVICES mapping


def _sim_gpu(s: Any, interval_s: float) -> Built:
    from .simgpu import SimGpuBackend

    sim = s.sim_gpu
    b = SimGpuBackend(n_gpus=sim.n_gpus, mem_share=sim.mem_share,
                      interval_s=positive_seconds(sim.interval_ms, "sampler.sim_gpu.interval_ms"),
                      cap_w=sim.cap_w)
    return [b], ["GPU power is SIMULATED (source=sim): no GPU was measured"]


def _rapl(s: Any, interval_s: float) -> Built:
    from .rapl import RaplBackend

    return [RaplBackend(s.rapl_root, interval_s)], []


def _cpu_estimate(s: Any, interval_s: float) -> Built:
    from .cpu_estimate import CpuEstimateBackend

    est = s.cpu_estimate
    return ([CpuEstimateBackend(est.idle_w, est.max_w, interval_s)],
            ["CPU power is ESTIMATED from utilisation (source=estimate), not measured"])


def _pm_counters(s: Any, interval_s: float) -> Built:
    from .node_select import pm_counters_reader, polled

    return polled(pm_counters_reader(s.node_sources), interval_s)


def _redfish(s: Any, interval_s: float) -> Built:
    from .node_select import polled, redfish_reader

    return polled(redfish_reader(s.node_sources), interval_s)


def _ipmi(s: Any, interval_s: float) -> Built:
    from .node_select import ipmi_reader, polled

    # `auto` reads a configured BMC only; `sampler.node: ipmi` without a host reads in-band
    return polled(ipmi_reader(s.node_sources, in_band=s.node != AUTO), interval_s)


def _sstat(s: Any, interval_s: float) -> Built:
    from .node_select import polled, slurm_reader

    return polled(slurm_reader(s.node_sources), interval_s)


#: the sampler's keys (`sampler.gpu`, `sampler.cpu`, `sampler.node`): roles, named like the
#: kinds they read
GPU_ROLE = "gpu"
CPU_ROLE = "cpu"
NODE_ROLE = "node"
_ROLES: dict[str, RoleSpec] = {r.role: r for r in (
    RoleSpec(GPU_ROLE, None, "no GPU sensor: {exc}"),
    RoleSpec(CPU_ROLE, "cpu_fallback", "{exc}; CPU energy falls back to '{fallback}'", log=True),
    RoleSpec(NODE_ROLE, None, "no node power source (sampler.node: auto): {exc}"),
)}
_BUILT_IN = (
    SensorBackendSpec("nvml", GPU_ROLE, ("nvml",), ("nvml-samples", "nvml-counter", "nvml-poll"),
                      (GPU.name,), _nvml, auto=True,
                      about="NVIDIA GPUs through NVML: the driver's power samples, its energy "
                            "counter, telemetry"),
    SensorBackendSpec("sim", GPU_ROLE, ("sim_gpu",), ("sim",), (GPU.name,), _sim_gpu,
                      about="the simulated GPU (simgpu_model): no hardware"),
    SensorBackendSpec("rapl", CPU_ROLE, ("rapl_root",), ("rapl",), (CPU.name, DRAM.name), _rapl,
                      auto=True, about="Intel/AMD RAPL energy counters (powercap sysfs)"),
    SensorBackendSpec("estimate", CPU_ROLE, ("cpu_estimate",), ("estimate",), (CPU.name,),
                      _cpu_estimate, fallback=True,
                      about="CPU power estimated from the utilisation of CMD's process tree"),
    # whole-node power (issue 45): `auto` tries them in this order
    SensorBackendSpec("pm_counters", NODE_ROLE, ("node_sources",), ("pm_counters",),
                      (NODE.name,), _pm_counters, auto=True,
                      about="HPE/Cray pm_counters sysfs tree (node power and energy)"),
    SensorBackendSpec("redfish", NODE_ROLE, ("node_sources",), ("redfish",), (NODE.name,),
                      _redfish, auto=True, about="the BMC's Redfish service (node power)"),
    SensorBackendSpec("ipmi", NODE_ROLE, ("node_sources",), ("ipmi",), (NODE.name,), _ipmi,
                      auto=True, about="the BMC's IPMI DCMI power reading through ipmitool"),
    SensorBackendSpec("slurm", NODE_ROLE, ("node_sources",), ("sstat",), (NODE.name,), _sstat,
                      about="Slurm's ConsumedEnergy of the job step through sstat"),
)
_BACKENDS: dict[str, SensorBackendSpec] = {}


def register_backend(spec: SensorBackendSpec) -> SensorBackendSpec:
    """Add a backend; its role and every source it writes must be registered, its id new."""
    if spec.id in _BACKENDS or spec.id in (AUTO, NONE):
        raise ValueError(f"sensor backend {spec.id!r} is already registered or reserved")
    if spec.role not in _ROLES:
        raise ValueError(f"sensor backend {spec.id!r}: role {spec.role!r} is not one of "
                         f"{list(_ROLES)}")
    undeclared = [s for s in spec.sources if source_spec(s) is None]
    if undeclared or not spec.sources:
        raise ValueError(f"sensor backend {spec.id!r}: sources {undeclared or '()'} are not "
                         "declared in the source registry (contracts.sources)")
    unknown = [k for k in spec.kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"sensor backend {spec.id!r}: device kinds {unknown} are not declared "
                         "in the device-kind registry (contracts.kinds)")
    _BACKENDS[spec.id] = spec
    return spec


def unregister_backend(backend_id: str) -> None:
    """Remove a registered backend (a test's fake one, after the test)."""
    del _BACKENDS[backend_id]


for _spec in _BUILT_IN:
    register_backend(_spec)


def roles() -> tuple[RoleSpec, ...]:
    """The sampler roles, in the order the sampler builds (and polls) their backends."""
    return tuple(_ROLES.values())


def backend_specs(role: str | None = None) -> tuple[SensorBackendSpec, ...]:
    """The registered backends (of one role), in declaration order."""
    return tuple(b for b in _BACKENDS.values() if role is None or b.role == role)


def choices(role: str) -> list[str]:
    """`sampler.<role>`'s allowed values: auto, the role's backends, none."""
    return [AUTO, *(b.id for b in backend_specs(role)), NONE]


def fallback_choices(role: str) -> list[str]:
    """The allowed values of a role's fallback key: its backends that never fail, none."""
    return [*(b.id for b in backend_specs(role) if b.fallback), NONE]


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
            return spec.factory(s, interval_s)
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
    built, more = _BACKENDS[fallback].factory(s, interval_s)
    return built, notes + more
