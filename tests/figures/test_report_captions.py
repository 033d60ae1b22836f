"""The report's captions match the drawn figures (issue 42: fig. 1's caption described stacked bars
and two panels while the figure has side-by-side bars and three), and the report carries the
tables beside the figures, each with a caption that names it.

Each figure's caption (report/figN.rst) says "Panels (left to right): A; B; ..."; the test draws
every figure from the committed H200 workflow's tables, keeps the matplotlib figure, and checks
that the number of panel columns drawn is the number the caption lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO

TABLES = REPO / "results" / "reference" / "h200" / "workflow" / "tables"
FIGURE_MODULES = ("lifecycle", "pfi", "preparation", "allocation", "waiting")


def caption_panels(n: int) -> list[str]:
    text = " ".join((REPO / "report" / f"fig{n}.rst").read_text().split())
    m = re.search(r"Panels \(left to right\): (.*?)(?<!e\.g)\.(\s|$)", text)
    assert m, f"report/fig{n}.rst names no panels"
    # a parenthesis is one panel's detail, not a list of panels
    listing = re.sub(r"\([^()]*\)", "", m.group(1))
    return [p.strip() for p in listing.split(";") if p.strip()]


def panel_columns(fig) -> int:
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    return len({round(ax.get_position().x0, 2) for ax in axes})


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    import importlib

    import wattlife.figures.common as common
    from wattlife.figures import draw_all

    figures: dict[str, object] = {}
    original = common.save_figure

    def keep(fig, out: Path):
        figures[Path(out).name.split("_")[0]] = fig
        out.parent.mkdir(parents=True, exist_ok=True)
        return [out.with_suffix(".png")]  # the figure is kept open for the test

    mp = pytest.MonkeyPatch()
    for name in FIGURE_MODULES:
        mp.setattr(importlib.import_module(f"wattlife.figures.{name}"), "save_figure", keep)
    try:
        draw_all(TABLES, tmp_path_factory.mktemp("figs"))
    finally:
        mp.undo()
    assert common.save_figure is original
    yield figures
    import matplotlib.pyplot as plt

    for fig in figures.values():
        plt.close(fig)


@pytest.mark.parametrize("n", range(1, 10))
def test_caption_lists_the_panels_drawn(drawn, n):
    fig = drawn[f"fig{n}"]
    panels = caption_panels(n)
    assert panel_columns(fig) == len(panels), (n, panels, panel_columns(fig))


def test_fig1_caption_says_side_by_side_bars_and_three_panels(drawn):
    import pandas as pd

    text = " ".join((REPO / "report" / "fig1.rst").read_text().split())
    assert "stacked" not in text.replace("not stacked", "")
    assert "side by side" in text
    fig = drawn["fig1"]
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("per item") for t in titles)
    assert any(t.startswith("time per phase") for t in titles)
    # one row per cell, each with every phase's share of the cell's energy (issue 42: fig. 1 showed
    # one cell per workload and no share of the total)
    cells = pd.read_csv(TABLES / "phase_summary.csv")[["workload", "storage", "checkpoint"]]
    energy_axes = [ax for ax in fig.axes if "share of the cell's energy" in ax.get_title()]
    assert len(energy_axes) == len(cells.drop_duplicates()) == 8
    for ax in energy_axes:
        shares = [float(t.get_text().strip().rstrip("%")) for t in ax.texts
                  if t.get_text().strip().endswith("%")]
        assert shares and 98 <= sum(shares) <= 102, shares  # rounded to whole per cent
    assert "One row per cell" in text
    first = caption_panels(1)
    assert first[0].startswith("energy per run") and first[1].startswith("energy per item") \
        and first[2].startswith("time per phase")


def test_fig7_draws_the_pfi_intervals_of_pfi_csv(drawn):
    """Fig. 7's first panel: each job's PFI with its 95 % interval (pfi_lo, pfi_hi) as whiskers,
    the same intervals pfi.csv holds (issue 42: the figure left them out)."""
    import numpy as np
    import pandas as pd
    from matplotlib.container import ErrorbarContainer

    pfi = pd.read_csv(TABLES / "pfi.csv").dropna(subset=["pfi"])
    want = sorted((round(lo, 6), round(hi, 6)) for lo, hi in zip(pfi["pfi_lo"], pfi["pfi_hi"],
                                                                    strict=True)
                  if np.isfinite(lo) and np.isfinite(hi))
    assert want, "the reference pfi.csv has intervals"
    ax = drawn["fig7"].axes[0]
    got = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer) and c.lines[2]:
            for seg in c.lines[2][0].get_segments():
                got.append((round(float(seg[0][1]), 6), round(float(seg[1][1]), 6)))
    assert sorted(got) == want
    assert "whiskers" in ax.get_title() and "whiskers" in (REPO / "report" / "fig7.rst").read_text()


def test_every_table_of_the_run_is_in_the_report_with_a_caption():
    """Every CSV the table rules write is a report() output in category "tables", and its caption
    file names each of those tables."""
    rules = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    tables = set(re.findall(r'f"\{RES\}/tables/(\w+\.csv)"', rules))
    assert {"phases.csv", "phase_summary.csv", "waiting.csv", "curves.csv", "pfi.csv"} <= tables
    reported = re.findall(r'report\(\s*f"\{RES\}/tables/(\w+\.csv)",\s*caption="\.\./report/'
                          r'(tables-[\w-]+\.rst)",\s*category="tables"', rules)
    assert {t for t, _ in reported} == tables, tables - {t for t, _ in reported}
    for table, caption in reported:
        assert f"``{table}``" in (REPO / "report" / caption).read_text(), (table, caption)
