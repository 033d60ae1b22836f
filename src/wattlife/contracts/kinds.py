"""The device kinds: one registry (`KINDS`) of what a trace's devices can be, from which every
list of kinds in the suite derives (which devices attribution takes and how it reads their
energy, what `wattlife check` accepts as a device name, the kinds summed into the suite's energy,
the lifecycle shares' processors, the figures' colours, labels and order, the plausible power).

A device's name is its kind's name, then its index where the kind is numbered (`gpu3`, `cpu0`,
`dram1`); an unnumbered kind is one device per host, named by the kind alone. The registry's
order is the order of the kinds in tables and figures. A name no declared kind forms is an
undeclared device: `wattlife check` warns about it, attribution and the figures leave it out,
and `device_kind` refuses it.

To add a kind, declare one `DeviceKind` and add it to `KINDS` (CONTRIBUTING.md, the node recipe).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ContractError
from .names import ENERGY_J, POWER_W

#: the metrics a kind's energy can be read from (attribution has a series builder for each)
ENERGY_METRICS = (POWER_W, ENERGY_J)
#: the highest power a device of no declared kind may report: a whole node's (a corrupted value
#: like 1e300 is still refused)
UNDECLARED_MAX_PLAUSIBLE_W = 200_000.0


@dataclass(frozen=True)
class DeviceKind:
    """One kind of device a trace can hold, and every policy the suite applies to it."""

    name: str  # the kind's name (the phases' `device_kind`) and its devices' name prefix
    label: str  # in figures' legends
    color: str  # in figures (matplotlib colour)
    #: what a device of the kind can physically draw (W): far above any real part, far below a
    #: corrupted value (`contracts.reading.check_readings`)
    max_plausible_w: float
    numbered: bool = True  # devices `<name><N>`; False: one device per host, named `<name>`
    attributed: bool = True  # attribution gives its devices a row per phase
    #: the metrics its series is made of, in order of preference (the first with >= 2 readings):
    #: window-average power, else the cumulative energy counter
    reads: tuple[str, ...] = ENERGY_METRICS
    #: each device is driven by one rank (attributed that rank's phases; one no rank uses gets
    #: one `idle` interval); False: a host-wide device, attributed the host's timeline
    per_rank: bool = False
    #: its energy adds up with the other parts' into the node's (summed in the suite's energy
    #: beside Slurm's); False for a kind that holds the others (a whole node)
    part_of_node: bool = True
    #: a processor, whose energy the lifecycle study's training shares compare (GPU against CPU)
    processor: bool = False

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z_]*", self.name):
            raise ValueError(f"device kind {self.name!r}: a name is lower-case letters and _ "
                             "(its devices' names append an index)")
        if not self.reads or not set(self.reads) <= set(ENERGY_METRICS):
            raise ValueError(f"device kind {self.name!r}: reads {self.reads!r}, expected some "
                             f"of {ENERGY_METRICS}")

    @property
    def pattern(self) -> str:
        """The regular expression its device names match in full."""
        return rf"{self.name}\d+" if self.numbered else self.name

    @property
    def form(self) -> str:
        """How its device names are written in messages: `gpuN`, or `node`."""
        return f"{self.name}N" if self.numbered else self.name

    def forms(self, device: str) -> bool:
        """Whether `device` is the name of a device of this kind."""
        return re.fullmatch(self.pattern, device) is not None

    def device(self, index: int = 0) -> str:
        """The name of its device `index` (`gpu3`), or of its one device (`node`): what a
        backend writes in the trace's `device` column."""
        return f"{self.name}{index}" if self.numbered else self.name

    def index(self, device: str) -> int | None:
        """N of its device `<name>N` (`gpu3` -> 3); None when `device` is not one of its
        numbered devices."""
        rest = device[len(self.name):]
        ok = self.numbered and device.startswith(self.name) and rest.isascii() and rest.isdigit()
        return int(rest) if ok else None


GPU = DeviceKind("gpu", "GPU", "#2a7ab9", 5_000.0, per_rank=True, processor=True)
CPU = DeviceKind("cpu", "CPU", "#e08a2c", 5_000.0, processor=True)
DRAM = DeviceKind("dram", "DRAM", "#7f7f7f", 2_000.0)

