"""The SOURCE registry: every value a table's `source` column may hold, declared once.

A source is what a reading or a derived value comes from (`nvml-samples`, `rapl`, `estimate`,
`sim`, ...). Each `SourceSpec` names its class (measured, estimated or simulated), the words the
figures use for it, whether a sensor backend writes it into a trace (`sensor`; the labels
`measured` and `simulated/calibrated` of the curves tables are not) and whether its readings
average over the time since the previous one (`averaging`: a sensor gap's total is read, not
invented). Everything else derives from this table: the trace check's known sources, the
waiting tables' basis, the figures' words, the attribution of gaps (`SOURCES_MEASURED`,
`SOURCES_NOT_MEASURED`, `source_words`, `source_basis`, `averaging_sources`).

The sources a sensor backend writes are declared WITH the backend: each `SensorBackendSpec` of
`_BACKENDS` (id, sampler role, the sampler keys it reads, its `SourceSpec`s, device kinds, the
factory building it, by name) is one row, and declaring it registers its sources. The row lives
here, not in `devices.registry`, so that every reader of tables (analysis, check, figures: they
import no device code) knows every backend's sources; `devices.registry` validates the rows
against its roles and the device-kind registry and builds the backends.

To add a source a backend writes: its `SourceSpec` in the backend's row. Any other source: one
`SourceSpec` in `_BUILT_IN` (or `register_source` from a plugin or a test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Final, Literal

from .kinds import CPU, DRAM, GPU, NODE

SourceClass = Literal["measured", "estimated", "simulated"]
MEASURED: Final = "measured"
ESTIMATED: Final = "estimated"
SIMULATED: Final = "simulated"
SOURCE_CLASSES: tuple[SourceClass, ...] = (MEASURED, ESTIMATED, SIMULATED)


@dataclass(frozen=True)
class SourceSpec:
    """One source: its id (the `source` cell), class, the figures' words for it, whether a
    sensor backend writes it into traces, whether its readings average since the previous one."""

    id: str
    cls: SourceClass
    words: str
    sensor: bool = True
    averaging: bool = False

    def __post_init__(self) -> None:
        if not self.id or "," in self.id:
            raise ValueError(f"source id {self.id!r}: must be non-empty and hold no comma "
                             "(a table cell joins several sources with commas)")
        if self.cls not in SOURCE_CLASSES:
            raise ValueError(f"source {self.id!r}: class {self.cls!r} is not one of "
                             f"{list(SOURCE_CLASSES)}")


_BUILT_IN = (
    SourceSpec("measured", MEASURED, "measured", sensor=False),
    SourceSpec("simulated/calibrated", SIMULATED, "SIMULATED (calibrated to published PFIs)",
               sensor=False),
)
_SOURCES: dict[str, SourceSpec] = {s.id: s for s in _BUILT_IN}


def register_source(spec: SourceSpec) -> SourceSpec:
    """Add a source to the registry; an id already there is an error naming it."""
    if spec.id in _SOURCES:
        raise ValueError(f"source {spec.id!r} is already registered")
    _SOURCES[spec.id] = spec
    return spec


def unregister_source(source_id: str) -> None:
    """Remove a registered source (a test's fake one, after the test)."""
    del _SOURCES[source_id]


def source_specs() -> tuple[SourceSpec, ...]:
    """Every registered source, in the order of declaration."""
    return tuple(_SOURCES.values())


def source_spec(source_id: str) -> SourceSpec | None:
    """The spec of one source id, None when it is not registered."""
    return _SOURCES.get(source_id)


def sensor_source_ids() -> list[str]:
    """The ids a trace's `source` column may hold (what sensor backends write), sorted."""
    return sorted(s.id for s in _SOURCES.values() if s.sensor)


def averaging_sources() -> frozenset[str]:
    """The sources whose reading averages over the time since the previous one."""
    return frozenset(s.id for s in _SOURCES.values() if s.averaging)


def source_basis(source: str) -> SourceClass:
    """'measured', 'estimated' or 'simulated' for a `source` cell (several joined by commas: the
    least measured one wins). An unregistered id is estimated (never passed off as measured),
    or simulated where it extends a simulated sensor source's id (`sim-...`)."""
    parts = set(str(source).split(","))
    classes = {_class_of(p) for p in parts}
    if SIMULATED in classes:
        return SIMULATED
    return ESTIMATED if ESTIMATED in classes else MEASURED


def _class_of(part: str) -> SourceClass:
    spec = _SOURCES.get(part)
    if spec is not None:
        return spec.cls
    sims = (s.id for s in _SOURCES.values() if s.cls == SIMULATED and s.sensor)
    return SIMULATED if any(part.startswith(i) for i in sims) else ESTIMATED


class _SourceSet(AbstractSet[str]):
    """A live, read-only set of the registered sensor sources a predicate picks (the old
    names `SOURCES_MEASURED` / `SOURCES_NOT_MEASURED` stay importable and follow the registry)."""

    def __init__(self, pick: Callable[[SourceSpec], bool]) -> None:
        self._pick = pick

    def _ids(self) -> set[str]:
        return {s.id for s in _SOURCES.values() if s.sensor and self._pick(s)}

    def __contains__(self, x: object) -> bool:
        return x in self._ids()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._ids()))

    def __len__(self) -> int:
        return len(self._ids())

    @classmethod
    def _from_iterable(cls, it: Iterable[str]) -> frozenset[str]:  # type: ignore[override]
        return frozenset(it)

    def __repr__(self) -> str:
        return repr(set(self._ids()))


