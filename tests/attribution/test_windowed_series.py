"""A device's series kept on disk and read a window of readings at a time (issue 43:
`windowed.WindowedSeries`, `SpilledTrace(window=...)`) against the in-memory series and the
in-memory path's phases table, bit for bit: windows of 2 readings up, phases crossing window
edges, deconvolved short phases, duplicate timestamps, an energy counter, sensor gaps at a
window edge, two ranks, an unclaimed GPU, the idle split and the settling's intervals; energy
conserved over any window size; and what an edge handled wrongly would change."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import T0, averaging_sensor, events_frame
from wattlife.attribution import windowed
from wattlife.attribution.chunked import SpilledTrace
from wattlife.attribution.energy import attribute_energy
from wattlife.attribution.gaps import sensor_gaps
from wattlife.attribution.series import DeviceSeries, device_series
from wattlife.attribution.settle import KNOWN, boundary_steps
from wattlife.attribution.windowed import WindowedSeries, pairwise_sum
from wattlife.contracts import TRACE_COLUMNS, UNATTRIBUTED

MS = 1_000_000
H100 = KNOWN["NVIDIA H100 80GB HBM3"]


def _rank(n: int, rank: int, step_ms: int = 110) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """`n` steps (data_load, a 9 ms forward, backward, a 6 ms optimizer) and a checkpoint across
    many windows; the events and the true power (edges, levels)."""
    rows, edges, power = [], [T0], [100.0]
    t = T0 + 230 * MS + rank * 3 * MS
    for i in range(n):
        s = t + i * step_ms * MS
        for name, a, b, w in (("data_load", 0, 25, 150.0), ("forward", 25, 34, 520.0),
                              ("backward", 34, 88, 640.0), ("optimizer", 88, 94, 380.0)):
            rows.append((name, s + a * MS, s + b * MS))
            edges.append(s + a * MS)
            power.append(w)
        rows.append(("step", s, s + 94 * MS))
        edges.append(s + 94 * MS)
        power.append(100.0)
    c = t + n * step_ms * MS
    rows.append(("checkpoint", c, c + 700 * MS))
    edges += [c, c + 700 * MS, c + 1000 * MS]
    power += [220.0, 100.0]
    ev = events_frame([(a, int(b), int(c)) for a, b, c in rows], rank=rank)
    return ev.assign(local_rank=rank), np.array(edges, np.int64), np.array(power)


def _trace(n_steps: int = 40, seed: int = 0, gap: tuple[int, int] | None = (90, 97)
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two ranks' GPUs (20 ms power readings with jitter, a duplicate timestamp, a power limit,
    a sensor gap), an unclaimed busy GPU, a CPU energy counter with a gap, DRAM power."""
    rng = np.random.default_rng(seed)
    parts, evs = [], []
    for rank in (0, 1):
        ev, edges, power = _rank(n_steps, rank)
        evs.append(ev)
        n = int((edges[-1] - T0) / (20 * MS))
        t = T0 + 5 * MS + np.arange(n, dtype=np.int64) * 20 * MS + rng.integers(0, MS, n)
        t = t[t < edges[-1]]
        p = averaging_sensor(edges, power, t, 20 * MS) + rng.normal(0, 3.0, len(t))
        if gap is not None:
            keep = np.r_[0:gap[0], gap[1]:len(t)]
            t, p = t[keep], p[keep]
        parts.append(pd.DataFrame({"t_ns": t, "device": f"gpu{rank}", "metric": "power_w",
                                   "value": p, "source": "nvml-samples"}))
    t = parts[0]["t_ns"].to_numpy()
    busy = 400 + rng.normal(0, 20, len(t))
    parts.append(pd.DataFrame({"t_ns": t, "device": "gpu2", "metric": "power_w",
                               "value": busy, "source": "nvml-samples"}))
    tc = np.r_[t[:30], t[45:]]  # a gap in the counter
    parts.append(pd.DataFrame({"t_ns": tc, "device": "cpu0", "metric": "energy_j",
                               "value": 5e4 + np.cumsum(rng.uniform(2, 5, len(tc))),
                               "source": "rapl"}))
    parts.append(pd.DataFrame({"t_ns": t, "device": "dram0", "metric": "power_w",
                               "value": 20 + rng.normal(0, 1, len(t)), "source": "rapl"}))
    parts.append(pd.DataFrame({"t_ns": t[:1], "device": "gpu0", "metric": "power_limit_w",
                               "value": [700.0], "source": "nvml-poll"}))
    dup = parts[0].iloc[[57, 58]].assign(value=[999.0, 5.0])  # repeated times: the last counts
    dup["t_ns"] = dup["t_ns"].iloc[0]
    tr = pd.concat([*parts, dup], ignore_index=True).sort_values("t_ns", kind="stable")
    return tr.assign(host="h")[TRACE_COLUMNS], pd.concat(evs, ignore_index=True)


