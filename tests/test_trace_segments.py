"""PFI trace segmentation: warm-up / start-up / training / tail from GPU telemetry."""

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.trace_segments import partition_trace, training_aggregates

S = 1_000_000_000


def _trace() -> pd.DataFrame:
    """0-10 s idle (1 GiB used), 10-20 s model loaded but GPU mostly idle, 20-80 s training at
    600 W, 80-90 s tail. Telemetry every second, power every 100 ms."""
    rows = []
    for s in range(91):
        t = 1_000 * S + s * S
        mem = 1 << 30 if s < 10 else 40 << 30
        util = 95.0 if 20 <= s <= 80 else (10.0 if s >= 10 else 0.0)
        rows += [(t, "gpu0", "mem_used_b", mem), (t, "gpu0", "util_gpu", util),
                 (t, "gpu0", "util_mem", 40.0 if 20 <= s <= 80 else 0.0),
                 (t, "gpu0", "dram_active", 0.5 if 20 <= s <= 80 else 0.0)]
    for k in range(901):
        t = 1_000 * S + k * S // 10
        rows.append((t, "gpu0", "power_w", 600.0 if 20 * S <= k * S // 10 <= 80 * S else 100.0))
    df = pd.DataFrame(rows, columns=["t_ns", "device", "metric", "value"])
    df["host"], df["source"] = "h", "nvml-samples"
    return df


def test_segments_follow_memory_then_utilisation():
    seg = partition_trace(_trace()).set_index("segment")
    rel = (seg[["start_ns", "end_ns"]] - 1_000 * S) / S
    assert rel.loc["warmup"].tolist() == [0, 10]
    assert rel.loc["startup"].tolist() == [10, 20]
    assert rel.loc["training"].tolist() == [20, 80]
    assert rel.loc["tail"].tolist() == [80, 90]


def test_aggregates_cover_training_only():
    tr = _trace()
    agg = training_aggregates(tr, partition_trace(tr)).iloc[0]
    assert agg["training_s"] == 60
    assert agg["mean_power_w"] == pytest.approx(600.0, rel=0.01)
    assert agg["dram_copy_product"] == pytest.approx(0.5 * 40 / 100)
    assert agg["source"] == "nvml-samples"


def test_a_gpu_that_never_trains_has_no_training_segment():
    tr = _trace()
    util = tr["metric"] == "util_gpu"
    tr.loc[util, "value"] = np.minimum(tr.loc[util, "value"], 20)
    seg = partition_trace(tr)
    assert "training" not in set(seg["segment"])
    assert training_aggregates(tr, seg).empty
    with pytest.raises(ValueError, match="util_gpu"):
        partition_trace(tr[tr["metric"] != "util_gpu"])


def test_training_energy_is_the_attribution_integral_over_the_segments_readings():
    """One integration in the package: the training energy is the left-open rectangle sum of the
    power readings inside the segment (each reading the mean since the previous one)."""
    tr = _trace()
    rng = np.random.default_rng(1)
    p = tr["metric"] == "power_w"
    tr.loc[p, "value"] += rng.normal(0, 30, int(p.sum()))
    seg = partition_trace(tr)
    agg = training_aggregates(tr, seg).iloc[0]
    s = seg.set_index("segment").loc["training"]
    r = tr[p & tr["t_ns"].between(s["start_ns"], s["end_ns"])].sort_values("t_ns")
    t, w = r["t_ns"].to_numpy(), r["value"].to_numpy()
    want = float(np.sum(w[1:] * np.diff(t) / 1e9))
    assert agg["energy_j"] == pytest.approx(want, rel=1e-12)
    assert agg["mean_power_w"] == pytest.approx(want / ((t[-1] - t[0]) / 1e9), rel=1e-12)
