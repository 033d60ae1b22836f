"""The settings of each whole-node power source (`sampler.node_sources`, issue 45), as the node
readers in `devices` take them: one shape, written by `config.node.node_sources` from the config
(defaults from the schema) and read by `devices.node_select` (devices never import config). No
field holds a credential: a BMC's user and password come from a file or environment variables
the config names (`devices.node_redfish.load_credentials`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    """`sampler.node_sources`: every node source's settings. A source added later has no class
    above: its block (every key of its schema block, defaults filled) is in `blocks`, and its own
    module builds its frozen settings from it (`devices.node_freeipmi`)."""

    pm_counters: PmCountersSettings
    redfish: RedfishSettings
    ipmi: IpmiSettings
    slurm: SlurmSstatSettings
    #: every source without a class above: its block, defaults filled
    blocks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: the sources of `blocks` the config gives (what meta.json records beside the typed ones)
    given: tuple[str, ...] = ()

    def block(self, source: str) -> dict[str, Any]:
        """`sampler.node_sources.<source>` for a source without a class above."""
        return dict(self.blocks[source])

    def given_blocks(self) -> dict[str, dict[str, Any]]:
        """The blocks the config gives for sources without a class above, defaults filled."""
        return {k: self.block(k) for k in self.given}
