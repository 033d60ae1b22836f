"""One rank's events from end order into start order by an external sort (issue 43,
`attribution.start_order`): sorted runs spilled, merged k ways, a block at a time. The rows
yielded, joined, are the in-memory sort's (`tree.phase_tree`'s order, ties in file order) bit
for bit, whatever the chunk, run and block sizes: events in the markers' end order with nested
phases, equal bounds at several depths, zero-length phases, rows whose keys tie entirely, a
missing recorded depth; read from a file written and read back (`read_events`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import end_order_events
from wattlife.attribution.start_order import sorted_blocks, start_order, start_ordered
from wattlife.attribution.tree import phase_tree
from wattlife.contracts import read_events


def _cut(df: pd.DataFrame, sizes: list[int]) -> list[pd.DataFrame]:
    """The frame cut into chunks of the given sizes in turn (cycled), empty chunks included."""
    out, pos, k = [], 0, 0
    while pos < len(df):
        n = sizes[k % len(sizes)]
        out.append(df.iloc[pos:pos + n])
        pos, k = pos + n, k + 1
    return out


def _expected(ev: pd.DataFrame) -> pd.DataFrame:
    return ev.iloc[start_order(ev)].reset_index(drop=True)


def _joined(blocks: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(blocks, ignore_index=True)


def test_order_is_phase_trees(tmp_path):
    """`start_order` is the order `phase_tree` builds its tree in (its starts, ends, names)."""
    ev = end_order_events(40)
    tree = phase_tree(ev)
    got = _expected(ev)
    assert np.array_equal(tree.start, got["start_ns"].to_numpy())
    assert np.array_equal(tree.end, got["end_ns"].to_numpy())
    assert list(tree.name) == list(got["phase"])


def test_ties_in_file_order(tmp_path):
    """Rows equal on every key come out in the order of the stream (the `step` column counts
    the rows), across runs as within one."""
    ev = end_order_events(30)
    blocks = list(start_ordered(_cut(ev, [5]), spill_dir=tmp_path, run_rows=7, block_rows=3))
    got = _joined(blocks)
    key = got[["start_ns", "end_ns"]].assign(d=got["depth"].fillna(0))
    tied = key.duplicated(keep=False).to_numpy()
    assert tied.sum() >= 2 * 30  # the `mark` pairs at least
    same = (key.iloc[1:].to_numpy() == key.iloc[:-1].to_numpy()).all(axis=1)
    step = got["step"].to_numpy()
    assert (step[1:][same] > step[:-1][same]).all()
    pd.testing.assert_frame_equal(got, _expected(ev), check_exact=True)


def test_many_runs_are_merged_a_few_at_a_time_alike(tmp_path):
    """`sorted_blocks` by other keys (start, then rank; ties in stream order), more runs than
    its `fan_in` (40 runs, 3 at a time: four passes more): the stable sort's rows."""
    ev = end_order_events(30).assign(rank=lambda d: np.arange(len(d)) % 3)

    def keys(df: pd.DataFrame, first: int) -> dict[str, np.ndarray]:
        return {"s": df["start_ns"].to_numpy(), "r": df["rank"].to_numpy(),
                "row": np.arange(first, first + len(df))}

    blocks = list(sorted_blocks(_cut(ev, [4]), keys, tmp_path, run_rows=len(ev) // 40 + 1,
                                block_rows=5, fan_in=3))
    want = ev.sort_values(["start_ns", "rank"], kind="stable", ignore_index=True)
    pd.testing.assert_frame_equal(_joined(blocks), want, check_exact=True)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 60), min_size=1, max_size=6).filter(any),
       run_rows=st.integers(1, 300), block_rows=st.integers(1, 80), seed=st.integers(0, 5))
def test_external_sort_is_the_in_memory_sort(tmp_path_factory, sizes, run_rows, block_rows,
                                             seed):
    """Any chunk, run and block sizes: the rows joined equal the in-memory sort's bit for bit."""
    ev = end_order_events(25, seed)
    tmp = tmp_path_factory.mktemp("sort")
    blocks = list(start_ordered(_cut(ev, sizes), spill_dir=tmp, run_rows=run_rows,
                                block_rows=block_rows))
    assert all(len(b) for b in blocks)
    pd.testing.assert_frame_equal(_joined(blocks), _expected(ev), check_exact=True)
    assert not list(tmp.iterdir())  # the spilled runs are removed


def test_from_a_file(tmp_path):
    """A file written in end order and read back: the chunks of what `read_events` reads
    (its columns and types, `file_name` / `line_no` included) sorted as the in-memory path."""
    path = tmp_path / "events.csv"
    end_order_events(60, seed=3).to_csv(path, index=False)
    ev = read_events(path, lines=True, siblings=False)
    blocks = list(start_ordered(_cut(ev, [97, 13]), spill_dir=tmp_path, run_rows=128,
                                block_rows=16))
    assert max(len(b) for b in blocks) < len(ev)
    pd.testing.assert_frame_equal(_joined(blocks), _expected(ev), check_exact=True)


@pytest.mark.parametrize("depth", [True, False])
def test_without_depth_column(tmp_path, depth):
    """No recorded depth: ties on (start, -end) stay in file order, as `phase_tree`'s."""
    ev = end_order_events(20)
    if not depth:
        ev = ev.drop(columns="depth")
    got = _joined(list(start_ordered(_cut(ev, [11]), spill_dir=tmp_path, run_rows=23,
                                     block_rows=4)))
    pd.testing.assert_frame_equal(got, _expected(ev), check_exact=True)


def test_nothing_in_nothing_out(tmp_path):
    """No chunks, or empty ones: no blocks."""
    assert list(start_ordered([], spill_dir=tmp_path)) == []
    assert list(start_ordered([end_order_events(1).iloc[:0]], spill_dir=tmp_path)) == []
