"""Sensor gaps: a backend that stops answering for a window (NVML_ERROR_GPU_IS_LOST on the
simulated GPU, a failing read on the CPU estimate) leaves a hole in the trace that attribution
never fills silently: the phases it touches carry their measured coverage (`covered_fraction`,
`gap_s`) and a widened interval, a warning names the device, and `wattlife check` fails a run
whose bridged energy exceeds `MAX_INVENTED_SHARE` of a device's energy.

Before: a 5 s hole in an 11 s run was interpolated, every phase read covered_fraction 1.0, no
warning, and check passed."""

import threading
import time
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import T0, events_frame
from wattlife.attribution import GAP_PERIODS, attribute_energy, sensor_gaps
from wattlife.attribution.series import power_series
from wattlife.devices.cpu_estimate import CpuEstimateBackend
from wattlife.devices.simgpu import SimGpuBackend

MS = 1_000_000
S = 1_000 * MS
# the run: 11 s of phases, each with its own activity (the simulated GPU follows it)
PHASES = [("setup", 0.0, 1.0, 0.0), ("train", 1.0, 9.0, 1.0), ("validation", 9.0, 11.0, 0.3)]


class GpuLost(Exception):
    """What pynvml raises for NVML_ERROR_GPU_IS_LOST."""


def _activity(now_ns: int) -> float:
    t = (now_ns - T0) / S
    return next((a for _, lo, hi, a in PHASES if lo <= t < hi), 0.0)


class FailingSimGpu(SimGpuBackend):
    """The simulated GPU, its activity the phase schedule's, lost during [lost_from, lost_to)."""

    def __init__(self, lost: tuple[float, float]) -> None:
        super().__init__(interval_s=0.02)
        self.lost = lost

    def _activity(self) -> float:
        return _activity(self._now)

    def poll(self, now_ns: int):
        if self.lost[0] <= (now_ns - T0) / S < self.lost[1]:
            raise GpuLost("NVML_ERROR_GPU_IS_LOST")
        self._now = now_ns
        return super().poll(now_ns)


class FailingCpuEstimate(CpuEstimateBackend):
    """The CPU estimate, its utilisation the phase schedule's, failing during the window."""

    def __init__(self, lost: tuple[float, float]) -> None:
        super().__init__(50.0, 200.0, 0.05)
        self.lost = lost

    def poll(self, now_ns: int):
        if self.lost[0] <= (now_ns - T0) / S < self.lost[1]:
            raise OSError("psutil: /proc/stat unreadable")
        u = _activity(now_ns)
        return [(now_ns, "cpu0", "power_w", self.power_w(u), "estimate")]


def _sample(backend, end_s: float = 11.5) -> pd.DataFrame:
    """The sampler's loop, offline: poll every interval; a failing poll gives no rows (as
    `Sampler._loop`, which records the error and goes on)."""
    rows = []
    for now in T0 + np.arange(0, int(end_s * S), int(backend.interval_s * S)):
        try:
            rows += backend.poll(int(now))
        except Exception:
            pass
    df = pd.DataFrame(rows, columns=["t_ns", "device", "metric", "value", "source"])
    return df[df["metric"] == "power_w"].assign(host="h")


def _events() -> pd.DataFrame:
    return events_frame([(n, T0 + int(lo * S), T0 + int(hi * S)) for n, lo, hi, _ in PHASES])


def _attribute(trace):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = attribute_energy(trace, _events(), method="integrate")
    return out.set_index("phase"), [str(w.message) for w in caught]


@pytest.mark.parametrize("backend", [FailingSimGpu, FailingCpuEstimate])
def test_a_5_s_hole_is_flagged_not_filled(backend):
    trace = _sample(backend((3.0, 8.0)))
    full = _attribute(_sample(backend((99.0, 99.0))))[0]
    out, msgs = _attribute(trace)
    train = out.loc["train"]
    assert train["covered_fraction"] == pytest.approx(3 / 8, abs=0.02)
    assert train["gap_s"] == pytest.approx(5.0, abs=0.1)
    assert out.loc["setup", "covered_fraction"] == 1.0 and out.loc["setup", "gap_s"] == 0
    # the widened interval holds what the device really drew there
    assert train["energy_lo_j"] <= full.loc["train", "energy_j"] <= train["energy_hi_j"]
    dev = trace["device"].iloc[0]
    assert any(f"h/{dev}" in m and "gap" in m for m in msgs), msgs


@settings(max_examples=25, deadline=None)
@given(lo=st.floats(0.2, 6.0), periods=st.floats(GAP_PERIODS, 100.0), gpu=st.booleans())
def test_any_hole_of_a_few_reading_periods_is_never_silent(lo, periods, gpu):
    """A hole inside the trace (one at its ends is a trace covering part of the run, flagged by
    coverage already: test_attribute_faults) of `GAP_PERIODS` (3) reading periods or more,
    however short in seconds (0.06 s of the simulated GPU at 20 ms). Before: a hole under 0.5 s
    (and under 5 periods) was bridged silently."""
    backend = FailingSimGpu if gpu else FailingCpuEstimate
    width = periods * backend((0, 0)).interval_s + 1e-6
    out, msgs = _attribute(_sample(backend((lo, lo + width))))
    hole = out["gap_s"].sum()
    assert hole >= width - 2 * backend((0, 0)).interval_s - 1e-9
    assert msgs and (out["covered_fraction"] < 1).any()
    full = _attribute(_sample(backend((99.0, 99.0))))[0]
    for name in ("setup", "train", "validation"):
        assert out.loc[name, "energy_lo_j"] - 1e-6 <= full.loc[name, "energy_j"]
        assert full.loc[name, "energy_j"] <= out.loc[name, "energy_hi_j"] + 1e-6


