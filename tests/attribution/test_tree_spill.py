"""A rank's tree kept on disk a window at a time (issue 43, `tree_spill.SpilledTree`): its
windows read back, its segments read a piece at a time, the method's choice, the deconvolution,
the settling and a node reading's age bounds from it are the whole tree's bit for bit, whatever
the window size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import T0, nested_steps, trace_frame
from wattlife.attribution.deconvolve import choose_method, deconvolve
from wattlife.attribution.node_age import age_bounds, exclusive_pieces
from wattlife.attribution.series import device_series
from wattlife.attribution.settle import KNOWN, settle_halfwidth
from wattlife.attribution.start_order import start_ordered
from wattlife.attribution.tree import phase_tree, segment_index
from wattlife.attribution.tree_spill import (
    SpilledSegments,
    SpilledTree,
    assembled_tree,
    count_by_name,
    phase_count,
    tree_segments,
)
from wattlife.attribution.tree_windows import tree_windows

MS = 1_000_000


def _spilled(ev: pd.DataFrame, window: int, tmp) -> SpilledTree:
    return SpilledTree.build(tree_windows(start_ordered([ev], run_rows=41, block_rows=9), window),
                             tmp)


def _series(ev: pd.DataFrame, spacing_ms: float = 7.0, seed: int = 0):
    """A GPU read every `spacing_ms` from before the first phase to after the last."""
    rng = np.random.default_rng(seed)
    lo, hi = int(ev["start_ns"].min()) - 30 * MS, int(ev["end_ns"].max()) + 30 * MS
    t = np.arange(lo, hi, int(spacing_ms * MS), dtype=np.int64)
    return device_series(trace_frame(t, 200 + 100 * rng.random(len(t))))[0]


@settings(max_examples=20, deadline=None)
@given(steps=st.integers(1, 30), seed=st.integers(0, 9), window=st.integers(1, 200))
def test_spilled_segments_are_the_whole_trees(tmp_path_factory, steps, seed, window) -> None:
    """The pieces, one after the other, are `segment_index`'s boundaries and names; the index
    of any time window (in order, then an earlier one) is the whole tree's, row for row; the
    names' counts, the phase count and the windows read back are the whole tree's."""
    ev = nested_steps(steps, seed)
    whole, series = phase_tree(ev), _series(ev)
    spilled = _spilled(ev, window, tmp_path_factory.mktemp("spill"))
    held, disk = segment_index(whole, series), tree_segments(spilled, series)
    assert isinstance(disk, SpilledSegments)
    bounds, codes = zip(*disk.pieces(), strict=True)
    assert np.array_equal(np.concatenate([b[:-1] for b in bounds] + [bounds[-1][-1:]]),
                          held.bounds)
    assert np.array_equal(np.concatenate(codes), held.code) and disk.names == held.names
    assert disk.n_bounds == held.n_bounds
    span = float(held.rel[-1] - held.rel[0])
    cuts = [(-1e9, 0.0)] + [(held.rel[0] + f * span, held.rel[0] + (f + 0.2) * span)
                            for f in (0.0, 0.3, 0.31, 0.75, 0.1, 1.0)]
    for lo, hi in cuts:
        a, b = held.window(lo, hi), disk.window(lo, hi)
        assert np.array_equal(a.bounds, b.bounds) and np.array_equal(a.code, b.code)
        assert np.array_equal(a.cum, b.cum)
    assert count_by_name(spilled) == count_by_name(whole)
    assert phase_count(spilled) == len(whole.start)
    t0, t1 = int(series.t_ns[0]) + 5 * MS, int(series.t_ns[-1]) - 5 * MS
    for got, want in zip(exclusive_pieces(spilled, t0, t1), exclusive_pieces(whole, t0, t1),
                         strict=True):
        assert np.array_equal(got, want)
    back = assembled_tree(spilled.windows())
    for f in ("name", "start", "end", "depth", "parent"):
        assert np.array_equal(getattr(back, f), getattr(whole, f)), f
    spilled.close()
    assert not spilled.path.exists()


@pytest.mark.parametrize("window", [1, 17, 10_000])
def test_choice_deconvolution_and_settling_from_the_spill(tmp_path, window) -> None:
    """`choose_method` (an exact median over the pieces), `deconvolve` and the settling's sums
    from the spilled tree: the whole tree's, bit for bit, on both sides of the choice."""
    ev = nested_steps(40, 3, scale_ms=3)
    whole, series = phase_tree(ev), _series(ev, spacing_ms=1.0)
    spilled = _spilled(ev, window, tmp_path)  # its segments' median: 3.5 ms
    for w in (0.001, 0.00174, 0.00176, 0.02):
        assert choose_method(series, spilled, w) == choose_method(series, whole, w)
    assert [choose_method(series, whole, w) for w in (0.00174, 0.00176)] == [
        "integrate", "deconvolve"]
    pd.testing.assert_frame_equal(deconvolve(series, spilled, n_boot=20),
                                  deconvolve(series, whole, n_boot=20), check_exact=True)
    settle = KNOWN["NVIDIA H100 80GB HBM3"]
    pd.testing.assert_series_equal(settle_halfwidth(series, spilled, settle),
                                   settle_halfwidth(series, whole, settle), check_exact=True)
    pd.testing.assert_frame_equal(age_bounds(series, spilled, 0.05, 400.0),
                                  age_bounds(series, whole, 0.05, 400.0), check_exact=True)


def test_a_failed_build_leaves_no_folder(tmp_path) -> None:
    """A window that raises (an overlap the rank's reader reads whole again): the folder goes."""
    def windows():
        ev = nested_steps(5, 0)
        yield from tree_windows(start_ordered([ev]), 3)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        SpilledTree.build(windows(), tmp_path)
    assert not list(tmp_path.iterdir())


def test_median_is_np_median_of_an_even_count(tmp_path) -> None:
    """Two steps whose segment lengths straddle 2 windows: the mean of the middle two decides,
    as np.median's (the lengths 10 and 30 ms: median 20 ms, against 2 x 9.99 and 2 x 10.01)."""
    rows = []
    for i, (a, b) in enumerate([(0, 10), (10, 40), (40, 50), (50, 80)]):
        rows.append(("r", "h", 0, f"p{i}", T0 + a * MS, T0 + b * MS, np.nan, np.nan))
    ev = pd.DataFrame(rows, columns=["run_id", "host", "rank", "phase", "start_ns", "end_ns",
                                     "step", "items"])
    whole, series = phase_tree(ev), _series(ev, spacing_ms=1.0)
    spilled = _spilled(ev, 1, tmp_path)
    for w, want in ((0.00999, "integrate"), (0.01001, "deconvolve")):
        assert choose_method(series, spilled, w) == choose_method(series, whole, w) == want
