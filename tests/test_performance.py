"""Throughput bases in the performance table (hand-made summaries and events)."""

import pandas as pd
import pytest

from wattlife.analysis.performance import (
    PERFORMANCE_COLUMNS,
    performance_table,
    step_throughput_from_events,
)


def _events(durations_s, items=100.0):
    t, rows = 0, []
    for d in durations_s:
        rows.append({"phase": "step", "rank": 0, "start_ns": t, "end_ns": t + int(d * 1e9),
                     "items": items})
        rows.append({"phase": "forward", "rank": 0, "start_ns": t, "end_ns": t + 1, "items": None})
        t += int(d * 1e9) + int(5e9)  # a pause between steps is in no step
    return pd.DataFrame(rows)


def test_step_throughput_leaves_out_warmup_and_pauses():
    ev = _events([10.0, 10.0, 10.0, 1.0, 1.0, 2.0])
    assert step_throughput_from_events(ev) == pytest.approx(300 / 4.0)
    assert step_throughput_from_events(ev, warmup=0) == pytest.approx(600 / 34.0)
    assert step_throughput_from_events(ev.iloc[:0]) is None


def test_every_row_names_its_basis():
    new = {"task": "pretrain", "compile": True, "experts_impl": "grouped_mm", "throughput": 80.0,
           "throughput_basis": "step", "throughput_wall": 20.0,
           "throughput_unit": "tokens/s (all ranks)",
           "mfu": 0.4, "mfu_wall": 0.1, "experts": 8}
    rerun = {"task": "lora", "throughput": 50.0, "throughput_window": 40.0, "mfu": 0.2,
             "throughput_unit": "tokens/s (all ranks)"}
    # written before pauses left the step clock: its throughput is the `wall` one
    old = {"task": "pretrain", "throughput": 50.0, "mfu": 0.25, "experts": 8,
           "throughput_unit": "tokens/s (all ranks)"}
    df = performance_table([("a", "m", new), ("b", "m", rerun),
                            ("c", "m", old, _events([1, 1, 1, 1, 1]))])
    assert list(df.columns) == PERFORMANCE_COLUMNS
    assert set(df["basis"]) == {"step", "wall"} and df["throughput_unit"].eq("tokens/s").all()
    a = df[df["run"] == "a"].set_index("basis")
    assert a.loc["step", "throughput"] == 80 and a.loc["wall", "mfu"] == 0.1
    assert a.loc["step", "experts_impl"] == "grouped_mm" and bool(a.loc["step", "compile"])
    b = df[df["run"] == "b"].set_index("basis")
    assert b.loc["wall", "throughput"] == 40 and b.loc["wall", "mfu"] == pytest.approx(0.16)
    c = df[df["run"] == "c"].set_index("basis")
    assert c.loc["wall", "throughput"] == 50 and c.loc["step", "throughput"] == pytest.approx(100)
    assert c.loc["step", "mfu"] == pytest.approx(0.5)
    assert c.loc["step", "experts_impl"] == "unrecorded"
    # without events an old summary gives only its `wall` row
    assert list(performance_table([("c", "m", old)])["basis"]) == ["wall"]


def test_aggregated_phase_rows_carry_the_throughput_basis(tmp_path):
    import json

    from wattlife.analysis.aggregate import collect_phases

    cell = tmp_path / "qwen-local-ckpton"
    (cell / "work").mkdir(parents=True)
    pd.DataFrame({"run_id": ["x"], "phase": ["forward"], "device_kind": ["gpu"], "device": ["gpu0"],
                  "energy_j": [1.0], "energy_lo_j": [0.9], "energy_hi_j": [1.1], "time_s": [1.0],
                  "count": [1], "mean_power_w": [1.0], "method": ["integrate"],
                  "source": ["nvml-samples"]}).to_csv(cell / "phases.csv", index=False)
    (cell / "work" / "summary.json").write_text(json.dumps(
        {"throughput": 10.0, "throughput_unit": "tokens/s (all ranks)", "throughput_basis": "step",
         "throughput_wall": 8.0}))
    df = collect_phases([cell / "phases.csv"])
    assert df.loc[0, "throughput_basis"] == "step" and df.loc[0, "throughput_wall"] == 8.0
