"""Throughput bases in the performance table, rebuilt from events (hand-made summaries and
events): `step` = the steady steps' items over their summed (GPU-timed) durations, `wall` = the
loop's span in the events, MFU on both attention conventions."""

import pandas as pd
import pytest

from wattlife.analysis.performance import (
    PERFORMANCE_COLUMNS,
    performance_table,
    step_throughput_from_events,
    wall_throughput_from_events,
)


def _events(durations_s, items=100.0, clock="cuda"):
    t, rows = 0, []
    for d in durations_s:
        rows.append({"phase": "step", "rank": 0, "start_ns": t, "end_ns": t + int(d * 1e9),
                     "items": items, "clock": clock})
        rows.append({"phase": "forward", "rank": 0, "start_ns": t, "end_ns": t + 1, "items": None,
                     "clock": clock})
        t += int(d * 1e9) + int(5e9)  # a pause between steps is in no step
    rows.append({"phase": "finalize", "rank": 0, "start_ns": t, "end_ns": t + int(1e9),
                 "items": None, "clock": "host"})
    return pd.DataFrame(rows)


def test_step_throughput_leaves_out_warmup_and_pauses():
    ev = _events([10.0, 10.0, 10.0, 1.0, 1.0, 2.0])
    assert step_throughput_from_events(ev) == pytest.approx(300 / 4.0)
    assert step_throughput_from_events(ev, world=2) == pytest.approx(600 / 4.0)
    # 5 steps or fewer: no steady part to single out, every step counts
    assert step_throughput_from_events(_events([2.0, 1.0, 1.0])) == pytest.approx(300 / 4.0)
    assert step_throughput_from_events(ev.iloc[:0]) is None
    # wall: the loop from the first step's start to finalize, pauses and warm-up included
    assert wall_throughput_from_events(ev) == pytest.approx(600 / (34.0 + 6 * 5.0))


def test_every_row_names_its_basis_clock_and_both_mfu_conventions():
    summ = {"task": "pretrain", "compile": True, "experts_impl": "grouped_mm",
            "throughput_unit": "tokens/s (all ranks)", "flops_per_token": 1000.0,
            "attention_flops_per_token": 200.0, "peak_flops_per_gpu": 1e5, "experts": 8}
    ev = _events([10.0, 10.0, 10.0, 1.0, 1.0, 2.0])
    old = {k: v for k, v in summ.items() if k != "attention_flops_per_token"}
    df = performance_table([("a", "m", summ, ev), ("b", "m", old, ev, 400.0),
                            ("c", "m", summ, ev[ev["phase"] != "step"])])
    assert list(df.columns) == PERFORMANCE_COLUMNS
    assert list(df["run"]) == ["a", "a", "b", "b"]  # no step rows in c's events: no row
    a = df[df["run"] == "a"].set_index("basis")
    assert a.loc["step", "throughput"] == pytest.approx(75.0) and a.loc["step", "clock"] == "cuda"
    assert a.loc["step", "mfu"] == pytest.approx(75.0 * 1000 / 1e5)
    assert a.loc["step", "mfu_causal"] == pytest.approx(75.0 * 900 / 1e5)
    b = df[df["run"] == "b"].set_index("basis")
    assert b.loc["step", "mfu_causal"] == pytest.approx(75.0 * 800 / 1e5)
    assert b.loc["wall", "mfu"] == pytest.approx(b.loc["wall", "throughput"] * 1000 / 1e5)


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
