"""One rank's events prepared window by window (`attribution.prepare_windows`, issue 43): the
windows joined are the whole-frame preparation (warm-up labels, `compile` copies of a compiled
run, wrapper intervals, `timeline`) in start order, row for row, types included, whatever the
window sizes: warm-up steps and added rows across a window's edge, compiled and not."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from synth import end_order_events
from wattlife.attribution.prepare_windows import prepared_file
from wattlife.attribution.start_order import start_order
from wattlife.attribution.tree import clamp_events, phase_tree, timeline
from wattlife.attribution.wrappers import prepared_frame
from wattlife.contracts import (
    CHECKPOINT_WRITE,
    COMPILE,
    WARMUP,
    ContractError,
    RunMeta,
    read_events,
)

MS = 1_000_000


def _meta(ev: pd.DataFrame) -> RunMeta:
    first, last = int(ev["start_ns"].min()), int(ev["end_ns"].max())
    return RunMeta(run_id="r", host="h", workload_start_ns=first - 900 * MS,
                   workload_end_ns=last + 700 * MS,
                   idle_baseline={"start_ns": first - 5000 * MS, "end_ns": first - 1000 * MS})


def _whole(ev: pd.DataFrame, meta: RunMeta, has_meta: bool, labels: bool,
           compiled: bool) -> pd.DataFrame:
    """`wrappers.prepared_frame`, `tree.timeline`, `clamp_events` (as `RankEvents` prepares a
    rank), start-ordered."""
    ev = clamp_events(timeline(prepared_frame(ev, meta, has_meta, labels, compiled)))
    return ev.iloc[start_order(ev)].reset_index(drop=True)


def _file(tmp_path, compile_rows: bool, concurrent: bool, seed: int = 0):
    ev = end_order_events(40, seed)
    if not compile_rows:
        ev = ev[ev["phase"] != COMPILE]
    if concurrent:  # a background checkpoint write across steps
        at = ev["start_ns"].iloc[len(ev) // 2]
        row = ev.iloc[[5]].assign(phase=CHECKPOINT_WRITE, start_ns=at, end_ns=at + 80 * MS)
        ev = pd.concat([ev, row], ignore_index=True)
    path = tmp_path / "events.csv"
    ev.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("compile_rows", [False, True])
@pytest.mark.parametrize("has_meta", [False, True])
@pytest.mark.parametrize("sizes", [(40, 7, 500), (9, 3, 120), (10_000, 10_000, 1 << 20)])
def test_windows_are_the_whole_preparation(tmp_path, compiled, compile_rows, has_meta, sizes):
    """Every window size, compiled runs with and without their `compile` rows, with and without
    meta.json: the windows joined equal the whole frame prepared, then start-ordered."""
    path = _file(tmp_path, compile_rows, concurrent=True)
    ev = read_events(path, lines=True, siblings=False)
    meta = _meta(ev)
    run_rows, block_rows, chunk = sizes
    wins = list(prepared_file(path, meta, has_meta, True, compiled, spill_dir=tmp_path,
                              chunk_bytes=chunk, run_rows=run_rows, block_rows=block_rows))
    want = _whole(ev, meta, has_meta, True, compiled)
    if run_rows < 100:
        assert len(wins) > 10
    got = pd.concat(wins, ignore_index=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert (got["phase"] == WARMUP).sum() > 10  # three warm-up steps' rows relabelled
    assert compiled == ((got["phase"] == COMPILE).sum() == 2) or compile_rows


def test_warmup_steps_cross_window_edges(tmp_path):
    """Windows of 3 rows: each warm-up step's rows lie in several windows; labels unchanged
    from the whole frame's, no labels (`warmup_labels` False) the recorded names."""
    path = _file(tmp_path, compile_rows=True, concurrent=False, seed=2)
    ev = read_events(path, lines=True, siblings=False)
    meta = _meta(ev)
    for labels in (True, False):
        wins = list(prepared_file(path, meta, True, labels, False, spill_dir=tmp_path,
                                  chunk_bytes=300, run_rows=5, block_rows=3))
        got = pd.concat(wins, ignore_index=True)
        pd.testing.assert_frame_equal(got, _whole(ev, meta, True, labels, False),
                                      check_exact=True)
        first_steps = np.flatnonzero((got["phase"] == WARMUP).to_numpy())
        assert labels == bool(len(first_steps))