#: the registry: kind name -> spec, in table and figure order
#: the whole node at its supply (issue 45: pm_counters, Redfish, IPMI DCMI, sstat): one device
#: per host, not a part of itself
NODE = DeviceKind("node", "node", "#8c564b", 200_000.0, numbered=False, part_of_node=False)
KINDS: dict[str, DeviceKind] = {k.name: k for k in (GPU, CPU, DRAM, NODE)}


def kind_of(device: str) -> DeviceKind | None:
    """The declared kind whose devices `device` names (`gpu3` -> GPU), None when none does."""
    for k in KINDS.values():
        if k.forms(device):
            return k
    return None


def kind_name(device: str) -> str | None:
    """The name of the declared kind whose devices `device` names, None when none does."""
    k = kind_of(device)
    return k.name if k is not None else None


def device_kind(device: str) -> str:
    """`gpu3` -> `gpu`, `cpu0` -> `cpu`, `dram1` -> `dram`; a name no declared kind forms is a
    `ContractError` naming the forms the registry accepts."""
    k = kind_of(device)
    if k is None:
        raise ContractError(f"device {device!r} is not {device_forms()}: no declared device kind "
                            "(contracts.kinds.KINDS) names it")
    return k.name


def kind_word(device: str) -> str:
    """What messages call the kind of `device`: its declared kind's name, else its name without
    the trailing index (`fpga0` -> `fpga`)."""
    k = kind_of(device)
    return k.name if k is not None else (device.rstrip("0123456789") or device)


def max_plausible_w(device: str) -> float:
    """The highest power `device` can report: its kind's, else `UNDECLARED_MAX_PLAUSIBLE_W`."""
    k = kind_of(device)
    return k.max_plausible_w if k is not None else UNDECLARED_MAX_PLAUSIBLE_W


def attributed_kinds() -> tuple[str, ...]:
    """The kinds attribution gives rows per phase, in registry order."""
    return tuple(k.name for k in KINDS.values() if k.attributed)


def is_attributed(device: str) -> bool:
    """Whether attribution takes `device` (a device of an attributed declared kind)."""
    k = kind_of(device)
    return k is not None and k.attributed


def per_rank_kinds() -> tuple[str, ...]:
    """The attributed kinds whose devices each one rank drives (the accelerators: their waiting
    phases, context floor, grad_sync waits and rank mapping), in registry order."""
    return tuple(k.name for k in KINDS.values() if k.attributed and k.per_rank)


def is_per_rank(device: str) -> bool:
    """Whether `device` is a device of a per-rank kind (`gpu3`)."""
    k = kind_of(device)
    return k is not None and k.attributed and k.per_rank


def device_index(device: str) -> int | None:
    """N of `device` named `<kind>N` by a declared numbered kind (`gpu3` -> 3), else None."""
    k = kind_of(device)
    return k.index(device) if k is not None else None


def node_part_kinds() -> tuple[str, ...]:
    """The attributed kinds whose energies add up (the suite's energy of a node), in order."""
    return tuple(k.name for k in KINDS.values() if k.attributed and k.part_of_node)


def processor_kinds() -> tuple[str, ...]:
    """The attributed processor kinds (the lifecycle study's shares), in registry order."""
    return tuple(k.name for k in KINDS.values() if k.attributed and k.processor)


def kind_colors() -> dict[str, str]:
    """Kind name -> figure colour, in registry order."""
    return {k.name: k.color for k in KINDS.values()}


def kind_order(name: str) -> tuple[int, str]:
    """Sort key of kind names: the registry's order, undeclared names after it by name."""
    order = list(KINDS)
    return (order.index(name) if name in KINDS else len(order), name)


def kind_label(name: str) -> str:
    """A kind's legend label (its name upper-cased where the kind is not declared)."""
    k = KINDS.get(name)
    return k.label if k is not None else name.upper()


def device_pattern() -> str:
    """A regular expression matching the name of any declared kind's device, in full."""
    numbered = [k.name for k in KINDS.values() if k.numbered]
    single = [k.name for k in KINDS.values() if not k.numbered]
    parts = ([rf"^(?:{'|'.join(numbered)})\d+$"] if numbered else []) + [
        f"^{n}$" for n in single]
    return "|".join(parts) if parts else "(?!)"


def device_forms() -> str:
    """The declared kinds' device names as messages write them: `gpuN, cpuN or dramN`."""
    forms = [k.form for k in KINDS.values()]
    return forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} or {forms[-1]}"
