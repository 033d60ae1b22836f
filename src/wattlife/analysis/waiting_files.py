"""File-level entry of the waiting-energy tables (rule `waiting`, `wattlife waiting`): the
run-level phases table and each cell's trace + meta.json in, waiting.csv, waiting_runs.csv,
waiting_facility.csv and waiting_whatif.csv out."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..contracts import PHASES_COLUMNS, read_meta, read_table, read_trace, write_csv
from ..errors import InputError
from .waiting import cell_summary, context_floor, run_summary, waiting_table
from .waiting_whatif import waiting_facility, waiting_whatif

WAITING_FILES = {"waiting": "waiting.csv", "runs": "waiting_runs.csv",
                 "facility": "waiting_facility.csv", "whatif": "waiting_whatif.csv"}


def context_floors(traces: list[str | Path], metas: list[str | Path]) -> pd.DataFrame:
    """`waiting.context_floor` of every run (trace i with meta i), with its `run_id`."""
    if len(traces) != len(metas):
        raise InputError(f"metas: {len(metas)} files for {len(traces)} traces")
    frames = []
    for t, m in zip(traces, metas, strict=True):
        meta = read_meta(m)
        idle = meta.idle_baseline or {}
        f = context_floor(read_trace(t), idle.get("start_ns"), idle.get("end_ns"))
        f["run_id"] = meta.run_id or Path(m).parent.name
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def waiting_tables(phases: pd.DataFrame, floors: pd.DataFrame | None, jobs_per_year: float,
                   caps_w: list[float] | None = None) -> dict[str, pd.DataFrame]:
    """Every waiting table by file name (pure)."""
    w = waiting_table(phases, floors)
    runs = run_summary(w, phases)
    return {WAITING_FILES["waiting"]: w, WAITING_FILES["runs"]: runs,
            WAITING_FILES["facility"]: waiting_facility(cell_summary(runs), jobs_per_year),
            WAITING_FILES["whatif"]: waiting_whatif(w, caps_w)}


def write_waiting_tables(phases: str | Path, out_dir: str | Path, jobs_per_year: float,
                         traces: list[str | Path] | None = None,
                         metas: list[str | Path] | None = None,
                         caps_w: list[float] | None = None) -> list[Path]:
    """Read the run-level phases table (`results/tables/phases.csv`) and, when given, each cell's
    trace and meta.json (the context floors), write the waiting tables into `out_dir`. Cells under
    custody are verified against their seals first (wattlife.custody)."""
    from ..custody import require_sound

    require_sound(list(traces or []) + list(metas or []), derived=False)  # cells as sealed
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    floors = context_floors(list(traces), list(metas or [])) if traces else None
    paths = []
    table = read_table(Path(phases), PHASES_COLUMNS)  # a missing column: one line naming it
    for name, df in waiting_tables(table, floors, jobs_per_year, caps_w).items():
        paths.append(write_csv(df, out / name))
    return paths
