"""A rank's exclusive quantities a window at a time (issue 43, `exclusive_windows`): the
coverage of `gaps.phase_coverage_windows` is `phase_coverage`'s of the whole tree, bit for bit,
whatever the window size, with sensor gaps inside phases and readings that start after the first
phase and end before the last."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import averaging_sensor, nested_steps, trace_frame
from wattlife.attribution.exclusive_windows import ExclusiveWindows
from wattlife.attribution.gaps import phase_coverage, phase_coverage_windows, sensor_gaps
from wattlife.attribution.series import device_series
from wattlife.attribution.start_order import start_ordered
from wattlife.attribution.tree import phase_tree
from wattlife.attribution.tree_windows import tree_windows

MS = 1_000_000


def _series_with_gaps(ev: pd.DataFrame, seed: int, lead_ms: int, tail_ms: int):
    """20 ms readings of a power changing at every boundary, two stretches of readings dropped
    (sensor gaps inside phases), from `lead_ms` after the first start to `tail_ms` after the
    last end."""
    rng = np.random.default_rng(seed)
    edges = np.unique(np.concatenate([ev["start_ns"], ev["end_ns"]]))
    power = rng.uniform(80, 700, len(edges) - 1)
    t = np.arange(int(edges[0]) + lead_ms * MS, int(edges[-1]) + tail_ms * MS, 20 * MS)
    t = np.sort(t + rng.integers(0, MS, len(t)))
    keep = np.ones(len(t), bool)
    for at in rng.integers(5, max(len(t) - 15, 6), 2):
        keep[at:at + 8] = False
    t = t[keep]
    p = averaging_sensor(edges, power, t, 20 * MS) + rng.normal(0, 3.0, len(t))
    return device_series(trace_frame(t, p))[0]


def _windows(ev: pd.DataFrame, window_rows: int):
    chunks = [ev.iloc[i:i + 23] for i in range(0, len(ev), 23)]
    return tree_windows(start_ordered(chunks, run_rows=64, block_rows=16), window_rows)


def _check(n_steps: int, seed: int, window_rows: int, lead_ms: int, tail_ms: int) -> None:
    ev = nested_steps(n_steps, seed, scale_ms=7, every=4, lead_ms=40)
    s = _series_with_gaps(ev, seed, lead_ms, tail_ms)
    gaps = sensor_gaps(s)
    assert gaps.total_s > 0
    frac, overall, outside = phase_coverage(s, phase_tree(ev), gaps)
    got = phase_coverage_windows(s, _windows(ev, window_rows), gaps)
    pd.testing.assert_series_equal(got[0], frac, check_exact=True)
    assert (got[1], got[2]) == (overall, outside)
    assert (frac < 1).any()  # the gaps do lower some name's coverage


@pytest.mark.parametrize("window_rows", [1, 3, 10, 64, 100_000])
@pytest.mark.parametrize("lead_ms,tail_ms", [(-50, 50), (300, -400)])
def test_windows_cover_as_the_whole_tree(window_rows, lead_ms, tail_ms):
    _check(30, 1, window_rows, lead_ms, tail_ms)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(window_rows=st.integers(1, 80), seed=st.integers(0, 50),
       lead_ms=st.integers(-100, 500), tail_ms=st.integers(-500, 100))
def test_windows_cover_any(window_rows, seed, lead_ms, tail_ms):
    """Any window size, rank and reading span."""
    _check(20, seed, window_rows, lead_ms, tail_ms)


def test_a_window_not_following_the_carried_rows_is_refused():
    """Windows fed out of their order: the carried rows are not the next window's first."""
    ev = nested_steps(6, 0, scale_ms=7, every=4, lead_ms=40)
    wins = list(_windows(ev, 2))
    ex = ExclusiveWindows(1)
    ex.feed(wins[1], np.zeros((len(wins[1].tree.start), 1)))
    with pytest.raises(ValueError, match="carried from the window before"):
        ex.feed(wins[0], np.zeros((max(len(wins[0].tree.start) - ex.carried(), 0), 1)))
