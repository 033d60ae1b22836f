"""One rank's tree assembled from its windows (issue 43, `rank_events.assembled_tree`): the
arrays `tree.phase_tree` gives from the whole frame, whatever the window and chunk sizes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import nested_steps
from wattlife.attribution.rank_events import assembled_tree
from wattlife.attribution.start_order import start_ordered
from wattlife.attribution.tree import phase_tree
from wattlife.attribution.tree_windows import tree_windows


def _same(a, b) -> None:
    for f in ("name", "start", "end", "depth", "parent"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@settings(max_examples=25, deadline=None)
@given(steps=st.integers(1, 40), seed=st.integers(0, 9), window=st.integers(1, 300),
       chunk=st.integers(1, 50), run=st.integers(2, 80))
def test_assembled_tree_is_the_whole_tree(steps, seed, window, chunk, run) -> None:
    """Windows down to one row, runs and chunks of any size: the same five arrays."""
    ev = nested_steps(steps, seed)
    chunks = [ev.iloc[i:i + chunk] for i in range(0, len(ev), chunk)]
    got = assembled_tree(tree_windows(start_ordered(chunks, run_rows=run, block_rows=7), window))
    _same(got, phase_tree(ev))


def test_no_rows_no_tree() -> None:
    t = assembled_tree(iter(()))
    assert len(t.start) == 0 and t.start.dtype == np.int64


@pytest.mark.parametrize("window", [1, 64])
def test_a_wrapper_over_every_window_keeps_its_children(window) -> None:
    """`train` opens before every window and closes after the last: its children's parent is it
    in every window (a carried row's stream position)."""
    ev = nested_steps(30, 3)
    t = assembled_tree(tree_windows(start_ordered([ev], run_rows=40, block_rows=5), window))
    top = np.flatnonzero(t.parent < 0)
    assert t.name[top[0]] == "train" and (t.parent[t.depth == 1] == top[0]).all()
