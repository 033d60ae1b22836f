"""`sampler.node_sources` from the config: each whole-node power source's settings
(`contracts.node_settings`, the shape the node readers take), defaults from the schema; which
source the sampler reads is `sampler.node` (auto, a node backend of `contracts.sources`, or
none). A source added later needs no class: its schema block, defaults filled, is kept in
`NodeSources.blocks` for its own module."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..contracts.node_settings import (
    EmulatorSettings,
    IpmiSettings,
    NodeSources,
    PmCountersSettings,
    RedfishSettings,
    SlurmSstatSettings,
)
from .build import block, build
from .loading import schema_node

SECTION = ("sampler", "node_sources")


def node_sources(d: Mapping[str, Any] | None) -> NodeSources:
    """`sampler.node_sources` typed: the four sources with a class, and every other source's
    block the schema declares (defaults filled)."""
    d = dict(d or {})
    typed = {f.name for f in dataclasses.fields(NodeSources)} - {"blocks", "given"}
    pm = build(PmCountersSettings, d.get("pm_counters"), *SECTION, "pm_counters")
    emulator: Any = pm.emulator  # build leaves a nested object a plain mapping
    if emulator is not None:
        pm = dataclasses.replace(pm, emulator=build(
            EmulatorSettings, emulator, *SECTION, "pm_counters", "emulator"))
    others = set(schema_node(*SECTION).get("properties", {})) - typed
    return NodeSources(pm_counters=pm,
                       redfish=build(RedfishSettings, d.get("redfish"), *SECTION, "redfish"),
                       ipmi=build(IpmiSettings, d.get("ipmi"), *SECTION, "ipmi"),
                       slurm=build(SlurmSstatSettings, d.get("slurm"), *SECTION, "slurm"),
                       blocks={k: block(d.get(k), *SECTION, k) for k in sorted(others)},
                       given=tuple(k for k in d if k in others))
