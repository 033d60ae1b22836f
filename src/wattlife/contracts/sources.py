"""The SOURCE registry: every value a table's `source` column may hold, declared once.

A source is what a reading or a derived value comes from (`nvml-samples`, `rapl`, `estimate`,
`sim`, ...). Each `SourceSpec` names its class (measured, estimated or simulated), the words the
figures use for it, whether a sensor backend writes it into a trace (`sensor`; the labels
`measured` and `simulated/calibrated` of the curves tables are not) and whether its readings
average over the time since the previous one (`averaging`: a sensor gap's total is read, not
invented). Everything else derives from this table: the trace check's known sources, the
waiting tables' basis, the figures' words, the attribution of gaps (`SOURCES_MEASURED`,
`SOURCES_NOT_MEASURED`, `source_words`, `source_basis`, `averaging_sources`).

To add a source: one `SourceSpec` in `_BUILT_IN` (or `register_source` from a plugin or a test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Final, Literal

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
    SourceSpec("sim", SIMULATED, "SIMULATED"),
    SourceSpec("estimate", ESTIMATED, "ESTIMATED", averaging=True),
    SourceSpec("measured", MEASURED, "measured", sensor=False),
    SourceSpec("simulated/calibrated", SIMULATED, "SIMULATED (calibrated to published PFIs)",
               sensor=False),
    SourceSpec("nvml-samples", MEASURED, "measured (NVML samples)"),
    SourceSpec("nvml-counter", MEASURED, "measured (NVML counter)", averaging=True),
    SourceSpec("nvml-poll", MEASURED, "measured (NVML)"),
    SourceSpec("rapl", MEASURED, "measured (RAPL)", averaging=True),
    # whole-node power (issue 45, devices.node*): pm_counters and sstat carry an energy counter
    SourceSpec("pm_counters", MEASURED, "measured (pm_counters)", averaging=True),
    SourceSpec("redfish", MEASURED, "measured (Redfish BMC)"),
    SourceSpec("ipmi", MEASURED, "measured (IPMI DCMI)"),
    SourceSpec("sstat", MEASURED, "measured (Slurm sstat)", averaging=True),
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
