"""Two GPU models side by side (analysis.gpu_compare): per-run figures with known answers, and the
per-cell comparison's intervals."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from synth import T0, events_frame, trace_frame
from wattlife.analysis.gpu_compare import compare_cells, phase_shares, run_row

S = 1_000_000_000


def _run(power_w: float, step_s: float, items: int = 100, n_steps: int = 10,
         idle_w: float = 80.0) -> tuple[dict, dict, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A run at constant `power_w` while its `n_steps` steps of `step_s` seconds train."""
    t0 = T0 + 2 * S
    rows = [("step", t0 + int(k * step_s * S), t0 + int((k + 1) * step_s * S))
            for k in range(n_steps)]
    ev = events_frame(rows)
    ev["items"] = items
    t = np.arange(T0, t0 + int((n_steps * step_s + 1) * S), 20_000_000, dtype=np.int64)
    p = np.where(t < t0, idle_w, power_w)
    cum = np.concatenate([[0.0], np.cumsum(p[1:] * np.diff(t) / 1e9)])
    trace = pd.concat([trace_frame(t, p), trace_frame(t, cum, metric="energy_j",
                                                      source="nvml-counter")])
    phases = pd.DataFrame({"phase": ["idle_baseline", "forward", "backward", "step"],
                           "device_kind": "gpu", "energy_j": [80.0, 300.0, 600.0, 100.0],
                           "time_s": [1.0, 1.0, 2.0, 0.5], "source": "nvml-samples"})
    meta = {"gpu_model": "GPU A", "cell": {"workload": "w", "storage": "local",
                                           "checkpoint": "on", "repeat": "1"},
            "idle_baseline": {"start_ns": T0, "end_ns": T0 + S}}
    summary = {"throughput_unit": "tokens/s (all ranks)", "flops_per_token": 1e9,
               "attention_flops_per_token": 2e8, "peak_flops_per_gpu": 1e12, "world_size": 1}
    return meta, summary, ev, trace, phases


def test_run_row_known_answers() -> None:
    row = run_row(*_run(power_w=500.0, step_s=0.25), run="r1")
    # 7 steady steps (3 warm-up left out) of 100 items in 0.25 s each
    assert row["throughput"] == pytest.approx(400.0)
    assert row["mfu"] == pytest.approx(400 * 1e9 / 1e12)
    assert row["mfu_causal"] == pytest.approx(400 * (1e9 - 1e8) / 1e12)
    assert row["steady_power_w"] == pytest.approx(500.0, rel=1e-6)
    assert row["j_per_item"] == pytest.approx(500.0 * 0.25 / 100, rel=1e-6)
    assert row["idle_w"] == pytest.approx(80.0)
    assert row["gpu_model"] == "GPU A" and row["workload"] == "w"


def test_phase_shares_leave_out_idle_baseline_and_sum_to_one() -> None:
    *_, phases = _run(500.0, 0.25)
    shares = phase_shares(phases)
    assert set(shares) == {"share:forward", "share:backward", "share:step"}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["share:backward"] == pytest.approx(0.6)


def _runs(model: str, powers: list[float]) -> list[dict]:
    out = []
    for k, pw in enumerate(powers):
        meta, summary, ev, trace, phases = _run(pw, 0.25)
        meta = {**meta, "gpu_model": model, "cell": {**meta["cell"], "repeat": str(k + 1)}}
        out.append(run_row(meta, summary, ev, trace, phases, run=f"{model}/{k}"))
    return out


def test_compare_cells_difference_and_noise() -> None:
    runs = pd.DataFrame(_runs("A", [500, 510, 490]) + _runs("B", [400, 405, 395]))
    cells = compare_cells(runs, "A", "B")
    pw = cells[cells["metric"] == "steady_power_w"].iloc[0]
    assert pw["n_first"] == 3 and pw["n_second"] == 3
    assert pw["diff"] == pytest.approx(100.0, rel=1e-3)
    assert pw["diff_lo"] > 0 and pw["within_noise"] == False  # noqa: E712 (numpy bool)
    assert pw["ratio"] == pytest.approx(500 / 400, rel=1e-3)
    thr = cells[cells["metric"] == "throughput"].iloc[0]
    assert thr["within_noise"]  # equal speeds: the interval spans zero (sd 0: a point at 0)


def test_compare_cells_single_run_has_no_interval() -> None:
    runs = pd.DataFrame(_runs("A", [500, 510]) + _runs("B", [400]))
    pw = compare_cells(runs, "A", "B").query("metric == 'steady_power_w'").iloc[0]
    assert pw["n_second"] == 1 and math.isnan(pw["lo_second"])
    assert pw["within_noise"] is None and math.isnan(pw["diff_lo"])


def test_compare_cells_pools_a_workloads_cells() -> None:
    a = _runs("A", [500, 510])
    a[1] = {**a[1], "storage": "shared"}  # two cells of one run each, pooled: n = 2
    runs = pd.DataFrame(a + _runs("B", [400, 405]))
    cells = compare_cells(runs, "A", "B").query("metric == 'steady_power_w'")
    pooled = cells[cells["storage"] == "all"].iloc[0]
    assert pooled["checkpoint"] == "all" and pooled["n_first"] == 2
    assert pooled["mean_first"] == pytest.approx(505.0, rel=1e-3)
    assert set(cells["storage"]) == {"local", "shared", "all"}
