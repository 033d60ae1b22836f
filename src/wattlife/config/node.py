"""`sampler.node_sources`: the settings of each whole-node power source (issue 45); which one the
sampler reads is `sampler.node` (auto | pm_counters | redfish | ipmi | slurm | none). No key
holds a credential: a BMC's user and password come from a file or environment variables the
config names (`devices.node_redfish.load_credentials`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .build import build


@dataclass(frozen=True)
class PmCountersSettings:
    """`sampler.node_sources.pm_counters`: the HPE/Cray sysfs tree and how often it is read."""

    root: str
    period_ms: float


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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> NodeSources:
        d = dict(d or {})
        sec = ("sampler", "node_sources")
        return cls(pm_counters=build(PmCountersSettings, d.get("pm_counters"), *sec,
                                      "pm_counters"),
                   redfish=build(RedfishSettings, d.get("redfish"), *sec, "redfish"),
                   ipmi=build(IpmiSettings, d.get("ipmi"), *sec, "ipmi"),
                   slurm=build(SlurmSstatSettings, d.get("slurm"), *sec, "slurm"))