class _SourceWords(Mapping[str, str]):
    """A live, read-only mapping source id -> the figures' words (`SOURCE_WORDS`)."""

    def __getitem__(self, key: str) -> str:
        return _SOURCES[key].words

    def __iter__(self) -> Iterator[str]:
        return iter(list(_SOURCES))

    def __len__(self) -> int:
        return len(_SOURCES)


#: the sensor sources that are measurements (live: follows `register_source`)
SOURCES_MEASURED: AbstractSet[str] = _SourceSet(lambda s: s.cls == MEASURED)
#: the sensor sources that are not (estimated, simulated)
SOURCES_NOT_MEASURED: AbstractSet[str] = _SourceSet(lambda s: s.cls != MEASURED)
#: source id -> the words a figure labels it with ("measured (NVML samples)", "SIMULATED")
SOURCE_WORDS: Mapping[str, str] = _SourceWords()


#: a backend's factory: `(sampler settings, interval_s) -> (backends, notes)`, or its name
#: `"module:function"` (imported when the backend is built: contracts import no device code)
Factory = Callable[[Any, float], Any] | str


@dataclass(frozen=True)
class SensorBackendSpec:
    """One sensor backend: id (the sampler choice), role (`gpu`, `cpu`, `node`), the sampler
    keys it reads, the sources it writes (a `SourceSpec` declares the source with the backend;
    an id names one declared elsewhere), the device kinds it makes, its factory, whether `auto`
    tries it, whether it may be a role's fallback (it never fails), and what it is (words).
    `sources` holds the ids once built; `declares` the specs it brought."""

    id: str
    role: str
    settings: tuple[str, ...]
    sources: tuple[str | SourceSpec, ...]
    kinds: tuple[str, ...]
    factory: Factory
    auto: bool = False
    fallback: bool = False
    about: str = ""
    declares: tuple[SourceSpec, ...] = ()

    def __post_init__(self) -> None:
        specs = tuple(s for s in self.sources if isinstance(s, SourceSpec))
        object.__setattr__(self, "declares", self.declares + specs)
        object.__setattr__(self, "sources", tuple(
            s.id if isinstance(s, SourceSpec) else s for s in self.sources))

    @property
    def source_ids(self) -> tuple[str, ...]:
        """The ids of the sources it writes."""
        return tuple(s.id if isinstance(s, SourceSpec) else s for s in self.sources)


def _ms(id_: str, words: str, averaging: bool = False) -> SourceSpec:
    """A measured sensor source."""
    return SourceSpec(id_, MEASURED, words, averaging=averaging)


