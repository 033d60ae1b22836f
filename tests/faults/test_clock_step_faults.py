"""Wall-clock steps: the host's wall clock stepping during a run (NTP, a VM resumed), of either
sign and any size, changes no phase's length or energy: timestamps come from a monotonic clock
mapped to epoch ns once per process (`contracts.clock`), the processes of one `wattlife run`
share the mapping, and a step seen during the run is in meta.json and reported by `check`.

Before: a 1.5 s step back clamped every later phase to zero length (the markers took
`time.time_ns`), attribution moved the remaining steps' energy into `process_exit`, and check
said ok."""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import wait_rows
from wattlife import markers
from wattlife.contracts import read_events

S = 1_000_000_000
EPOCH = 1_765_000_000 * S


class Clocks:
    """A monotonic clock the test advances, and a wall clock that is it plus a step."""

    def __init__(self) -> None:
        self.t, self.step = 10 * S, 0

    def monotonic(self) -> int:
        return self.t

    def wall(self) -> int:
        return EPOCH + self.t + self.step


@pytest.fixture
def clocks(monkeypatch):
    c = Clocks()
    monkeypatch.setattr(time, "time_ns", c.wall)
    try:
        from wattlife.contracts import clock
    except ImportError:  # the code before issue 41 has no monotonic clock: the wall is all it reads
        yield c
        return
    monkeypatch.setattr(clock, "monotonic_ns", c.monotonic)
    clock.reset()
    yield c
    clock.reset()


PLAN = [("setup", 0.4), ("step", 0.3), ("step", 0.3), ("step", 0.3), ("validation", 0.5)]


def _record(tmp_path, clocks, step_ns: int, at: int):
    """Mark PLAN's phases, the wall clock stepping by `step_ns` in the middle of phase `at`."""
    path = tmp_path / "events.csv"
    markers.configure(path, run_id="r")
    for i, (name, secs) in enumerate(PLAN):
        with markers.phase(name):
            clocks.t += int(secs * S) // 2
            if i == at:
                clocks.step += step_ns
            clocks.t += int(secs * S) - int(secs * S) // 2
        clocks.t += 1_000_000
    markers.reset()
    return read_events(path)


@pytest.mark.parametrize("step_s", [-1.5, +1.5, -3600.0, +0.002])
def test_the_issue_step_changes_no_phase(tmp_path, clocks, step_s):
    ev = _record(tmp_path, clocks, int(step_s * S), at=2)
    got = ((ev["end_ns"] - ev["start_ns"]) / S).round(9).tolist()
    assert got == [secs for _, secs in PLAN]
    assert (ev["clamp_ns"] == 0).all()
    assert (np.diff(ev["start_ns"].to_numpy()) > 0).all()


@settings(max_examples=60, deadline=None)
@given(step_ns=st.integers(-10**13, 10**13), at=st.integers(0, len(PLAN) - 1))
def test_any_wall_step_anywhere_changes_no_phase(tmp_path_factory, step_ns, at):
    c = Clocks()
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(time, "time_ns", c.wall)
        from wattlife.contracts import clock

        mp.setattr(clock, "monotonic_ns", c.monotonic)
        clock.reset()
        ev = _record(tmp_path_factory.mktemp("step"), c, step_ns, at)
    finally:
        mp.undo()
        clock.reset()
    assert ((ev["end_ns"] - ev["start_ns"]) / S).round(9).tolist() == [s for _, s in PLAN]
    assert (ev["clamp_ns"] == 0).all()


def test_a_child_process_inherits_the_mapping_so_its_stamps_line_up(monkeypatch, clocks):
    """wattlife run hands its mapping to CMD (ENV_CLOCK): a step between the two processes'
    starts does not shift the workload's timestamps against the sampler's."""
    from wattlife.contracts import clock

    parent = clock.now_ns()
    monkeypatch.setenv(clock.ENV_CLOCK, clock.env_value())
    clocks.step -= int(1.5 * S)
    clock.reset()  # the child: a fresh process
    assert clock.mapping().inherited
    assert clock.now_ns() == parent
    monkeypatch.setenv(clock.ENV_CLOCK, "another-host 5 1")
    clock.reset()
    assert not clock.mapping().inherited


def test_nvml_driver_stamps_follow_the_mapped_clock(clocks):
    """The driver stamps its samples in wall time: mapped back by the step seen."""
    from wattlife.contracts import clock

    before = clock.now_ns()
    clocks.step += 7 * S
    assert clock.from_wall_ns(time.time_ns()) == before
    assert clock.wall_step_ns() == 7 * S


def test_a_sampler_across_a_step_keeps_its_spacing_and_meta_and_check_report_it(
        tmp_path, monkeypatch):
    from wattlife.check.outputs import check_meta
    from wattlife.devices.simgpu import SimGpuBackend
    from wattlife.sampler import Sampler

    real = time.time_ns
    s = Sampler([SimGpuBackend(interval_s=0.01)], tmp_path / "trace.csv", flush_s=0.05)
    s.start()
    try:
        wait_rows(tmp_path / "trace.csv", 10, device="gpu0")
        monkeypatch.setattr(time, "time_ns", lambda: real() - int(1.5 * S))
        n = len(wait_rows(tmp_path / "trace.csv", 10, device="gpu0"))
        wait_rows(tmp_path / "trace.csv", n + 10, device="gpu0")
    finally:
        s.stop()
    import pandas as pd

    tr = pd.read_csv(tmp_path / "trace.csv")
    t = tr.loc[tr["metric"] == "power_w", "t_ns"].to_numpy()
    assert (np.diff(t) > 0).all() and np.diff(t).max() < 1.0 * S
    steps = s.wall_steps.record()["wall_steps"]
    assert len(steps) == 1 and abs(steps[0]["step_ns"] + 1.5 * S) < 0.01 * S
    found = check_meta({"clock": s.wall_steps.record()}, "meta.json", real())
    assert [x.code for x in found if x.code.startswith("clock")] == ["clock.wall-step"]
