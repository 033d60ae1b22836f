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
QWEN = H100 / "workflow-qwen"


def _cells(folder: Path) -> list[Path]:
    return sorted(p.parent for p in (folder / "runs").glob("*/*/*/r*/phases.csv"))


REPEATS_CELLS = _cells(REPEATS)
QWEN_CELLS = _cells(QWEN)
GPU_NAME = "NVIDIA H100 80GB HBM3"


def _gpu(cell: Path) -> pd.DataFrame:
    ph = pd.read_csv(cell / "phases.csv")
    return ph[ph["device_kind"] == "gpu"]


@pytest.mark.parametrize(("folder", "seconds"), [(REPEATS, 391), (QWEN, 527)],
                         ids=["resnet", "qwen"])
def test_matrix_is_complete_and_measured_on_the_h100(folder: Path, seconds: int) -> None:
    cells = _cells(folder)
    assert len(cells) == 12
    for cell in cells:
        meta = json.loads((cell / "meta.json").read_text())
        assert meta["gpu_model"] == GPU_NAME, cell
        assert set(_gpu(cell)["source"]) == {"nvml-samples"}, cell
    assert f"rc=0 in {seconds} s" in (folder / "snakemake.log").read_text()


@pytest.mark.parametrize("cell", REPEATS_CELLS + QWEN_CELLS,
                         ids=lambda c: str(c.relative_to(H100)))
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


TRANSFERS = sorted(p.parent for p in (REPEATS / "transfers").glob("*/phases.csv"))


@pytest.mark.parametrize("xfer", TRANSFERS, ids=lambda c: c.name)
def test_transfers_re_attribute_to_their_committed_table_with_the_settling(tmp_path, xfer):
    """The 6 transfers' GPU (integrated: an idle H100) hold the H100's settling since issue 46's
    follow-up (`attribution.settle`); their phases.csv were re-attributed then: energies as
    written by the pipeline at 5672872, intervals widened (by <= 0.2 J)."""
    from wattlife.attribution import attribute_files

    made = attribute_files(xfer / "trace.csv", xfer / "events.csv", tmp_path / "phases.csv",
                           idle_split=True)
    committed = pd.read_csv(xfer / "phases.csv")
    gpu = committed[committed["device_kind"] == "gpu"]
    assert (gpu["method"] == "integrate").all() and (gpu["settle_ms"] == 24.1).all()
    assert gpu["settle_j"].max() < 0.25
    made = pd.read_csv(tmp_path / "phases.csv")[list(committed.columns)]
    pd.testing.assert_frame_equal(made, committed, check_exact=False, rtol=1e-9, atol=1e-9)


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