_DEVICES = "wattlife.devices.registry"
#: the sampler's roles (`sampler.gpu`, `sampler.cpu`, `sampler.node`), named like the kinds they
#: read; `devices.registry` declares what each does (`RoleSpec`)
GPU_ROLE: Final = GPU.name
CPU_ROLE: Final = CPU.name
NODE_ROLE: Final = NODE.name
# `sampler.gpu`, `sampler.cpu`, `sampler.node` (`devices.registry`'s roles); per role, `auto`
# tries the `auto` rows in this order. Kinds are `contracts.kinds` names.
_BUILT_IN_BACKENDS = (
    SensorBackendSpec("nvml", GPU_ROLE, ("nvml",), (
        _ms("nvml-samples", "measured (NVML samples)"),
        _ms("nvml-counter", "measured (NVML counter)", averaging=True),
        _ms("nvml-poll", "measured (NVML)")), (GPU.name,), f"{_DEVICES}:nvml_backends", auto=True,
        about="NVIDIA GPUs through NVML: the driver's power samples, its energy counter, "
              "telemetry"),
    SensorBackendSpec("sim", GPU_ROLE, ("sim_gpu",), (SourceSpec("sim", SIMULATED, "SIMULATED"),),
                      (GPU.name,), f"{_DEVICES}:sim_gpu_backends",
                      about="the simulated GPU (simgpu_model): no hardware"),
    SensorBackendSpec("rapl", CPU_ROLE, ("rapl_root",), (
        _ms("rapl", "measured (RAPL)", averaging=True),), (CPU.name, DRAM.name),
        f"{_DEVICES}:rapl_backends", auto=True,
        about="Intel/AMD RAPL energy counters (powercap sysfs)"),
    SensorBackendSpec("estimate", CPU_ROLE, ("cpu_estimate",), (
        SourceSpec("estimate", ESTIMATED, "ESTIMATED", averaging=True),), (CPU.name,),
        f"{_DEVICES}:cpu_estimate_backends", fallback=True,
        about="CPU power estimated from the utilisation of CMD's process tree"),
    # whole-node power (issue 45, devices.node*): pm_counters and sstat carry an energy counter
    SensorBackendSpec("pm_counters", NODE_ROLE, ("node_sources",), (
        _ms("pm_counters", "measured (pm_counters)", averaging=True),
        # the pm_counters tree `wattlife node-emulator` writes (devices.node_emulator): no hardware
        SourceSpec("pm_counters_emulated", SIMULATED, "EMULATED (pm_counters emulator)",
                   averaging=True)), (NODE.name,),
        f"{_DEVICES}:pm_counters_backends", auto=True,
        about="HPE/Cray pm_counters sysfs tree (node power and energy)"),
    SensorBackendSpec("redfish", NODE_ROLE, ("node_sources",), (
        _ms("redfish", "measured (Redfish BMC)"),), (NODE.name,), f"{_DEVICES}:redfish_backends",
        auto=True, about="the BMC's Redfish service (node power)"),
    SensorBackendSpec("ipmi", NODE_ROLE, ("node_sources",), (
        _ms("ipmi", "measured (IPMI DCMI)"),), (NODE.name,), f"{_DEVICES}:ipmi_backends",
        auto=True, about="the BMC's IPMI DCMI power reading through ipmitool"),
    SensorBackendSpec("freeipmi", NODE_ROLE, ("node_sources",), (
        _ms("freeipmi", "measured (IPMI DCMI, FreeIPMI)"),), (NODE.name,),
        "wattlife.devices.node_freeipmi:freeipmi_backends",
        about="the BMC's IPMI DCMI power reading through FreeIPMI's ipmi-dcmi"),
    SensorBackendSpec("slurm", NODE_ROLE, ("node_sources",), (
        _ms("sstat", "measured (Slurm sstat)", averaging=True),), (NODE.name,),
        f"{_DEVICES}:sstat_backends",
        about="Slurm's ConsumedEnergy of the job step through sstat"),
)
_DECLARED: dict[str, SensorBackendSpec] = {}


