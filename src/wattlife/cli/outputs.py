"""`wattlife` commands that produce outputs: figures, bench."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import InputError


def cmd_figures(a: argparse.Namespace) -> int:
    from ..figures import draw_all, draw_reference

    tables = Path(a.tables)
    if (tables / "meta.json").exists() and not a.reference:  # a run folder of `wattlife run`
        if not (tables / "tables").is_dir():
            raise FileNotFoundError(2, "No tables in this run folder yet (make them with "
                                       "`wattlife attribute RUN_DIR`)", str(tables / "tables"))
        a.output = a.output or str(tables / "figures")
        tables = tables / "tables"
        a.tables = str(tables)
    if not a.output:
        raise InputError("give -o OUT (only a run folder has a default)")
    if not tables.is_dir():
        raise FileNotFoundError(2, "No such folder of tables (expected a run's tables/ folder, or "
                                   "results/reference with --reference)", str(tables))
    if a.reference:  # the analysis makes the reference tables; the figures only read them
        from ..analysis.reference import write_reference_tables

        write_reference_tables(a.tables, a.output)
    paths = draw_reference(a.tables, a.output) if a.reference else draw_all(a.tables, a.output)
    if not paths:
        refs = " or the reference folders" if a.reference else ""
        raise InputError(f"{tables}: no table to draw from (expected e.g. phases.csv, curves.csv, "
                         f"pfi.csv{refs}); nothing drawn")
    for p in paths:
        print(p)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from .. import bench

    return bench.main(a.what, a.scale)


def _add_figures(sub: Any) -> None:
    """The `figures` command's parser."""
    fg = sub.add_parser("figures", help="draw every figure from a tables folder (or the "
                                        "references)")
    fg.add_argument("tables", help="a tables folder, a run folder of `wattlife run` after "
                                   "`wattlife attribute RUN_DIR` (its tables/), or with "
                                   "--reference results/reference")
    fg.add_argument("--reference", action="store_true",
                    help="draw the committed reference results (H200, A100) from their CSVs "
                         "(default: off: TABLES is a folder of tables)")
    fg.add_argument("-o", "--output", help="folder for the PNG and PDF figures (default: "
                                           "RUN_DIR/figures for a run folder; else required)")
    fg.set_defaults(fn=cmd_figures)


def _add_bench(sub: Any) -> None:
    """The `bench` command's parser."""
    b = sub.add_parser("bench", help="benchmarks that print figures (markers, attribution, "
                                     "allocate)")
    b.add_argument("what", choices=["markers", "attribution", "allocate", "all"],
                   help="which benchmark")
    b.add_argument("--scale", type=float, default=1.0,
                   help="fraction of the full-size benchmark (default 1.0)")
    b.set_defaults(fn=cmd_bench)


def add_parsers(sub: Any) -> None:
    """Add this group's parsers, in the order of `wattlife --help` (the module docstring's)."""
    _add_figures(sub)
    _add_bench(sub)
