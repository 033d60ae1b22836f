"""Every figure whose table exists in a folder of tables (`wattlife figures`, rule `figures`); a
figure whose table holds nothing it can show is skipped with one line saying which and why."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..errors import InputError, SetupError
from .allocation import fig_allocation
from .common import NothingToDraw, read_figure_table
from .lifecycle import fig_device_share, fig_phase_energy, fig_storage_checkpoint
from .pfi import fig_curves, fig_pfi, fig_pfi_published
from .preparation import fig_downloads, fig_staging
from .waiting import fig_waiting

#: reads a table of the folder by file name; None when the folder lacks it
Have = Callable[[str], "pd.DataFrame | None"]


def _downloads(s: pd.DataFrame, have: Have, out: Path) -> list[Path]:
    """Fig. 4, which needs the download fit beside the downloads."""
    fit = have("download_fit.csv")
    if fit is None:
        raise NothingToDraw("no download_fit.csv beside it")
    return fig_downloads(s, fit, out)


def _pfi(s: pd.DataFrame, have: Have, out: Path) -> list[Path]:
    """Fig. 7, with the predictor's features and fit where they exist."""
    return fig_pfi(s, have("predictor_features.csv"), have("predictor.csv"), out)


def _pfi_published(s: pd.DataFrame, have: Have, out: Path) -> list[Path]:
    """Fig. 7b, drawn only from a PFI table that carries the published values."""
    if "pfi_published" not in s.columns:
        return []
    return fig_pfi_published(s, out)


#: (table, figure file stem, figure function (named in a skip line), how to draw it from the
#: table, `have` and the stem), in drawing order
FIGURES: tuple[tuple[str, str, str, Callable[[pd.DataFrame, Have, Path], list[Path]]], ...] = (
    ("phase_summary.csv", "fig1_phase_energy_time", "fig_phase_energy",
     lambda s, _, o: fig_phase_energy(s, o)),
    ("device_share.csv", "fig2_device_share", "fig_device_share",
     lambda s, _, o: fig_device_share(s, o)),
    ("storage_checkpoint.csv", "fig3_storage_checkpoint", "fig_storage_checkpoint",
     lambda s, _, o: fig_storage_checkpoint(s, o)),
    ("waiting_runs.csv", "fig9_waiting", "fig_waiting",
     lambda s, h, o: fig_waiting(s, o, h("waiting.csv"))),
    ("downloads.csv", "fig4_download_size", "fig_downloads", _downloads),
    ("staging_breakeven.csv", "fig5_staging_breakeven", "fig_staging",
     lambda s, _, o: fig_staging(s, o)),
    ("curves.csv", "fig6_power_throughput", "fig_curves", lambda s, _, o: fig_curves(s, o)),
    ("pfi.csv", "fig7_pfi", "fig_pfi", _pfi),
    ("pfi.csv", "fig7b_pfi_vs_published", "fig_pfi_published", _pfi_published),
    ("allocation_summary.csv", "fig8_allocation", "fig_allocation",
     lambda s, _, o: fig_allocation(s, o)),
)
#: figures drawn from a table with no rows too (fig. 5 says that no workload broke even)
DRAWN_EMPTY = {"fig5_staging_breakeven"}
STAGING_COLUMNS = ["workload", "dataset_bytes", "breakeven_epochs", "source"]


def _reader(tables: Path) -> Have:
    """`have(name)`: the folder's table `name` (`read_figure_table`), or None without it."""
    def have(name: str) -> pd.DataFrame | None:
        p = tables / name
        if not p.exists():
            return None
        try:
            return read_figure_table(p)
        except pd.errors.EmptyDataError:  # no header either (an empty break-even table)
            if name == "staging_breakeven.csv":
                return pd.DataFrame(columns=STAGING_COLUMNS)
            raise InputError(f"{p}: empty file (expected a CSV table with a header)") from None
    return have


def draw_all(tables: str | Path, out: str | Path, expect: list[str] | None = None) -> list[Path]:
    """Every figure whose table exists in `tables` (`wattlife figures`, rule `figures`). A figure
    whose table has no rows, or nothing it can show (`NothingToDraw`: e.g. fig. 3 of a single
    run, with no storage/checkpoint pair), is skipped with one warning line naming the figure
    function, the table and why. With `expect` (figure paths), an error names those not drawn,
    with the reasons of those skipped."""
    tables, out = Path(tables), Path(out)
    have = _reader(tables)
    made: list[Path] = []
    skipped: list[str] = []
    for table, stem, name, draw in FIGURES:
        if (s := have(table)) is None:
            continue
        try:
            if not len(s) and stem not in DRAWN_EMPTY:
                raise NothingToDraw("no rows")
            made += draw(s, have, out / stem)
        except NothingToDraw as why:
            skipped.append(f"{name}: {why} in {tables / table}; skipped")
            warnings.warn(skipped[-1], stacklevel=2)
    missing = [p for p in expect or [] if p not in {str(m) for m in made}]
    if missing:
        why_ = f" ({'; '.join(skipped)})" if skipped else ""
        raise SetupError(f"figures not drawn (their tables are missing?): {missing}{why_}")
    return made