def declare_backend(spec: SensorBackendSpec) -> SensorBackendSpec:
    """Record a backend's row and register the sources it declares; every source it writes
    must then be registered, its id new (`devices.registry.register_backend` checks its role
    and kinds, then calls this)."""
    if spec.id in _DECLARED:
        raise ValueError(f"sensor backend {spec.id!r} is already registered or reserved")
    undeclared = [s for s in spec.source_ids if s not in _SOURCES and
                  s not in {d.id for d in spec.declares}]
    if undeclared or not spec.sources:
        raise ValueError(f"sensor backend {spec.id!r}: sources {undeclared or '()'} are not "
                         "declared in the source registry (contracts.sources)")
    added: list[str] = []
    try:
        for s in spec.declares:
            added.append(register_source(s).id)
    except ValueError:
        for a in added:
            unregister_source(a)
        raise
    _DECLARED[spec.id] = spec
    return spec


def forget_backend(backend_id: str) -> None:
    """Remove a declared backend and the sources it declared (a test's fake, after the test)."""
    for s in _DECLARED.pop(backend_id).declares:
        unregister_source(s.id)


def declared_backends(role: str | None = None) -> tuple[SensorBackendSpec, ...]:
    """The declared sensor backends (of one role), in declaration order."""
    return tuple(b for b in _DECLARED.values() if role is None or b.role == role)


#: a role's choices besides its backends: try them in order, or read none
AUTO: Final = "auto"
NONE: Final = "none"


def backend_choices(role: str) -> list[str]:
    """`sampler.<role>`'s allowed values: auto, the role's backends, none (the schema's enum and
    the CLI's choices)."""
    return [AUTO, *(b.id for b in declared_backends(role)), NONE]


def fallback_choices(role: str) -> list[str]:
    """The allowed values of a role's fallback key: its backends that never fail, none."""
    return [*(b.id for b in declared_backends(role) if b.fallback), NONE]


for _b in _BUILT_IN_BACKENDS:
    declare_backend(_b)


@dataclass(frozen=True)
class CapBackend:
    """One power-cap backend (config `powercap.backend`, the CLI's `--backend` choices): its id,
    how to open it (`make(n_sim)` -> a `devices.powercap.CapDevice`, or its name
    `"module:function"`), whether it is simulated (no hardware: no opt-in needed, its limits
    labelled `sim`) and the source its limits are labelled with. The rows live here for the
    same reason as the sensors': the schema's enum derives from them (`config.loading`)."""

    id: str
    make: Callable[[int], Any] | str
    simulated: bool
    source: str


_CAPS = "wattlife.devices.powercap"
#: the power-cap backends, in the order the CLI lists them after a command's default
_BUILT_IN_CAPS = (
    CapBackend("nvml", f"{_CAPS}:nvml_caps", simulated=False, source="nvml"),
    CapBackend("nvidia-smi", f"{_CAPS}:nvidia_smi_caps", simulated=False, source="nvml"),
    CapBackend("simulated", f"{_CAPS}:simulated_caps", simulated=True, source="sim"),
)
_CAP_ROWS: dict[str, CapBackend] = {c.id: c for c in _BUILT_IN_CAPS}


def declare_cap_backend(spec: CapBackend) -> None:
    """Add (or replace) a power-cap backend's row (`devices.powercap.register_cap_backend`)."""
    _CAP_ROWS[spec.id] = spec


def forget_cap_backend(backend_id: str) -> None:
    """Remove a power-cap backend's row (a test's fake, after the test)."""
    del _CAP_ROWS[backend_id]


def cap_backends() -> tuple[CapBackend, ...]:
    """The power-cap backends' rows, in declaration order."""
    return tuple(_CAP_ROWS.values())


def cap_choices(default: str | None = None) -> list[str]:
    """The power-cap backend ids: `default` first, then the rows' order (the CLI's `choices`,
    whose `--help` lists the default first, and the schema's `powercap.backend` enum)."""
    ids = list(_CAP_ROWS)
    return [b for b in ids if b == default] + [b for b in ids if b != default]
