"""The committed H100 results (results/reference/h100/), recomputed from their raw files (no GPU
needed): every cell valid and attributed again by today's code, the tables what `aggregate`
makes of the cells, and the README's numbers what the files give."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from reference_tables import same_but_gaps

H100 = REPO / "results/reference/h100"
REPEATS = H100 / "workflow-repeats"
REPEATS_CELLS = sorted(p.parent for p in (REPEATS / "runs").glob("*/*/*/r*/phases.csv"))
GPU_NAME = "NVIDIA H100 80GB HBM3"


def _gpu(cell: Path) -> pd.DataFrame:
    ph = pd.read_csv(cell / "phases.csv")
    return ph[ph["device_kind"] == "gpu"]


def test_repeats_matrix_is_complete_and_measured_on_the_h100() -> None:
    assert len(REPEATS_CELLS) == 12
    for cell in REPEATS_CELLS:
        meta = json.loads((cell / "meta.json").read_text())
        assert meta["gpu_model"] == GPU_NAME, cell
        assert set(_gpu(cell)["source"]) == {"nvml-samples"}, cell
    assert "rc=0 in 391 s" in (REPEATS / "snakemake.log").read_text()


@pytest.mark.parametrize("cell", REPEATS_CELLS, ids=lambda c: str(c.relative_to(REPEATS)))
def test_repeats_cells_pass_the_check_and_re_attribute_to_their_committed_table(tmp_path, cell):
    """Valid against the contracts; today's attribution (the options of rules/attribute.smk) gives
    the committed phases from the committed trace and events (columns added since: the sensor-gap
    ones; a sampler stall on the CPU estimate widens the rows it touches: `reference_tables`)."""
    from wattlife.attribution import attribute_files
    from wattlife.check import ERROR, check_run

    assert [f for f in check_run(cell) if f.severity == ERROR] == []
    attribute_files(cell / "trace.csv", cell / "events.csv", tmp_path / "phases.csv",
                    idle_split=True)
    committed = pd.read_csv(cell / "phases.csv")
    same_but_gaps(pd.read_csv(tmp_path / "phases.csv"), committed, str(cell))


def test_readme_numbers_are_what_the_files_give() -> None:
    from wattlife.analysis.performance import step_throughput_from_events
    from wattlife.contracts import read_events

    shares, speeds = [], []
    for cell in REPEATS_CELLS:
        g = _gpu(cell)
        run_s = g.loc[g["phase"] != "idle_baseline", "time_s"].sum()
        shares.append(g.loc[g["phase"] == "unattributed", "time_s"].sum() / run_s * 100)
        speeds.append(step_throughput_from_events(read_events(cell / "events.csv")))
    assert (round(min(shares), 2), round(max(shares), 2)) == (0.57, 0.88)
    assert (round(min(speeds)), round(max(speeds))) == (1901, 2623)
    table = pd.read_csv(REPEATS / "tables/storage_checkpoint.csv")
    sig = table[table["significant"].eq(True)].set_index(["storage", "phase"])
    assert len(table) == 60 and len(sig) == 3
    got = {k: tuple(np.round(sig.loc[k, ["d_energy_j", "d_energy_lo_j", "d_energy_hi_j"]]
                             .to_numpy(float), 1))
           for k in [("local", "checkpoint"), ("shared", "checkpoint"), ("local", "stage_copy")]}
    assert got == {("local", "checkpoint"): (72.3, 58.9, 85.6),
                   ("shared", "checkpoint"): (65.1, 58.6, 71.6),
                   ("local", "stage_copy"): (76.8, 39.7, 113.9)}
    readme = (REPEATS / "README.md").read_text()
    for text in ("0.57–0.88 %", "1,901–2,623 images/s", "72.3 J [58.9, 85.6]",
                 "65.1 J [58.6, 71.6]", "+76.8 J [39.7, 113.9]"):
        assert text in readme, text


def test_repeats_tables_are_recomputed_from_the_committed_cells(tmp_path) -> None:
    """The phase tables are what `aggregate` makes of the committed cells (items from the events'
    steady steps: rebuilt by today's code after the pipeline wrote them at 5672872)."""
    from wattlife.analysis.aggregate import write_phase_tables

    cells = REPEATS_CELLS
    write_phase_tables([c / "phases.csv" for c in cells], tmp_path,
                       metas=[c / "meta.json" for c in cells],
                       summaries=[c / "work" / "summary.json" for c in cells],
                       events=[c / "events.csv" for c in cells])
    for name in ("phases.csv", "phase_summary.csv", "device_share.csv",
                 "storage_checkpoint.csv", "throughput.csv"):
        made = pd.read_csv(tmp_path / name)
        committed = pd.read_csv(REPEATS / "tables" / name)
        pd.testing.assert_frame_equal(made[list(committed.columns)], committed,
                                      check_exact=False, rtol=1e-9, atol=1e-9)


SENSOR = H100 / "sensor"


def test_sensor_tables_are_what_the_raw_files_give(tmp_path) -> None:
    """benchmarks/nvml_sensor.py's analysis, run again on the committed raw trace, events and
    polls, gives the committed spacing, window and phase-length tables."""
    import sys
    import tarfile

    sys.path.insert(0, str(REPO / "benchmarks"))
    from nvml_sensor_analysis import analyse_run

    from wattlife.contracts import read_trace

    with tarfile.open(SENSOR / "sensor_raw.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    summary = json.loads((SENSOR / "summary.json").read_text())
    loads = pd.read_csv(tmp_path / "events.csv")
    polls_all = pd.read_csv(tmp_path / "polls.csv.gz")
    polls = {str(k): g for k, g in polls_all.groupby("poller", sort=False)}
    trace = read_trace(tmp_path / "trace.csv.gz")
    again: dict = {}
    tables, _ = analyse_run(trace[trace["device"] == "gpu0"], loads, polls, again,
                            int(summary["args"]["n_boot"]), 800.0)
    assert again.get("errors", {}) == {}
    for name, file in (("spacing", "sensor_spacing.csv"), ("window", "sensor_window.csv"),
                       ("lengths", "sensor_phase_length.csv")):
        committed = pd.read_csv(SENSOR / file)
        made = tables[name].reset_index(drop=True)
        num = [c for c in committed.columns if pd.api.types.is_float_dtype(committed[c])]
        pd.testing.assert_frame_equal(made[num].astype(float), committed[num], check_exact=False,
                                      rtol=1e-6, atol=1e-9)


def test_sensor_readme_numbers() -> None:
    spacing = pd.read_csv(SENSOR / "sensor_spacing.csv").set_index("quantity")
    window = pd.read_csv(SENSOR / "sensor_window.csv").set_index("direction")
    lengths = pd.read_csv(SENSOR / "sensor_phase_length.csv").set_index("L_ms")
    assert round(spacing.loc["sample_buffer", "spacing_median_ms"], 1) == 20.2
    assert round(spacing.loc["energy_counter", "update_median_ms"]) == 100
    assert round(window.loc["both", "window_ms"], 1) == 46.8
    assert round(window.loc["both", "window_over_spacing"], 2) == 2.32
    assert lengths["block_err_pct"].abs().max() < 1.0
    errs = lengths["integrated_err_mean_pct"].round(1).to_dict()
    assert errs == {10.0: -53.0, 20.0: -40.6, 50.0: -19.7, 100.0: -12.6, 200.0: -9.4,
                    500.0: -4.4, 1000.0: -2.3, 2000.0: -1.0, 5000.0: -0.0}
    assert (lengths.loc[:2000.0, "coverage_truth"] == 0).all()


COMPARE = REPO / "results/reference/gpu-compare"


def test_gpu_compare_tables_are_rebuilt_from_the_committed_runs(tmp_path) -> None:
    """benchmarks/gpu_compare.py over the two committed ResNet-50 matrices gives the committed
    tables; the README's pooled numbers are those tables'."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_compare import main

    assert main(["--out", str(tmp_path), "--runs", str(REPEATS),
                 str(REPO / "results/reference/h200/workflow-repeats")]) == 0
    for name in ("compare_runs.csv", "compare_cells.csv"):
        made, committed = pd.read_csv(tmp_path / name), pd.read_csv(COMPARE / name)
        pd.testing.assert_frame_equal(made, committed, check_exact=False, rtol=1e-9, atol=1e-12)
    cells = pd.read_csv(COMPARE / "compare_cells.csv")
    pooled = cells[cells["storage"] == "all"].set_index("metric")
    thr, pw, jpi = (pooled.loc[m] for m in ("throughput", "steady_power_w", "j_per_item"))
    assert (round(thr["mean_first"]), round(thr["mean_second"])) == (2234, 2238)
    assert bool(thr["within_noise"]) and not bool(pw["within_noise"])
    assert (round(pw["diff"], 1), round(pw["diff_lo"], 1), round(pw["diff_hi"], 1)) \
        == (18.0, 0.5, 35.6)
    assert round(jpi["ratio"] - 1, 3) == 0.055 and jpi["diff_lo"] > 0
    readme = (COMPARE / "README.md").read_text()
    for text in ("+18.0 [0.5, 35.6]", "2,234 [2,096, 2,371]", "+0.0087 [0.0042, 0.0132] (+5.5 %)"):
        assert text in readme, text


def test_sensor_readme_shift_is_the_table_s() -> None:
    """The README's 'about 18-22 ms of its power' for 200 ms-2 s phases: the mean loss per phase
    over the truth's power, in ms."""
    t = pd.read_csv(SENSOR / "sensor_phase_length.csv").set_index("L_ms")
    lost_ms = (-t["integrated_err_mean_pct"] / 100 * t["length_ms_mean"]).round(1)
    assert lost_ms.loc[200.0:2000.0].between(18.0, 22.5).all()
    assert (lost_ms.loc[100.0], lost_ms.loc[10.0]) == (12.4, 5.3)
    readme = (SENSOR / "README.md").read_text()
    assert "about 18–22 ms of its power" in readme
    assert "(12.4 ms at 100 ms, 5.3 ms at 10 ms)" in readme