def _check_gaps(trace):
    from wattlife.check.trace import check_gaps

    return [(f.severity, f.code) for f in check_gaps(trace.assign(line_no=0), "trace.csv")]


@pytest.mark.parametrize("backend", [FailingSimGpu, FailingCpuEstimate])
def test_check_fails_a_run_with_too_much_bridged_energy(backend):
    assert ("error", "trace.gap-energy") in _check_gaps(_sample(backend((3.0, 8.0))))
    assert _check_gaps(_sample(backend((99.0, 99.0)))) == []
    assert _check_gaps(_sample(backend((0.2, 0.85)))) == [("warning", "trace.gap")]


@pytest.mark.parametrize("backend", [FailingSimGpu, FailingCpuEstimate])
def test_check_reports_a_short_failing_window(backend):
    """0.25 s without readings (12 periods of the GPU, 5 of the CPU estimate): a warning.
    Before: below the 0.5 s floor, not seen."""
    assert _check_gaps(_sample(backend((4.0, 4.25)))) == [("warning", "trace.gap")]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.4, 2.5), min_size=20, max_size=300), st.floats(0.005, 1.0))
def test_batch_jitter_up_to_two_and_a_half_periods_is_no_gap(spacings, period_s):
    """NVML's drained batches on the committed H100/H200 traces space readings at most 2.5
    median periods apart (benchmarks/gap_threshold.py): never a gap, at any period."""
    dt = np.array([1.0] * (2 * len(spacings) + 1) + spacings) * period_s * 1e9  # median: 1
    t = T0 + np.concatenate([[0], np.cumsum(dt)]).astype(np.int64)
    s = power_series("h", "gpu0", t, np.full(len(t), 100.0), np.zeros(len(t), np.int8),
                     ["nvml-samples"], np.inf)
    assert sensor_gaps(s).total_s == 0


@pytest.mark.parametrize("backend", [FailingSimGpu, FailingCpuEstimate])
def test_wattlife_check_on_the_run_folder_fails_it(tmp_path, capsys, backend):
    """The issue's case through `wattlife check RUN_DIR` (its trace and events as written)."""
    from wattlife.cli import main

    cols = ["t_ns", "host", "device", "metric", "value", "source"]
    _sample(backend((3.0, 8.0)))[cols].to_csv(tmp_path / "trace.csv", index=False)
    _events().to_csv(tmp_path / "events.csv", index=False)
    assert main(["check", str(tmp_path), "--kind", "none"]) == 1
    out = capsys.readouterr().out
    assert "[trace.gap-energy]" in out and "FAIL" in out


def test_a_gap_the_sampler_recorded_as_its_own_stall_is_a_warning():
    """A gap the sampler's recorded stall windows cover (meta.json `sampler.stalls`: its thread
    not scheduled, an overloaded machine): a `trace.stall` warning, not a failed check; the same
    gap without the record, or recorded on another host, is the sensor's: the error."""
    from wattlife.check.trace import check_gaps

    gpu = _sample(FailingSimGpu((3.0, 8.0)))
    t = np.sort(gpu["t_ns"].to_numpy())
    k = int(np.argmax(np.diff(t)))
    window = [[int(t[k]), int(t[k + 1])]]

    def found(stalls):
        return [(f.severity, f.code) for f in check_gaps(gpu.assign(line_no=0), "trace.csv",
                                                          stalls)]

    assert found(("h", window)) == [("warning", "trace.stall")]
    assert found(None) == found(("other", window)) == [("error", "trace.gap-energy")]
    # attribution flags the stalled phases all the same: nothing is bridged silently
    out, msgs = _attribute(gpu)
    assert out.loc["train", "gap_s"] > 4.9 and msgs


class _LateEvent(threading.Event):
    """The sampler's stop event, whose 5th wait oversleeps 0.4 s (the thread not scheduled)."""

    calls = 0

    def wait(self, timeout=None):
        self.calls += 1
        if self.calls == 5:
            time.sleep(0.4)
        return super().wait(timeout)


class _HangingSimGpu(SimGpuBackend):
    """The simulated GPU, whose 5th poll hangs 0.4 s (a sensor, not the sampler, is slow)."""

    calls = 0

    def poll(self, now_ns: int):
        self.calls += 1
        if self.calls == 5:
            time.sleep(0.4)
        return super().poll(now_ns)


@pytest.mark.parametrize("late", ["thread", "sensor"])
def test_the_sampler_records_its_stalls_not_a_slow_sensor(tmp_path, late):
    from wattlife.sampler import Sampler

    backend = _HangingSimGpu(interval_s=0.02) if late == "sensor" else SimGpuBackend(
        interval_s=0.02)
    sampler = Sampler([backend], tmp_path / "trace.csv")
    if late == "thread":
        sampler._stop = _LateEvent()
    sampler.start()
    deadline = time.monotonic() + 60
    while (backend.calls if late == "sensor" else sampler._stop.calls) < 8:
        assert time.monotonic() < deadline, "the sampler stopped polling"
        time.sleep(0.01)
    sampler.stop()
    if late == "thread":
        assert len(sampler.stalls) >= 1
        assert any(b - a >= 0.4e9 for a, b in sampler.stalls), sampler.stalls
    else:
        assert not any(b - a >= 0.4e9 for a, b in sampler.stalls), sampler.stalls