def test_nothing_held_whole(tmp_path):
    """No window holds more than its block of rows and the few added ones."""
    path = _file(tmp_path, compile_rows=False, concurrent=False)
    ev = read_events(path, lines=True, siblings=False)
    wins = list(prepared_file(path, _meta(ev), True, True, True, spill_dir=tmp_path,
                              chunk_bytes=400, run_rows=20, block_rows=8))
    assert max(len(w) for w in wins) <= 8 + 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".wattlife-sort-")]


def _overlapping(tmp_path, seed: int, p: float) -> tuple:
    """A rank's events with small overlaps (clocks mapped through different anchors): some
    starts moved up to 0.9 ms earlier (into the sibling before), some ends up to 0.9 ms later
    (out of the parent), written in end order."""
    ev = end_order_events(60, seed)
    rng = np.random.default_rng(seed)
    s, e = ev["start_ns"].to_numpy().copy(), ev["end_ns"].to_numpy().copy()
    early = rng.random(len(ev)) < p
    late = rng.random(len(ev)) < p
    s[early] -= rng.integers(1, 900_000, early.sum())
    e[late] += rng.integers(1, 900_000, late.sum())
    ev = ev.assign(start_ns=s, end_ns=e)
    path = tmp_path / f"events{seed}.csv"
    ev.to_csv(path, index=False)
    return path, read_events(path, lines=True, siblings=False)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sizes", [(7, 3), (30, 11), (10_000, 10_000)])
def test_clamped_windows_are_the_whole_clamping(tmp_path, seed, sizes):
    """Overlaps clamped window by window: the whole frame's bounds, `clamp_ns`, start order
    and warning, rows moved across windows' edges included."""
    path, ev = _overlapping(tmp_path, seed, 0.15)
    meta = _meta(ev)
    with pytest.warns(UserWarning, match="clamped") as whole_w:
        want = _whole(ev, meta, True, True, True)
    with pytest.warns(UserWarning, match="clamped") as got_w:
        wins = list(prepared_file(path, meta, True, True, True, where="events",
                                  spill_dir=tmp_path, chunk_bytes=500, run_rows=sizes[0],
                                  block_rows=sizes[1]))
    got = pd.concat(wins, ignore_index=True)
    assert (want["clamp_ns"] > 0).sum() > 10
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert [str(w.message) for w in got_w] == [str(w.message) for w in whole_w]


def _accepted(df: pd.DataFrame) -> bool:
    """Whether `phase_tree` accepts the rank (no overlap clamping could not settle)."""
    try:
        phase_tree(df)
    except ContractError:
        return False
    return True


@pytest.mark.slow
def test_where_windows_differ_the_rank_is_refused(tmp_path):
    """Random ranks with 10 % of rows moved: the windows equal the whole frame, or both leave
    an overlap `phase_tree` refuses (a pass of the whole frame clamps all its overlaps at once:
    behind an overlap it cannot settle, rows are clamped differently; seed 37 is such a rank)."""
    differ = []
    for seed in range(28, 40):  # 12 ranks, 37 among them (40 took 96 s of the suite's time)
        path, ev = _overlapping(tmp_path, seed, 0.1)
        meta = _meta(ev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = _whole(ev, meta, True, True, True)
            got = pd.concat(list(prepared_file(path, meta, True, True, True, spill_dir=tmp_path,
                                               chunk_bytes=700, run_rows=7, block_rows=3)),
                            ignore_index=True)
        if not got.equals(want):
            differ.append(seed)
            assert not _accepted(want) and not _accepted(got), seed
    assert 37 in differ  # the case that shows it
