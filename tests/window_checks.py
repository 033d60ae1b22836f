"""Checks of a rank's windows against its whole tree (issue 43): the coverage and the gap
columns on readings with sensor gaps (`check_coverage_and_gaps`, run by
`attribution/test_integrate_windows.py` over its window sizes)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from synth import averaging_sensor, trace_frame
from wattlife.attribution.gaps import (
    add_gap_columns,
    phase_coverage,
    phase_coverage_windows,
    sensor_gaps,
)
from wattlife.attribution.integrate import integrate
from wattlife.attribution.series import device_series
from wattlife.attribution.start_order import start_ordered
from wattlife.attribution.tree import phase_tree
from wattlife.attribution.tree_windows import tree_windows

MS = 1_000_000


def series_with_gaps(ev: pd.DataFrame, seed: int, lead_ms: int, tail_ms: int):
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


def rank_windows(ev: pd.DataFrame, window_rows: int):
    """A rank's tree windows of `window_rows` rows from its events cut into chunks of 23 rows
    (the external sort's runs of 64 rows, blocks of 16)."""
    chunks = [ev.iloc[i:i + 23] for i in range(0, len(ev), 23)]
    return tree_windows(start_ordered(chunks, run_rows=64, block_rows=16), window_rows)


def check_coverage_and_gaps(ev: pd.DataFrame, seed: int, window_rows: int, lead_ms: int,
                            tail_ms: int) -> None:
    """The coverage and the gap columns of a rank's windows are the whole tree's, exactly, on
    readings with two sensor gaps (`test_integrate_windows` runs it over its window sizes)."""
    s = series_with_gaps(ev, seed, lead_ms, tail_ms)
    gaps = sensor_gaps(s)
    assert gaps.total_s > 0
    frac, overall, outside = phase_coverage(s, phase_tree(ev), gaps)
    got = phase_coverage_windows(s, rank_windows(ev, window_rows), gaps)
    pd.testing.assert_series_equal(got[0], frac, check_exact=True)
    assert (got[1], got[2]) == (overall, outside)
    table = integrate(s, phase_tree(ev)).assign(covered_fraction=1.0)
    want = add_gap_columns(table.copy(), gaps, phase_tree(ev))
    got_table = add_gap_columns(table.copy(), gaps, rank_windows(ev, window_rows))
    pd.testing.assert_frame_equal(got_table, want, check_exact=True)
    assert (want["gap_s"] > 0).sum() >= 1
