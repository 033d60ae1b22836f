"""Integration a window of a rank's events at a time (issue 43, `integrate.integrate_windows`;
with it the coverage and the gap columns from windows): the table `integrate` gives from the
whole tree, bit for bit, whatever the window size (phases
across windows' edges carried until they close); readings starting after the first phase and
ending before the last (phases clipped to the series), a wrapper phase over every window;
energy conserved (phases + unattributed = the device's total)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import averaging_sensor, nested_steps, trace_frame
from wattlife.attribution.integrate import integrate, integrate_windows
from wattlife.attribution.series import device_series
from wattlife.attribution.tree import phase_tree
from wattlife.contracts import UNATTRIBUTED
from window_checks import check_coverage_and_gaps, rank_windows

MS = 1_000_000


def _rank(n_steps: int, seed: int = 0) -> pd.DataFrame:
    """A rank's events in end order (`synth.nested_steps`)."""
    return nested_steps(n_steps, seed, scale_ms=7, every=4, lead_ms=40)


def _series(ev: pd.DataFrame, seed: int, lead_ms: int, tail_ms: int):
    """A GPU's 20 ms readings (jittered, noisy) of a power that changes at every boundary,
    from `lead_ms` after the first phase's start (negative: before) to `tail_ms` after the
    last phase's end."""
    rng = np.random.default_rng(seed)
    edges = np.unique(np.concatenate([ev["start_ns"], ev["end_ns"]]))
    power = rng.uniform(80, 700, len(edges) - 1)
    first, last = int(edges[0]) + lead_ms * MS, int(edges[-1]) + tail_ms * MS
    t = np.arange(first, last, 20 * MS, dtype=np.int64)
    t = t + rng.integers(0, MS, len(t))
    t = np.sort(t[(t > edges[0] + 20 * MS) & (t < edges[-1])])
    p = averaging_sensor(edges, power, t, 20 * MS) + rng.normal(0, 3.0, len(t))
    return device_series(trace_frame(t, p))[0]


def _windowed(ev: pd.DataFrame, series, window_rows: int) -> pd.DataFrame:
    return integrate_windows(series, rank_windows(ev, window_rows))


def _close(got: pd.DataFrame, want: pd.DataFrame, total: float) -> None:
    """The same table, bit for bit."""
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def _check(n_steps: int, seed: int, window_rows: int, lead_ms: int, tail_ms: int) -> None:
    """Integration, and on readings with sensor gaps the coverage and the gap columns
    (`window_checks.check_coverage_and_gaps`)."""
    ev = _rank(n_steps, seed)
    s = _series(ev, seed, lead_ms, tail_ms)
    total = float(s.energy_j[-1] - s.energy_j[0])
    want = integrate(s, phase_tree(ev))
    got = _windowed(ev, s, window_rows)
    _close(got, want, total)
    assert abs(got["energy_j"].sum() - total) <= 1e-9 * total  # energy conserved
    assert got.loc[got["phase"] == UNATTRIBUTED, "count"].item() == 0
    check_coverage_and_gaps(ev, seed, window_rows, lead_ms, tail_ms)


@pytest.mark.parametrize("window_rows", [1, 3, 10, 64, 100_000])
@pytest.mark.parametrize("lead_ms,tail_ms", [(-50, 50), (300, -400)])
def test_windows_integrate_as_the_whole_tree(window_rows, lead_ms, tail_ms):
    """Fixed window sizes, readings around the phases or starting after the first phase and
    ending before the last (phases clipped to the series in both paths)."""
    _check(30, 1, window_rows, lead_ms, tail_ms)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(window_rows=st.integers(1, 80), seed=st.integers(0, 50),
       lead_ms=st.integers(-100, 500), tail_ms=st.integers(-500, 100))
def test_windows_integrate_any(window_rows, seed, lead_ms, tail_ms):
    """Any window size, rank and reading span."""
    _check(20, seed, window_rows, lead_ms, tail_ms)


def test_no_windows():
    """No events: all of the device's energy unattributed, as `integrate` of an empty tree."""
    ev = _rank(3, 0)
    s = _series(ev, 0, -50, 50)
    got = integrate_windows(s, [])
    want = integrate(s, phase_tree(ev.iloc[:0]))
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                  check_dtype=False)
