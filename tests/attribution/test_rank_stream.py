"""One rank's tree assembled from its windows (issue 43, `tree_spill.assembled_tree`): the
arrays `tree.phase_tree` gives from the whole frame, whatever the window and chunk sizes; a long
rank's tree kept on disk (`RankEvents`, `tree_spill.SpilledTree`) attributes as the whole."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_fixtures import streamed_trees
from synth import nested_steps
from wattlife.attribution.start_order import start_ordered
from wattlife.attribution.tree import phase_tree
from wattlife.attribution.tree_spill import assembled_tree
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


@pytest.fixture
def streamed(monkeypatch):
    """Each rank's tree built window by window (`rank_fixtures.streamed_trees`)."""
    return streamed_trees(monkeypatch)


def _tables(tmp_path, monkeypatch, **kw):
    from test_chunked import _both

    return _both(tmp_path, *kw.pop("paths"), monkeypatch, **kw)


@pytest.mark.parametrize("form", ["csv", "zst"])
def test_streamed_ranks_attribute_as_the_in_memory_path(tmp_path, monkeypatch, streamed, form):
    """Per-rank events files, each rank's tree from windows of 23 rows: the phases table of the
    in-memory path, value for value (deconvolved short phases included)."""
    from test_chunked import _write

    paths = _write(tmp_path, form)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=paths, n_boot=10)
    assert len(streamed) == 2 and min(streamed) > 23 * 10  # both ranks, many windows
    assert {"deconvolve"} <= set(chunked["method"])
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


@pytest.mark.parametrize("compiled", [False, True])
def test_streamed_ranks_with_meta_json_idle_split_and_compile(tmp_path, monkeypatch, streamed,
                                                             compiled):
    """meta.json's wrapper intervals and idle baseline, a compiled run's warm-up labels and
    `compile` rows, all added a window at a time: the in-memory table."""
    from test_chunked import _write, _write_meta

    paths = _write(tmp_path, "zst")
    _write_meta(tmp_path)
    if compiled:
        (tmp_path / "summary.json").write_text('{"compile": true}')
    chunked, memory = _tables(tmp_path, monkeypatch, paths=paths, idle_split=True, n_boot=10)
    assert len(streamed) == 2
    assert {"idle_baseline", "process_startup", "process_exit", "warmup"} <= set(chunked["phase"])
    assert ("compile" in set(chunked["phase"])) == compiled
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def test_a_streamed_rank_with_an_overlap_is_clamped_whole(tmp_path, monkeypatch, streamed):
    """A rank whose phases overlap by 0.2 ms (two clocks' boundaries): its tree is not streamed
    (clamping takes the whole frame) and the table is the in-memory one, clamping included."""
    from test_chunked import _events, _write, _write_events

    from wattlife.attribution.tree import clamp_events

    p, ev_path = _write(tmp_path, "csv")
    ev = _events()
    bump = (ev["rank"] == 0) & (ev["phase"] == "backward") & (ev["step"] == 7)
    ev.loc[bump, "end_ns"] += 200_000  # into the optimizer after it
    _write_events(tmp_path, ev, True)
    with pytest.warns(UserWarning, match="1 phase boundary .* clamped"):
        clamp_events(ev)
    from wattlife.attribution import files

    read: list[str] = []
    real = files._streamed

    def counted(path, *a):
        read.append(path.name)
        return real(path, *a)

    monkeypatch.setattr(files, "_streamed", counted)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(p, ev_path), n_boot=10)
    assert len(streamed) == 1  # rank 1 only
    assert sorted(read) == ["events.csv", "events.rank1.csv"]  # each streamed once
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def test_a_streamed_rank_in_the_wrong_time_unit_is_the_same_error(tmp_path, monkeypatch,
                                                                    streamed):
    """Events stamped in microseconds: the error `check_time_units` gives on the whole frame,
    from the file's scan (its median start), before any window is read."""
    from test_chunked import _events, _write, _write_events

    from wattlife.attribution import attribute_files, rank_events
    from wattlife.contracts import ContractError

    p, ev_path = _write(tmp_path, "csv")
    ev = _events()
    ev[["start_ns", "end_ns"]] //= 1000
    _write_events(tmp_path, ev, True)
    with pytest.raises(ContractError, match="look like epoch us") as got:
        attribute_files(p, ev_path, tmp_path / "phases.csv", n_boot=5)
    assert streamed == []
    monkeypatch.setattr(rank_events, "STREAM_ROWS", 1 << 40)  # the whole frame's check
    with pytest.raises(ContractError) as whole:
        attribute_files(p, ev_path, tmp_path / "phases.csv", n_boot=5)
    assert str(got.value) == str(whole.value)


