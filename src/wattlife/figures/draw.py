"""Every figure whose table exists in a folder of tables (`wattlife figures`, rule `figures`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .allocation import fig_allocation
from .lifecycle import fig_device_share, fig_phase_energy, fig_storage_checkpoint
from .pfi import fig_curves, fig_pfi, fig_pfi_published
from .preparation import fig_downloads, fig_staging
from .waiting import fig_waiting


def draw_all(tables: str | Path, out: str | Path, expect: list[str] | None = None) -> list[Path]:
    """Every figure whose table exists in `tables` (`wattlife figures`, rule `figures`). With
    `expect` (figure paths), an error names those not drawn (their tables are missing?)."""
    tables, out = Path(tables), Path(out)
    made: list[Path] = []

    def have(name: str) -> pd.DataFrame | None:
        p = tables / name
        return pd.read_csv(p) if p.exists() else None

    if (s := have("phase_summary.csv")) is not None:
        made += fig_phase_energy(s, out / "fig1_phase_energy_time")
    if (s := have("device_share.csv")) is not None:
        made += fig_device_share(s, out / "fig2_device_share")
    if (s := have("storage_checkpoint.csv")) is not None:
        made += fig_storage_checkpoint(s, out / "fig3_storage_checkpoint")
    if (s := have("waiting_runs.csv")) is not None:
        made += fig_waiting(s, out / "fig9_waiting", have("waiting.csv"))
    if (s := have("downloads.csv")) is not None and (f := have("download_fit.csv")) is not None:
        made += fig_downloads(s, f, out / "fig4_download_size")
    if (tables / "staging_breakeven.csv").exists():
        try:
            be = pd.read_csv(tables / "staging_breakeven.csv")
        except pd.errors.EmptyDataError:
            be = pd.DataFrame(columns=["workload", "dataset_bytes", "breakeven_epochs", "source"])
        made += fig_staging(be, out / "fig5_staging_breakeven")
    if (s := have("curves.csv")) is not None:
        made += fig_curves(s, out / "fig6_power_throughput")
    if (s := have("pfi.csv")) is not None:
        made += fig_pfi(s, have("predictor_features.csv"), have("predictor.csv"), out / "fig7_pfi")
        if "pfi_published" in s.columns:
            made += fig_pfi_published(s, out / "fig7b_pfi_vs_published")
    if (s := have("allocation_summary.csv")) is not None:
        made += fig_allocation(s, out / "fig8_allocation")
    missing = [p for p in expect or [] if p not in {str(m) for m in made}]
    if missing:
        raise RuntimeError(f"figures not drawn (their tables are missing?): {missing}")
    return made

