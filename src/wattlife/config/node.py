"""`sampler.node_sources`: the settings of each whole-node power source (issue 45); which one the
sampler reads is `sampler.node` (auto, a node backend of `contracts.sources`, or none). No key
holds a credential: a BMC's user and password come from a file or environment variables the
config names (`devices.node_redfish.load_credentials`). A source added later needs no class
here: its block (in the schema) is kept as given and `NodeSources.block` fills its defaults; its
own module builds its frozen settings from that (`devices.node_freeipmi`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .build import block, build


@dataclass(frozen=True)
class EmulatorSettings:
    """`sampler.node_sources.pm_counters.emulator`: the EMULATED tree's rest of the node
    (`devices.node_emulator`)."""

    base_w: float
    disk_w_per_mbps: float
    net_w_per_mbps: float


@dataclass(frozen=True)
class PmCountersSettings:
    """`sampler.node_sources.pm_counters`: the HPE/Cray sysfs tree and how often it is read, or
    the emulator that writes one (None: none)."""

    root: str
    period_ms: float
    emulator: EmulatorSettings | None = None


@dataclass(frozen=True)
class BmcAuth:
    """Where a BMC's credentials are (never the credentials themselves)."""

    credentials_file: str | None
    username_env: str | None
    password_env: str | None


@dataclass(frozen=True)
class RedfishSettings(BmcAuth):
    """`sampler.node_sources.redfish`: the BMC's Redfish service."""

    endpoint: str | None
    chassis: str | None
    verify_tls: bool
    timeout_ms: float
    period_ms: float


@dataclass(frozen=True)
class IpmiSettings(BmcAuth):
    """`sampler.node_sources.ipmi`: the BMC's DCMI power reading through ipmitool."""

    host: str | None
    port: int
    interface: str
    command: str
    timeout_ms: float
    period_ms: float


@dataclass(frozen=True)
class SlurmSstatSettings:
    """`sampler.node_sources.slurm`: the job step's ConsumedEnergy through sstat."""

    step: str | None
    command: str
    timeout_ms: float
    period_ms: float


@dataclass(frozen=True)
class NodeSources:
    """`sampler.node_sources`: every node source's settings."""

    pm_counters: PmCountersSettings
    redfish: RedfishSettings
    ipmi: IpmiSettings
    slurm: SlurmSstatSettings
    #: the blocks of sources without a class above, as the config gives them
    given: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> NodeSources:
        d = dict(d or {})
        sec = ("sampler", "node_sources")
        typed = {f.name for f in fields(cls)} - {"given"}
        pm = build(PmCountersSettings, d.get("pm_counters"), *sec, "pm_counters")
        emulator: Any = pm.emulator  # build leaves a nested object a plain mapping
        if emulator is not None:
            pm = dataclasses.replace(pm, emulator=build(
                EmulatorSettings, emulator, *sec, "pm_counters", "emulator"))
        return cls(pm_counters=pm,
                   redfish=build(RedfishSettings, d.get("redfish"), *sec, "redfish"),
                   ipmi=build(IpmiSettings, d.get("ipmi"), *sec, "ipmi"),
                   slurm=build(SlurmSstatSettings, d.get("slurm"), *sec, "slurm"),
                   given={k: dict(v or {}) for k, v in d.items() if k not in typed})

    def block(self, source: str) -> dict[str, Any]:
        """`sampler.node_sources.<source>` for a source without a class above: every key of its
        schema block, its value, else the schema's default, else None."""
        return block(self.given.get(source), "sampler", "node_sources", source)

    def given_blocks(self) -> dict[str, dict[str, Any]]:
        """The blocks the config gives for sources without a class above, defaults filled
        (what meta.json records beside the typed ones)."""
        return {k: self.block(k) for k in self.given}
