"""The Snakemake scripts are one call each to the functions `wattlife aggregate` / `wattlife
figures` run; figures are drawn from tables (the reference tables made in `analysis.reference`),
never by running an analysis."""

import runpy
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from wattlife.analysis.aggregate import write_phase_tables
from wattlife.cli import main

REPO = Path(__file__).resolve().parents[2]
CELLS = sorted((REPO / "results/reference/h200/execution/cells").glob("*/phases.csv"))


def test_aggregate_script_writes_what_the_cli_writes(tmp_path):
    assert CELLS, "the committed H200 execution cells are missing"
    names = ("phases", "phase_summary", "device_share", "storage_checkpoint")
    out = {k: str(tmp_path / "script" / f"{n}.csv")
           for k, n in zip(("phases", "summary", "share", "deltas"), names, strict=True)}
    snakemake = SimpleNamespace(
        input=SimpleNamespace(phases=[str(p) for p in CELLS],
                              metas=[str(p.parent / "meta.json") for p in CELLS],
                              summaries=[str(p.parent / "work" / "summary.json") for p in CELLS],
                              events=[str(p.parent / "events.csv") for p in CELLS]),
        output=SimpleNamespace(**out), log=[str(tmp_path / "aggregate_phases.log")],
        rule="aggregate_phases")
    runpy.run_path(str(REPO / "scripts/aggregate_phases.py"), init_globals={"snakemake": snakemake})
    assert "rule aggregate_phases finished" in (tmp_path / "aggregate_phases.log").read_text()
    assert main(["aggregate", *map(str, CELLS), "-o", str(tmp_path / "cli")]) == 0
    for n in names:
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "script" / f"{n}.csv"),
                                      pd.read_csv(tmp_path / "cli" / f"{n}.csv"))


def test_figures_script_names_a_figure_it_could_not_draw(tmp_path):
    tables = tmp_path / "tables"
    write_phase_tables(CELLS, tables)
    want = [str(tmp_path / "fig" / "fig1_phase_energy_time.png"),
            str(tmp_path / "fig" / "fig6_power_throughput.png")]  # no curves.csv: not drawable
    snakemake = SimpleNamespace(params=SimpleNamespace(tables=str(tables)), output=want,
                                log=[str(tmp_path / "figures.log")], rule="figures")
    with pytest.raises(RuntimeError, match="fig6_power_throughput"):
        runpy.run_path(str(REPO / "scripts/figures.py"), init_globals={"snakemake": snakemake})
    log = (tmp_path / "figures.log").read_text()  # the rule's log has the traceback too
    assert "fig6_power_throughput" in log and "rule figures failed" in log
    assert Path(want[0]).exists()


def test_reference_tables_are_made_in_analysis(tmp_path):
    from wattlife.analysis.reference import A100_TABLES, H200_EXECUTION_TABLES
    from wattlife.analysis.reference import write_reference_tables as write

    written = write(REPO / "results/reference", tmp_path)
    assert {f"{H200_EXECUTION_TABLES}/phase_summary.csv", f"{A100_TABLES}/curves.csv",
            f"{A100_TABLES}/pfi.csv", f"{A100_TABLES}/allocation_summary.csv"} <= set(written)
    assert all(p.exists() for p in written.values())
    allocation = pd.read_csv(written[f"{A100_TABLES}/allocation_summary.csv"])
    assert set(allocation["curves_source"]) == {"measured"}


def test_figures_import_no_analysis_or_attribution():
    """A figure is drawn from a table, never by running an analysis: no module of the figures
    package imports `analysis` or `attribution` (any scope, relative imports resolved)."""
    import ast

    pkg = REPO / "src" / "wattlife" / "figures"
    bad = {}
    for path in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            hit = [n for n in names if n.lstrip(".").split(".")[0] in ("analysis", "attribution")
                   or n.startswith(("wattlife.analysis", "wattlife.attribution"))]
            if hit:
                bad.setdefault(path.name, []).extend(hit)
    assert bad == {}


def test_reference_figures_are_drawn_only_from_written_tables(tmp_path):
    """`draw_reference` computes nothing: with no committed CSVs and no tables written under
    `out`, it draws nothing and writes no table (`write_reference_tables` makes them first)."""
    from wattlife.contracts import A100_TABLES, H200_EXECUTION_TABLES
    from wattlife.figures import draw_reference

    out = tmp_path / "out"
    assert draw_reference(tmp_path / "empty", out) == []
    assert not (out / A100_TABLES).exists() and not (out / H200_EXECUTION_TABLES).exists()


def test_every_phase_has_a_colour_of_its_own():
    """Fig. 1's bars: no two phases share a colour (tab20 alone repeats after 20)."""
    from wattlife.figures.common import PHASE_ORDER, PHASE_PALETTE

    assert set(PHASE_PALETTE) == set(PHASE_ORDER)
    assert len({tuple(round(c, 6) for c in rgb)
                for rgb in PHASE_PALETTE.values()}) == len(PHASE_ORDER)