def _attribute(trace: pd.DataFrame | SpilledTrace, ev: pd.DataFrame, **kw) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return attribute_energy(trace, ev, n_boot=10, idle_window=(T0, T0 + 200 * MS),
                                settles={"gpu0": H100, "gpu1": H100}, **kw)


def _spill(tmp_path: Path, tr: pd.DataFrame, window: int) -> SpilledTrace:
    p = tmp_path / "trace.csv"
    tr.to_csv(p, index=False)
    return SpilledTrace(p, spill_dir=tmp_path, batch_bytes=4096, window=window)


@pytest.mark.parametrize("window", [2, 7, 64, 10**6])
@pytest.mark.parametrize("method", ["auto", "integrate", "deconvolve"])
def test_windowed_attribution_is_the_in_memory_table_bit_for_bit(tmp_path, window, method):
    tr, ev = _trace()
    memory = _attribute(tr, ev, method=method)
    with _spill(tmp_path, tr, window) as spill:
        assert all(isinstance(s, WindowedSeries) for s in spill)
        assert len(spill[0].starts) > 4 or window > 1000  # many windows
        got = _attribute(spill, ev, method=method)
    if method != "integrate":
        assert "deconvolve" in set(got["method"])
    else:
        assert got["settle_j"].notna().any()
    assert (got["gap_s"] > 0).any()
    pd.testing.assert_frame_equal(got, memory, check_exact=True)


@pytest.mark.parametrize("window", [3, 64])
def test_readings_out_of_time_order_are_sorted_on_disk(tmp_path, window):
    """Every device's readings written out of time order (blocks of the file swapped, repeated
    timestamps among them): each series is still kept on disk, put in time order by the
    external sort (`time_sort`, ties in file order), and the table is the in-memory one."""
    tr, ev = _trace()
    rng = np.random.default_rng(5)
    blocks = np.array_split(np.arange(len(tr)), 40)
    tr = tr.iloc[np.concatenate([blocks[k] for k in rng.permutation(len(blocks))])]
    assert not tr.groupby("device")["t_ns"].is_monotonic_increasing.any()
    memory = _attribute(tr, ev)
    with _spill(tmp_path, tr, window) as spill:
        assert all(isinstance(s, WindowedSeries) for s in spill)
        got = _attribute(spill, ev)
    pd.testing.assert_frame_equal(got, memory, check_exact=True)


def _whole(s: DeviceSeries) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    n = len(s.t_ns)
    return s.t_ns[0:n], s.energy_j[0:n], None if s.power_w is None else s.power_w[0:n]


@pytest.mark.parametrize("window", [2, 5, 33])
def test_a_windowed_series_is_the_in_memory_series(tmp_path, window):
    """Readings, E, every whole pass (spacing, mean, std, bounds), E at any time (before the
    first reading, on readings, between, after the last), gaps and settling steps."""
    tr, _ = _trace()
    memory = {(s.host, s.device): s for s in device_series(tr)}
    rng = np.random.default_rng(3)
    with _spill(tmp_path, tr, window) as spill:
        for s in spill:
            m = memory[(s.host, s.device)]
            for a, b in zip(_whole(s), _whole(m), strict=True):
                np.testing.assert_array_equal(a, b, strict=True)
            for f in ("spacing_s", "upper_w", "floor_w", "max_power_w", "source"):
                assert getattr(s, f) == getattr(m, f), f
            assert s.power_std() == m.power_std()
            if m.power_w is not None:
                assert (s.p_min(), s.p_max()) == (m.p_min(), m.p_max())
                assert s.p_mean() == m.p_mean() and s.p_mean(1) == m.p_mean(1)
            t = m.t_ns
            x = np.concatenate([t[::7], t[::5] + 3 * MS, [t[0] - MS, t[-1], t[-1] + MS],
                                rng.integers(t[0], t[-1], 200)])
            np.testing.assert_array_equal(s.energy_at(x), m.energy_at(x), strict=True)
            gs, gm = sensor_gaps(s), sensor_gaps(m)
            for f in ("start_ns", "end_ns", "at_ns", "seconds", "joules"):
                np.testing.assert_array_equal(getattr(gs, f), getattr(gm, f), strict=True)
            np.testing.assert_array_equal(boundary_steps(s, x, 73.7), boundary_steps(m, x, 73.7))
    assert (sensor_gaps(memory[("h", "gpu0")]).total_s > 0
            and sensor_gaps(memory[("h", "cpu0")]).total_s > 0)


