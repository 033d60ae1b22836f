"""The whole validated configuration as one typed, frozen object (`settings(cfg)`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .build import build
from .hardware import HardwareProfile, hardware_profile
from .sections import (
    Analysis,
    Attribution,
    Cell,
    DataSets,
    Execution,
    PfiCell,
    PfiMatrix,
    PowerCapSettings,
    Prepare,
    SamplerSettings,
    Slurm,
)
from .workloads import WorkloadSpec, workload_spec


@dataclass(frozen=True)
class Settings:
    """The whole validated config, typed. `raw` is the validated, defaults-filled mapping the
    job slices are cut from (wattlife.jobs)."""

    raw: Mapping[str, Any] = dataclasses.field(repr=False)
    run_name: str | None
    results_dir: str | None
    storage: dict[str, str]
    sampler: SamplerSettings
    execution: Execution | None
    workloads: dict[str, WorkloadSpec]
    powercap: PowerCapSettings
    pfi_matrix: PfiMatrix | None
    attribution: Attribution
    analysis: Analysis
    prepare: Prepare
    data: DataSets
    slurm: Slurm

    def cells(self) -> list[Cell]:
        """Every (workload, storage, checkpoint, repeat) of the execution matrix."""
        ex = self.execution
        if ex is None:
            return []
        return [Cell(w, s, c, r) for w in ex.workloads for s in ex.storage for c in ex.checkpoint
                for r in range(1, ex.repeats + 1)]

    @property
    def pfi_run(self) -> bool:
        """A config with `pfi_matrix` cells is a PFI run: its targets are the sweeps."""
        return bool(self.pfi_matrix and self.pfi_matrix.cells)

    def cell_hardware(self, cell: PfiCell) -> HardwareProfile:
        """The hardware profile of a PFI cell: its `hardware`, else `powercap.hardware`."""
        return hardware_profile(cell.hardware or self.powercap.hardware)

    def cell_caps(self, cell: PfiCell) -> list[float]:
        """A PFI cell's caps: its explicit `caps`, else its profile's grid for its GPU count."""
        caps = cell.caps or self.cell_hardware(cell).grid(cell.gpus)
        return sorted(float(c) for c in caps)


def settings(cfg: Mapping[str, Any]) -> Settings:
    """The typed view of a validated config (a full config or a job's slice)."""
    ex, pm, da = cfg.get("execution"), cfg.get("pfi_matrix"), cfg.get("data") or {}
    return Settings(
        raw=cfg,
        run_name=cfg.get("run_name"), results_dir=cfg.get("results_dir"),
        storage=dict(cfg.get("storage") or {}),
        sampler=SamplerSettings.from_dict(cfg.get("sampler")),
        execution=None if ex is None else build(Execution, ex, "execution"),
        workloads={n: workload_spec(n, w) for n, w in (cfg.get("workloads") or {}).items()},
        powercap=build(PowerCapSettings, cfg.get("powercap"), "powercap"),
        pfi_matrix=None if pm is None else build(PfiMatrix, {**pm, "cells": {
            n: build(PfiCell, {**c, "name": n}, "pfi_matrix", "cells", "*")
            for n, c in pm["cells"].items()}}, "pfi_matrix"),
        attribution=build(Attribution, cfg.get("attribution"), "attribution"),
        analysis=build(Analysis, cfg.get("analysis"), "analysis"),
        prepare=build(Prepare, cfg.get("prepare"), "prepare"),
        data=build(DataSets, {**da, "defined": [d.get("name") for d in da.values()
                                                 if isinstance(d, dict)]}, "data"),
        slurm=build(Slurm, cfg.get("slurm"), "slurm"),
    )
