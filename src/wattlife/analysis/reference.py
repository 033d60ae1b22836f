"""The tables of the committed reference results (`results/reference`), made from their raw CSVs.

The H200 execution cells' `phases.csv` become the run-level phase tables (`aggregate`); the
public A100 DVFS sweep (`a100-emerald/dvfs_sweep.csv`, measured) becomes curves, PFI and the
allocation summary. `wattlife figures --reference` writes these tables first, then draws from
them (`figures.draw_reference` reads them and computes nothing); the other reference CSVs
(sampler, attribution comparison, pfi-study) are tables already.
"""

from __future__ import annotations

from pathlib import Path

from ..contracts import A100_TABLES, H200_EXECUTION_TABLES

__all__ = ["A100_TABLES", "H200_EXECUTION_TABLES", "write_reference_tables"]

#: the allocation the A100 reference tables simulate (cuts, workloads x jobs, seed)
A100_CUTS = (0.0, 0.1, 0.2, 0.3, 0.4)
A100_WORKLOADS = A100_JOBS = 100
A100_SEED = 0


def write_reference_tables(ref_root: str | Path, out: str | Path) -> dict[str, Path]:
    """Write the tables of whatever `ref_root` holds under `out` (`H200_EXECUTION_TABLES`,
    `A100_TABLES`); returns {"<folder>/<table>.csv": path}."""
    ref_root, out = Path(ref_root), Path(out)
    written: dict[str, Path] = {}
    cells: list[str | Path] = sorted(
        (ref_root / "h200" / "execution" / "cells").glob("*/phases.csv"))
    if cells:
        from .aggregate import write_phase_tables

        tables = out / H200_EXECUTION_TABLES
        for path in write_phase_tables(cells, tables):
            written[f"{H200_EXECUTION_TABLES}/{Path(path).name}"] = Path(path)
    a100 = ref_root / "a100-emerald" / "dvfs_sweep.csv"
    if a100.exists():
        from .allocation import simulate_allocation
        from .curves import load_curves
        from .pfi import pfi_table

        curves = load_curves(a100)
        tables = out / A100_TABLES
        tables.mkdir(parents=True, exist_ok=True)
        pfi = pfi_table(curves, n_mc=0)
        _, summary = simulate_allocation(curves, list(A100_CUTS), n_workloads=A100_WORKLOADS,
                                         n_jobs=A100_JOBS, seed=A100_SEED)
        summary["curves_source"] = "measured"
        made = {"curves.csv": curves, "pfi.csv": pfi, "allocation_summary.csv": summary}
        for name, df in made.items():
            df.to_csv(tables / name, index=False)
            written[f"{A100_TABLES}/{name}"] = tables / name
    return written
