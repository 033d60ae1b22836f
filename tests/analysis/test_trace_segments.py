"""PFI trace segmentation: the steady-state window from step events, else from the telemetry
detector (not the first reading above a utilisation threshold), and the study's top-10 %."""

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.trace_segments import (
    partition_trace,
    post_warmup_power,
    training_aggregates,
)

S = 1_000_000_000
T0 = 1_000 * S


def _power_at(sec: float) -> float:
    """0-10 s idle, 10-30 s compiling (busy-looking utilisation, low power), 30-80 s training at
    600 W with a checkpoint at 50-55 s, 80-90 s tail."""
    if 30 <= sec < 80 and not 50 <= sec < 55:
        return 600.0
    return 220.0 if 10 <= sec < 30 else (150.0 if 50 <= sec < 55 else 100.0)


def _trace() -> pd.DataFrame:
    """Telemetry every second, power every 100 ms (each reading the mean of the 100 ms before)."""
    rows = []
    for s in range(91):
        t = T0 + s * S
        mem = 1 << 30 if s < 10 else 40 << 30
        util = 95.0 if 30 <= s <= 80 else (60.0 if s >= 10 else 0.0)
        rows += [(t, "gpu0", "mem_used_b", mem), (t, "gpu0", "util_gpu", util),
                 (t, "gpu0", "util_mem", 40.0 if 30 <= s <= 80 else 0.0),
                 (t, "gpu0", "dram_active", 0.5 if 30 <= s <= 80 else 0.0)]
    for k in range(901):
        rows.append((T0 + k * S // 10, "gpu0", "power_w", _power_at((k - 0.5) / 10)))
    df = pd.DataFrame(rows, columns=["t_ns", "device", "metric", "value"])
    df["host"], df["source"] = "h", "nvml-samples"
    return df


def _events() -> pd.DataFrame:
    """1 s steps from 30 s to 80 s, a checkpoint at 50-55 s instead of steps."""
    rows = [("step", T0 + k * S, T0 + (k + 1) * S, 10.0) for k in range(30, 80)
            if not 50 <= k < 55]
    rows.append(("checkpoint", T0 + 50 * S, T0 + 55 * S, np.nan))
    return pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "local_rank": 0,
                         "phase": [r[0] for r in rows], "start_ns": [r[1] for r in rows],
                         "end_ns": [r[2] for r in rows], "step": 0, "items": [r[3] for r in rows]})


def _rel(seg, name):
    rows = seg[seg["segment"] == name]
    return ((rows[["start_ns", "end_ns"]] - T0) / S).to_numpy().tolist()


def test_without_events_the_detector_skips_compilation_and_the_checkpoint():
    """Before: training began at 10 s, the first reading with utilisation >= 50 %, so its mean
    power held 20 s of compilation."""
    tr = _trace()
    seg = partition_trace(tr)
    assert set(seg["method"]) == {"telemetry"}
    assert _rel(seg, "warmup") == [[0, 10]]
    (a0, b0), (a1, b1) = _rel(seg, "training")
    # the centred 5 s mean trims each edge inward by at most half a window
    assert 30 <= a0 <= 32.5 and 47.5 <= b0 <= 50 and 55 <= a1 <= 57.5 and 77.5 <= b1 <= 80
    assert len(_rel(seg, "pause")) == 1
    agg = training_aggregates(tr, seg).iloc[0]
    assert agg["mean_power_w"] == pytest.approx(600.0, rel=0.05)
    assert agg["windows"] == 2 and agg["dram_copy_product"] == pytest.approx(0.5 * 40 / 100)
    assert agg["top10_power_w"] == pytest.approx(600.0) and agg["source"] == "nvml-samples"


def test_with_events_the_window_is_the_steady_steps_after_warmup_and_outside_the_checkpoint():
    tr, ev = _trace(), _events()
    seg = partition_trace(tr, ev)
    assert set(seg["method"]) == {"steps"}
    assert _rel(seg, "training") == [[33, 50], [55, 80]]  # the first 3 steps are warm-up
    assert _rel(seg, "startup") == [[10, 33]] and _rel(seg, "pause") == [[50, 55]]
    agg = training_aggregates(tr, seg).iloc[0]
    steady = post_warmup_power(tr, ev).iloc[0]
    assert steady["steady_steps"] == 42 and steady["steady_s"] == pytest.approx(42.0)
    assert steady["steady_mean_power_w"] == pytest.approx(600.0, rel=1e-3)
    assert agg["mean_power_w"] == pytest.approx(steady["steady_mean_power_w"], rel=0.05)


def test_a_gpu_that_never_trains_has_no_training_segment():
    tr = _trace()
    p = tr["metric"] == "power_w"
    tr.loc[p, "value"] = 100.0 + np.random.default_rng(0).normal(0, 3, int(p.sum()))
    seg = partition_trace(tr)
    assert "training" not in set(seg["segment"])
    assert training_aggregates(tr, seg).empty
    with pytest.raises(ValueError, match="power_w"):
        partition_trace(tr[tr["metric"] != "power_w"])


def test_training_energy_is_the_attribution_integral_over_the_segments_readings():
    """One integration in the package: the training energy is the left-open rectangle sum of the
    power readings inside each training row (each reading the mean since the previous one)."""
    tr = _trace()
    rng = np.random.default_rng(1)
    p = tr["metric"] == "power_w"
    tr.loc[p, "value"] += rng.normal(0, 30, int(p.sum()))
    seg = partition_trace(tr, _events())
    agg = training_aggregates(tr, seg).iloc[0]
    want, secs = 0.0, 0.0
    for s in seg[seg["segment"] == "training"].itertuples():
        r = tr[p & tr["t_ns"].between(s.start_ns, s.end_ns)].sort_values("t_ns")
        t, w = r["t_ns"].to_numpy(), r["value"].to_numpy()
        want += float(np.sum(w[1:] * np.diff(t) / 1e9))
        secs += (t[-1] - t[0]) / 1e9
    assert agg["energy_j"] == pytest.approx(want, rel=1e-12)
    assert agg["mean_power_w"] == pytest.approx(want / secs, rel=1e-12)
