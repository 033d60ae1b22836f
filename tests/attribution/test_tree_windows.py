"""One rank's phase tree a window of events at a time (issue 43, `attribution.tree_windows`):
from the external sort's stream, each window's tree gives its rows the depth and parent of the
whole tree, and its segments on [lo, hi) (boundaries, innermost phase) are the whole tree's
restricted to that window, whatever the window size: a wrapper phase open over every window,
steps nested three deep, siblings meeting at a window's edge, zero-length phases, equal starts
never cut apart; an overlap is reported as the whole tree reports it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import nested_steps
from wattlife.attribution.start_order import start_order, start_ordered
from wattlife.attribution.tree import phase_tree, segments
from wattlife.attribution.tree_windows import NO_END, restrict, tree_windows
from wattlife.contracts import ContractError

MS = 1_000_000


def _rank(n_steps: int, seed: int = 0) -> pd.DataFrame:
    """A rank's events in end order (`synth.nested_steps`)."""
    return nested_steps(n_steps, seed)


def _windows(ev: pd.DataFrame, window_rows: int, chunk: int = 17):
    chunks = [ev.iloc[i:i + chunk] for i in range(0, len(ev), chunk)]
    return list(tree_windows(start_ordered(chunks, run_rows=50, block_rows=9), window_rows))


def _check(ev: pd.DataFrame, window_rows: int) -> int:
    """Every window against the whole tree; the number of windows."""
    whole = phase_tree(ev)
    bounds, label = segments(whole)
    wins = _windows(ev, window_rows)
    assert wins[0].lo == int(whole.start[0]) and wins[-1].hi == NO_END
    assert [w.hi for w in wins[:-1]] == [w.lo for w in wins[1:]]
    own = np.concatenate([w.rows[w.tree.start >= w.lo] for w in wins])
    assert np.array_equal(own, np.arange(len(ev)))  # each row in the window of its start once
    for w in wins:
        assert np.array_equal(w.tree.start, whole.start[w.rows])
        assert np.array_equal(w.tree.end, whole.end[w.rows])
        assert np.array_equal(w.tree.depth, whole.depth[w.rows])
        par = np.where(w.tree.parent >= 0, w.rows[np.maximum(w.tree.parent, 0)], -1)
        assert np.array_equal(par, whole.parent[w.rows])
        got_b, got_l = w.segments()
        want_b, want_l = restrict(bounds, label, w.lo, w.hi)
        assert np.array_equal(got_b, want_b) and np.array_equal(got_l, want_l)
    return len(wins)


@pytest.mark.parametrize("window_rows", [1, 2, 7, 40, 10_000])
def test_windows_are_the_whole_tree(window_rows):
    """Fixed window sizes, down to one row (ties of a start kept together)."""
    n = _check(_rank(30), window_rows)
    assert (n > 1) == (window_rows < 200)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(window_rows=st.integers(1, 120), seed=st.integers(0, 20))
def test_windows_any_size(window_rows, seed):
    """Any window size and rank: the windows' trees and segments are the whole tree's."""
    _check(_rank(25, seed), window_rows)


def test_starts_never_cut_apart():
    """A window's rows of its last start all join it: the next window starts later."""
    for w in _windows(_rank(20), 3):
        assert w.hi > w.lo
        assert not (w.tree.start[w.tree.start >= w.lo] >= w.hi).any()


def test_carried_rows_are_few():
    """What a window carries is the ancestors open at its edge (and siblings ending there):
    at most the depth of the tree plus one, however long the rank."""
    ev = _rank(200)
    for w in _windows(ev, 10):
        assert (w.tree.start < w.lo).sum() <= 4


def test_overlap_reported_as_the_whole_tree():
    """Phases overlapping without nesting: the window of the later one reports what
    `phase_tree` reports."""
    ev = _rank(12)
    bad = pd.DataFrame({"phase": ["rogue"], "start_ns": [int(ev["start_ns"].min()) + 3 * MS],
                        "end_ns": [int(ev["end_ns"].max()) + MS], "depth": [0.0], "run_id": "r",
                        "host": "h", "rank": 0})
    ev = pd.concat([ev, bad], ignore_index=True)
    with pytest.raises(ContractError) as whole:
        phase_tree(ev.iloc[start_order(ev)])
    with pytest.raises(ContractError) as windowed:
        _windows(ev, 5)
    assert str(windowed.value) == str(whole.value)


def test_empty_stream():
    """No rows: no windows."""
    assert list(tree_windows([])) == []


def test_rows_out_of_start_order_refused():
    """Rows not in start order (the file's end order, not sorted) are an error naming the
    rank, never a tree whose rows are not the stream's."""
    ev = _rank(10)
    with pytest.raises(ValueError, match="events: tree_windows needs rows in start order"):
        list(tree_windows([ev], 4))
    with pytest.raises(ValueError, match="start order"):
        list(tree_windows([ev], 10_000))
