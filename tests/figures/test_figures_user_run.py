"""A user's own run through `wattlife aggregate` and `wattlife figures` (one run, with or without
a cell in its meta.json): the warning says what is missing, every figure that can be drawn is,
the others are skipped with one line naming them and their table; a table whose text column is
empty in every row is read as text; redrawing the same tables gives byte-identical files."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.aggregate import collect_phases
from wattlife.cli import main
from wattlife.contracts import PHASES_COLUMNS
from wattlife.figures import draw_all, fig_device_share
from wattlife.figures.common import read_figure_table, seeded_jitter
from wattlife.figures.lifecycle import compared_cells


def _run_dir(root: Path, cell: dict | None) -> Path:
    """A run folder as `wattlife run` + `wattlife attribute` leave it: phases.csv (hand-made, GPU
    and CPU, three phases) and a meta.json whose `cell` is `cell` (None: no `cell` key)."""
    root.mkdir(parents=True)
    rows = []
    for phase, e, t in (("model_load", 30.0, 0.3), ("forward", 60.0, 0.5),
                        ("backward", 90.0, 0.75)):
        for kind, share, src in (("gpu", 0.7, "sim"), ("cpu", 0.3, "estimate")):
            rows.append({"run_id": "r", "phase": phase, "device_kind": kind, "device": f"{kind}0",
                         "energy_j": e * share, "energy_lo_j": e * share - 1,
                         "energy_hi_j": e * share + 1, "time_s": t, "count": 5,
                         "mean_power_w": e * share / t, "method": "integrate", "source": src})
    pd.DataFrame(rows, columns=PHASES_COLUMNS).to_csv(root / "phases.csv", index=False)
    meta = {"schema_version": 1, "run_id": "r", "host": "h", "cmd": ["python", "train.py"],
            "gpu_model": "Simulated H200 (sim)"}
    if cell is not None:
        meta["cell"] = cell
    (root / "meta.json").write_text(json.dumps(meta))
    return root


@pytest.mark.parametrize("cell", [None, {}, {"workload": "mine", "storage": "shared",
                                             "checkpoint": "off", "repeat": 1}])
def test_one_run_aggregates_and_draws_what_it_can(tmp_path, capsys, cell):
    run = _run_dir(tmp_path / "r", cell)
    tables, figs = tmp_path / "tables", tmp_path / "figs"
    assert main(["aggregate", str(run / "phases.csv"), "-o", str(tables)]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err  # no cell needed: one's own run is named by its run id
    workloads = set(pd.read_csv(tables / "phases.csv")["workload"])
    assert workloads == ({"mine"} if cell else {"r"}), workloads
    assert main(["figures", str(tables), "-o", str(figs)]) == 0
    err = capsys.readouterr().err
    assert "error" not in err
    skip = [line for line in err.splitlines() if "skipped" in line]
    assert skip == [f"wattlife figures: warning: fig_storage_checkpoint: no storage/checkpoint "
                    f"pair (a cell beside its workload's shared / checkpoint-off baseline) in "
                    f"{tables / 'storage_checkpoint.csv'}; skipped"]
    drawn = {p.name for p in figs.iterdir()}
    assert drawn == {f"fig{n}.{ext}" for n in ("1_phase_energy_time", "2_device_share")
                     for ext in ("png", "pdf")}


def test_a_meta_json_without_cell_or_run_id_is_named(tmp_path, capsys):
    """Neither a cell nor a run id: the warning names meta.json's missing `cell`."""
    run = _run_dir(tmp_path / "r", None)
    meta = json.loads((run / "meta.json").read_text())
    del meta["run_id"]
    (run / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="has no `cell` key") as rec:
        collect_phases([run / "phases.csv"])
    assert f"its workload is named '{run / 'phases.csv'}'" in str(rec[0].message)


def test_a_missing_meta_json_is_named_as_missing(tmp_path):
    run = _run_dir(tmp_path / "r", None)
    (run / "meta.json").unlink()
    with pytest.warns(UserWarning, match=r"meta\.json missing\): its workload is named"):
        collect_phases([run / "phases.csv"])


def test_a_text_column_empty_in_every_row_is_read_as_text(tmp_path):
    """The cause of `TypeError: operation 'add' not supported for dtype 'str' with dtype
    'float64'`: a run without a cell has empty storage and checkpoint, which pandas reads as a
    float NaN column; `read_figure_table` reads them as "" and fig. 2 labels the run."""
    p = tmp_path / "device_share.csv"
    p.write_text("workload,storage,checkpoint,device_kind,n,energy_j,share,source\n"
                 "r/phases.csv,,,cpu,1,30.0,0.25,estimate\n"
                 "r/phases.csv,,,gpu,1,90.0,0.75,sim\n")
    assert pd.read_csv(p)["storage"].dtype == np.float64  # what the figures used to get
    share = read_figure_table(p)
    assert list(share["storage"]) == ["", ""] and list(share["checkpoint"]) == ["", ""]
    assert share["share"].dtype == np.float64
    made = fig_device_share(share, tmp_path / "fig2")
    assert [m.name for m in made] == ["fig2.png", "fig2.pdf"]


def test_fig3_compares_only_cells_beside_a_baseline():
    d = pd.DataFrame({"workload": ["a", "a", "b", "c"], "storage": ["shared", "local", "local", ""],
                      "checkpoint": ["off", "off", "sync", ""], "phase": "forward",
                      "n_base": [1, 1, 0, 0]})
    kept = compared_cells(d)
    assert list(zip(kept["workload"], kept["storage"], strict=True)) == [("a", "local")]
    assert compared_cells(d[d["workload"] != "a"]).empty


def _pfi_tables(folder: Path) -> None:
    """A PFI table with several jobs per category (fig. 7 jitters their points)."""
    folder.mkdir()
    rng = np.random.default_rng(1)
    pd.DataFrame({"job": [f"j{i}" for i in range(12)], "gpu_model": "H200", "n_caps": 4,
                  "pfi": 1 + rng.random(12), "pfi_lo": np.nan, "pfi_hi": np.nan, "grid": "",
                  "category": ["dense", "moe", "vision"] * 4, "source": "sim"}
                 ).to_csv(folder / "pfi.csv", index=False)


def test_redrawing_the_same_tables_gives_identical_files(tmp_path):
    tables = tmp_path / "tables"
    _pfi_tables(tables)
    state = np.random.get_state()
    first = draw_all(tables, tmp_path / "a")
    second = draw_all(tables, tmp_path / "b")
    assert [p.name for p in first] == ["fig7_pfi.png", "fig7_pfi.pdf"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    after = np.random.get_state()  # the caller's random state is left as it was
    assert all(np.array_equal(x, y) for x, y in zip(state, after, strict=True))


def test_seeded_jitter_restores_the_callers_random_state():
    np.random.seed(7)
    want = np.random.random()
    np.random.seed(7)
    with seeded_jitter():
        inside = np.random.random()
    with seeded_jitter():
        assert np.random.random() == inside
    assert np.random.random() == want