@pytest.mark.parametrize("n", [2, 3, 1000, 1001])
@pytest.mark.parametrize("window", [1, 4, 97])
def test_the_median_spacing_is_selected_exactly(tmp_path, n, window):
    """Spacings of every digit (ns to days, repeated values, zeros from repeated times), odd
    and even counts: the selection is `np.median`'s value."""
    rng = np.random.default_rng(n + window)
    d = rng.choice([0, 1, 7, 2**21 - 1, 2**21, 20 * MS, 20 * MS + 1, 2**42 + 5, 86_400 * 10**9],
                   n - 1) + rng.integers(0, 3, n - 1)
    t = T0 + np.concatenate([[0], np.cumsum(d)]).astype(np.int64)
    files = tuple(tmp_path / f for f in ("t", "v", "s"))
    for f, x in zip(files, (t, np.cumsum(rng.uniform(1, 2, n)), np.zeros(n, np.int32)),
                    strict=True):
        x.tofile(f)
    s = windowed.windowed_series("h", "cpu0", files, n, ["rapl"], None, tmp_path / "w", window)
    assert s is not None and s.median_dt == float(np.median(np.diff(t)))


def test_pairwise_sum_is_numpys_sum_bit_for_bit():
    x = np.random.default_rng(0).normal(300, 50, 1_000_003)
    for a, b in ((0, len(x)), (1, len(x)), (17, 300_017)):
        assert pairwise_sum(lambda i, j: x[i:j], a, b) == float(np.add.reduce(x[a:b]))


def test_windows_without_the_overlapping_reading_are_wrong(tmp_path, monkeypatch):
    """The one reading each window shares with the next carries a spacing (its gap, its
    E step): windows that do not share it miss the gap across their edge, so the tests above
    would catch an edge handled so."""
    tr, _ = _trace(gap=(90, 97))
    with _spill(tmp_path, tr, 10) as spill:
        s = next(x for x in spill if x.device == "gpu0")
        right = sensor_gaps(s)
        edge = int(np.searchsorted(s.t_ns[0:s.n], right.start_ns[0]))

        def cut(self):  # windows of 10 readings that do not share their last one
            for a in range(0, self.n, 10):
                yield (a, *self.read(a, a + 10))
        monkeypatch.setattr(WindowedSeries, "diff_windows", cut)
        s._median_dt = None
        wrong = sensor_gaps(s)
    assert edge % 10 == 9  # the gap begins on a window's last reading
    assert len(right.start_ns) == 1 and len(wrong.start_ns) == 0


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(window=st.integers(2, 300), n_steps=st.integers(8, 25), seed=st.integers(0, 4),
       method=st.sampled_from(["integrate", "deconvolve"]))
def test_any_window_conserves_energy_and_changes_nothing(tmp_path_factory, window, n_steps,
                                                         seed, method):
    """Any window size: each device's phases + residual + unattributed = its energy, and the
    table is the in-memory one's bit for bit."""
    tr, ev = _trace(n_steps=n_steps, seed=seed)
    memory = _attribute(tr, ev, method=method)
    with _spill(tmp_path_factory.mktemp("w"), tr, window) as spill:
        got = _attribute(spill, ev, method=method)
        totals = {s.device: float(s.energy_j[-1] - s.energy_j[0]) for s in spill}
    pd.testing.assert_frame_equal(got, memory, check_exact=True)
    for dev, g in got.groupby("device"):
        assert np.isclose(g["energy_j"].sum(), totals[dev], rtol=1e-12, atol=1e-9)
        assert UNATTRIBUTED in set(g["phase"])