def test_a_streamed_rank_whose_first_row_is_a_concurrent_phase(tmp_path, monkeypatch, streamed):
    """The run's first row as the whole frame gives it (`RankEvents.head`): the first row left
    after `timeline`, when the file's first row is a background checkpoint write (a concurrent
    phase, dropped from the windows): the in-memory table."""
    from test_chunked import _events, _write, _write_events

    from wattlife.contracts import CHECKPOINT_WRITE

    p, ev_path = _write(tmp_path, "csv")
    ev = _events()
    # after the warm-up steps (inside one, the warm-up labels would rename it `warmup`)
    first = ev[(ev["step"] == 10) & (ev["phase"] == "step")].iloc[[0]].assign(
        phase=CHECKPOINT_WRITE)
    first["end_ns"] = first["start_ns"] + 800_000_000  # across steps 10-12
    _write_events(tmp_path, pd.concat([first, ev], ignore_index=True), True)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(p, ev_path), n_boot=10)
    assert len(streamed) == 2
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def test_a_streamed_rank_with_a_background_write_inside_a_warmup_step(tmp_path, monkeypatch,
                                                                      streamed):
    """A background checkpoint write inside warm-up step 0 keeps its name on both paths (the
    warm-up labels leave concurrent phases alone): the in-memory table, streamed."""
    from test_chunked import _events, _write, _write_events

    from wattlife.contracts import CHECKPOINT_WRITE

    p, ev_path = _write(tmp_path, "csv")
    ev = _events()
    step0 = ev[(ev["step"] == 0) & (ev["phase"] == "step")].iloc[[0]]
    write = step0.assign(phase=CHECKPOINT_WRITE, depth=step0["depth"] + 1,
                         start_ns=step0["start_ns"] + 1_000, end_ns=step0["end_ns"] - 1_000)
    _write_events(tmp_path, pd.concat([ev, write], ignore_index=True), True)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(p, ev_path), n_boot=10)
    assert len(streamed) == 2 and "warmup" in set(chunked["phase"])
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


@pytest.mark.parametrize("kw", [{"method": "integrate"}, {"sensor_response": "estimate"},
                                {"method": "deconvolve", "window_ms": 20.0}])
def test_spilled_trees_settle_and_estimate_as_the_whole(tmp_path, monkeypatch, streamed, kw):
    """Each rank's tree on disk (`SpilledTree`, windows of 23 rows): an H100 in meta.json
    (integrate's intervals widened by the settling, summed over the windows), the sensor's
    response estimated and a deconvolution from the spilled segments: the in-memory table,
    bit for bit, and no spill folder left behind."""
    from test_chunked import _write, _write_meta

    from wattlife.contracts.meta import write_meta

    p, ev_path = _write(tmp_path, "zst")
    _write_meta(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["gpu_model"] = "NVIDIA H100 80GB HBM3"
    meta["gpus"] = [{"device": f"gpu{i}", "name": meta["gpu_model"], "local_rank": i}
                    for i in (0, 1)]
    write_meta(tmp_path / "meta.json", meta)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(p, ev_path), n_boot=10, **kw)
    assert len(streamed) == 2 and min(streamed) > 23 * 10
    gpu = chunked[chunked["device"] == "gpu0"]
    if kw.get("method") == "integrate":
        assert gpu["settle_j"].gt(0).any()
    else:
        assert set(gpu["method"]) == {"deconvolve"}
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)
    assert not list(tmp_path.glob(".wattlife-*"))

