"""What one run carries from the started sampler to its meta.json, in one object instead of a
dozen loose values beside the code that fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import guardian
from ..config import SamplerSettings
from ..devices.base import SensorBackend
from ..sampler import Sampler
from ..workload_cgroup import WorkloadCgroup
from .signals import SignalRelay


@dataclass
class RunState:
    """One run of CMD under a started sampler: what it was given (command, paths, settings,
    backends and their notes), and what happened, filled in as it goes (the times, CMD's exit
    status or why it did not start, the processes ended after it, the guardian)."""

    cmd: list[str]
    events: Path
    meta: Path
    run_id: str
    cell: dict[str, Any] | None
    settings: SamplerSettings
    sampler: Sampler
    backends: list[SensorBackend]
    notes: list[str]
    idle_s: float
    relay: SignalRelay = field(default_factory=SignalRelay)
    t_start: int = 0
    t_end: int = 0
    idle_end: int = 0
    start_error: str | None = None
    rc: int | None = None
    leftovers: int = 0
    guard: guardian.Guardian | None = None
    subreaper: bool = False
    keep: set[int] = field(default_factory=set)  # processes the leftover sweep must not end
    cgroup: WorkloadCgroup | None = None  # CMD's own cgroup, where the machine offers one
    cgroup_note: str = ""  # why CMD has no cgroup of its own