def _in_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by the table's text columns (the pipeline lists cells in Snakemake's order)."""
    keys = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    return table.sort_values(keys, kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("folder", [REPEATS, QWEN], ids=["resnet", "qwen"])
def test_phase_tables_are_recomputed_from_the_committed_cells(tmp_path, folder) -> None:
    """The phase tables are what `aggregate` makes of the committed cells (items from the events'
    steady steps; the ResNet-50 tables rebuilt by today's code after the pipeline wrote them at
    5672872, the Qwen ones as the pipeline wrote them at a452ca9; both rebuilt again after the
    zero-length-phase fix re-attributed 12 of their cells)."""
    from wattlife.analysis.aggregate import write_phase_tables

    cells = _cells(folder)
    write_phase_tables([c / "phases.csv" for c in cells], tmp_path,
                       metas=[c / "meta.json" for c in cells],
                       summaries=[c / "work" / "summary.json" for c in cells],
                       events=[c / "events.csv" for c in cells])
    for name in ("phases.csv", "phase_summary.csv", "device_share.csv",
                 "storage_checkpoint.csv", "throughput.csv"):
        made = pd.read_csv(tmp_path / name)
        committed = pd.read_csv(folder / "tables" / name)
        made, committed = _in_order(made[list(committed.columns)]), _in_order(committed)
        pd.testing.assert_frame_equal(made, committed,
                                      check_exact=False, rtol=1e-9, atol=1e-9)


SENSOR = H100 / "sensor"


def test_sensor_tables_are_what_the_raw_files_give(tmp_path) -> None:
    """benchmarks/nvml_sensor.py's analysis, run again on the committed raw trace, events and
    polls, gives the committed spacing, window and phase-length tables."""
    import sys
    import tarfile

    sys.path.insert(0, str(REPO / "benchmarks"))
    from wattlife.analysis.nvml_sensor import analyse_run
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
                 str(REPO / "results/reference/h200/workflow-repeats"), str(QWEN),
                 str(REPO / "results/reference/h200/workflow") + ":qwen"]) == 0
    for name in ("compare_runs.csv", "compare_cells.csv", "sources.csv", "skipped.csv"):
        made, committed = pd.read_csv(tmp_path / name), pd.read_csv(COMPARE / name)
        pd.testing.assert_frame_equal(made, committed, check_exact=False, rtol=1e-9, atol=1e-12)
    cells = pd.read_csv(COMPARE / "compare_cells.csv")
    every = cells[cells["storage"] == "all"]
    pooled = every[every["workload"] == "resnet"].set_index("metric")
    thr, pw, jpi = (pooled.loc[m] for m in ("throughput", "steady_power_w", "j_per_item"))
    assert (round(thr["mean_first"]), round(thr["mean_second"])) == (2234, 2238)
    assert bool(thr["within_noise"]) and not bool(pw["within_noise"])
    assert (round(pw["diff"], 1), round(pw["diff_lo"], 1), round(pw["diff_hi"], 1)) \
        == (18.0, 0.5, 35.6)
    assert round(jpi["ratio"] - 1, 3) == 0.055 and jpi["diff_lo"] > 0
    readme = (COMPARE / "README.md").read_text()
    for text in ("+18.0 [0.5, 35.6]", "2,234 [2,096, 2,371]", "+0.0087 [0.0042, 0.0132] (+5.5 %)"):
        assert text in readme, text
    qwen = every[every["workload"] == "qwen"].set_index("metric")
    assert set(qwen["n_first"]) == {12} and set(qwen["n_second"].dropna()) <= {0, 4}
    q_thr, q_pw, q_j = (qwen.loc[m] for m in ("throughput", "steady_power_w", "j_per_item"))
    assert (round(q_thr["ratio"] - 1, 3), round(q_pw["diff"], 1), round(q_j["ratio"] - 1, 3)) \
        == (-0.093, -36.8, 0.035)
    assert q_thr["diff_hi"] < 0 and q_j["diff_lo"] > 0
    for text in ("| 26,936 [26,238, 27,635] | 29,684 [27,674, 31,694] | −2,748 [−4,610, −886] |",
                 "| 566.7 [554.5, 578.8] | 603.4 [569.7, 637.2] | −36.8 [−68.0, −5.6] |",
                 "9.3 % slower", "3.5 % more GPU energy"):
        assert text in readme, text
    assert not cells[cells["workload"] == "resnet"]["metric"].eq("share:tokenize").any()


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


def test_qwen_readme_numbers_are_what_the_files_give() -> None:
    from wattlife.analysis.performance import step_throughput_from_events
    from wattlife.contracts import read_events

    shares, speeds = [], []
    for cell in QWEN_CELLS:
        g = _gpu(cell)
        run_s = g.loc[g["phase"] != "idle_baseline", "time_s"].sum()
        shares.append(g.loc[g["phase"] == "unattributed", "time_s"].sum() / run_s * 100)
        speeds.append(step_throughput_from_events(read_events(cell / "events.csv")))
    assert (round(min(shares), 2), round(max(shares), 2)) == (0.16, 0.35)
    assert (round(min(speeds)), round(max(speeds))) == (25455, 29022)
    cells = pd.read_csv(QWEN / "tables/throughput.csv")["throughput"]
    assert (round(cells.min()), round(cells.max())) == (26049, 28107)
    table = pd.read_csv(QWEN / "tables/storage_checkpoint.csv")
    assert len(table) == 68 and int(table["significant"].eq(True).sum()) == 10
    ck = table[table["phase"] == "checkpoint"].set_index("storage")
    got = {s: tuple(np.round(ck.loc[s, ["d_energy_j", "d_energy_lo_j", "d_energy_hi_j"]]
                             .to_numpy(float)).astype(int)) for s in ("local", "shared")}
    assert got == {"local": (2778, 2250, 3306), "shared": (3186, 1710, 4663)}
    summary = pd.read_csv(QWEN / "tables/phase_summary.csv")
    gpu = summary[(summary["device_kind"] == "gpu") & (summary["phase"] == "checkpoint")]
    gpu = gpu.set_index("storage")
    assert (round(gpu.loc["local", "energy_j"]), round(gpu.loc["shared", "energy_j"])) \
        == (2015, 2308)
    readme = (QWEN / "README.md").read_text()
    for text in ("0.16–0.35 %", "25,455–29,022 tokens/s", "26,049–28,107", "2,778 J [2,250, 3,306]",
                 "3,186 J\n  [1,710, 4,663]", "10 of the table's 68 effects"):
        assert text in readme, text


PFI = H100 / "pfi-uncapped"
PFI_RUNS = {"pretrain": {"qwen3-30b-a3b-8l-pretrain", "qwen3-1.7b-pretrain"},
            "lora": {"qwen3-30b-a3b-8l-lora", "qwen3-1.7b-lora"}}


@pytest.mark.parametrize("folder", sorted(PFI_RUNS))
def test_pfi_uncapped_table_is_what_the_archived_runs_give(tmp_path, folder) -> None:
    """The H100's compiled 60 s PFI runs: the training window (events) starts after both
    `compile` phases, its power is within 2 % of NVML's energy counter alone over the same rows,
    and the committed window, steady, detector and former-window powers are what the archived
    trace and events give (as the H200's issue-26 test checks its runs)."""
    import sys
    import tarfile

    sys.path.insert(0, str(REPO / "benchmarks"))
    from pfi_uncapped import util50_window_power
    from test_h200_reference import counter_power

    from wattlife.analysis.trace_segments import (
        partition_trace,
        post_warmup_power,
        training_aggregates,
    )
    from wattlife.contracts import read_events, read_trace

    with tarfile.open(PFI / folder / "pfi_uncapped_runs.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    table = pd.read_csv(PFI / folder / "pfi_uncapped.csv").set_index("run")
    assert set(table.index) == PFI_RUNS[folder]
    for run, row in table.iterrows():
        d = tmp_path / str(run)
        assert json.loads((d / "meta.json").read_text())["gpu_model"] == GPU_NAME
        tr, ev = read_trace(d / "trace.csv"), read_events(d / "events.csv")
        segments = partition_trace(tr, ev)
        rows = segments[segments["segment"] == "training"]
        window = training_aggregates(tr, segments).iloc[0]
        detector = training_aggregates(tr, partition_trace(tr)).iloc[0]["mean_power_w"]
        steady = post_warmup_power(tr, ev).iloc[0]["steady_mean_power_w"]
        assert window["method"] == "steps" and (ev["phase"] == "compile").sum() == 2
        assert rows["start_ns"].min() >= ev.loc[ev["phase"] == "compile", "end_ns"].max(), run
        assert window["mean_power_w"] == pytest.approx(counter_power(tr, rows), rel=0.02), run
        assert window["mean_power_w"] == pytest.approx(row["train_mean_power_w"], rel=1e-9)
        assert steady == pytest.approx(row["steady_mean_power_w"], rel=1e-9)
        assert detector == pytest.approx(row["detector_mean_power_w"], rel=1e-9)
        assert util50_window_power(tr) == pytest.approx(row["util50_mean_power_w"], rel=1e-9)


def test_pfi_readme_numbers_are_the_tables() -> None:
    h100 = pd.concat([pd.read_csv(PFI / f / "pfi_uncapped.csv") for f in sorted(PFI_RUNS)])
    h200 = pd.concat([pd.read_csv(REPO / "results/reference/h200/pfi-uncapped" / f /
                                  "pfi_uncapped.csv") for f in ("issue26", "issue26-lora")])
    h100 = h100.set_index("run").sort_index()
    h200 = h200.set_index("run").sort_index()
    slower = (1 - h100["tokens_per_s"] / h200["tokens_per_s"]) * 100
    assert slower.round(1).to_dict() == {
        "qwen3-30b-a3b-8l-pretrain": 7.8, "qwen3-1.7b-pretrain": 2.6,
        "qwen3-30b-a3b-8l-lora": 10.3, "qwen3-1.7b-lora": 4.2}
    assert (h100["train_dram_copy_product"] > h200["train_dram_copy_product"]).all()
    assert (h100["train_over_steady"] - 1).abs().max() < 6e-4
    assert (h100["detector_over_steady"] - 1).abs().max() < 0.009
    low = (1 - h100["util50_mean_power_w"] / h100["steady_mean_power_w"]) * 100
    assert (round(low.min()), round(low.max())) == (10, 32)
    readme = (PFI / "README.md").read_text()
    for run, r in h100.iterrows():
        assert f"{r['tokens_per_s']:,.0f}" in readme, run
        assert f"{r['mfu'] * 100:.1f} % / {r['mfu_causal'] * 100:.1f} %" in readme, run
        assert f"{r['train_mean_power_w']:.1f} W" in readme, run
        assert f"| {r['train_dram_copy_product']:.3f} | {r['train_top10_power_w']:.1f} W |" \
            in readme, run


def test_sensor_call2_tables_and_readme_numbers(tmp_path) -> None:
    """Call 2 of the sensor script on the H100 (full length): its tables from its raw files, and
    the README's numbers from its tables."""
    import tarfile

    from wattlife.analysis.nvml_sensor import analyse_run
    from wattlife.contracts import read_trace

    base = SENSOR / "call-2"
    with tarfile.open(base / "sensor_raw.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    summary = json.loads((base / "summary.json").read_text())
    assert summary["gpu"] == GPU_NAME and summary["dropped_lengths_ms"] == []
    polls_all = pd.read_csv(tmp_path / "polls.csv.gz")
    polls = {str(k): g for k, g in polls_all.groupby("poller", sort=False)}
    trace = read_trace(tmp_path / "trace.csv.gz")
    tables, _ = analyse_run(trace[trace["device"] == "gpu0"], pd.read_csv(tmp_path / "events.csv"),
                            polls, {"gpu": GPU_NAME}, int(summary["args"]["n_boot"]), 800.0)
    for name, file in (("spacing", "sensor_spacing.csv"), ("window", "sensor_window.csv"),
                       ("lengths", "sensor_phase_length.csv")):
        committed = pd.read_csv(base / file)
        num = [c for c in committed.columns if pd.api.types.is_float_dtype(committed[c])]
        pd.testing.assert_frame_equal(tables[name].reset_index(drop=True)[num].astype(float),
                                      committed[num], check_exact=False, rtol=1e-6, atol=1e-9)
    window = pd.read_csv(base / "sensor_window.csv").set_index("direction")
    assert tuple(window["window_ms"].round(2)) == (43.25, 34.5, 38.25)
    t = pd.read_csv(base / "sensor_phase_length.csv").set_index("L_ms")
    lost_ms = -t["integrated_err_mean_pct"] / 100 * t["length_ms_mean"]
    assert lost_ms.loc[200.0:5000.0].between(18.5, 25.0).all()
    assert (round(lost_ms.loc[100.0], 1), round(lost_ms.loc[10.0], 1)) == (12.2, 5.4)
    assert (t.loc[:5000.0, "coverage_truth"] == 0).all()
    assert t["coverage_truth_settle"].between(0.94, 1.0).all()
    assert summary["settle"]["displaced_ms"] == 23.5
    readme = (SENSOR / "README.md").read_text()
    for text in ("**Averaging window 38.25 ms**", "19–25 ms of its\n  power for 200 ms to 5 s",
                 "holds the truth for 94–100 % of\n  the phases",
                 "(12.2 ms at 100 ms, 5.4 ms at 10 ms)"):
        assert text in readme, text


def test_h100_performance_table_lists_every_committed_h100_run() -> None:
    """results/reference/h100/performance.csv is what benchmarks/performance_csv.py makes of
    every committed H100 workload run (24 workflow cells, 12 more in workflow-repeats-2's
    archive, 4 PFI runs; the sealed attempts under `attempts/` are the same runs, not counted
    again), each row the H100's own name."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from performance_csv import build

    made = build([H100])
    committed = pd.read_csv(H100 / "performance.csv")
    pd.testing.assert_frame_equal(made[list(committed.columns)], committed, check_exact=False,
                                  rtol=1e-5, atol=1e-9, check_dtype=False)
    assert committed["run"].nunique() == 40 and set(committed["gpu_model"]) == {GPU_NAME}
    assert not committed["run"].str.contains("attempts/").any()


def test_gpu_compare_takes_named_workloads_and_says_which_roots_are_missing(tmp_path) -> None:
    """`ROOT:qwen` takes only that workload's runs (h200/workflow's older ResNet-50 run stays out
    of the repeats' comparison); a root not there yet (h100/workflow-qwen before its call) is a
    row of skipped.csv, not an error; run names carry the GPU folder (h100/... vs h200/...)."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_compare import collect, parse_root, run_dirs

    root, only = parse_root(str(REPO / "results/reference/h200/workflow") + ":qwen")
    assert only == {"qwen"}
    qwen = run_dirs(root, only)
    assert len(qwen) == 4 and all(r.relative_to(root).parts[1] == "qwen" for r in qwen)
    assert len(run_dirs(root, None)) == 8
    assert parse_root("a/b") == (Path("a/b"), None)
    with pytest.raises(SystemExit, match="no workload after"):
        parse_root("a/b:")
    runs, skipped, sources = collect([str(tmp_path / "h100/workflow-qwen")])
    assert len(runs) == 0 and len(sources) == 0
    assert skipped["missing"].str.contains("no such folder").all() and len(skipped) == 1
    labels = pd.read_csv(COMPARE / "compare_runs.csv").groupby("gpu_model")["run"].first()
    assert labels.str.split("/").str[0].to_dict() == {GPU_NAME: "h100", "NVIDIA H200": "h200"}
