"""`RankEvents.open`'s scan of each rank's file (issue 43): a block of whole lines at a time
(`rank_scan.SCAN_BLOCK_BYTES`), what a file read whole gives, whatever the block size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import nested_steps
from wattlife.attribution import rank_scan
from wattlife.attribution.rank_events import RankEvents


def _scans(path, monkeypatch, block: int):
    monkeypatch.setattr(rank_scan, "SCAN_BLOCK_BYTES", block)
    got = RankEvents.open(path, lambda df, _compiled: df)
    return None if got is None else got.scans


def _file(tmp_path, ev: pd.DataFrame, name: str = "events.csv"):
    ev = ev.assign(local_rank=ev["rank"]) if "local_rank" not in ev.columns else ev
    ev.to_csv(tmp_path / name, index=False)
    return tmp_path / name


@settings(max_examples=15, deadline=None)
@given(steps=st.integers(1, 30), seed=st.integers(0, 9), block=st.integers(64, 4096),
       compile_at=st.sampled_from([None, 0, -1]))
def test_a_scan_in_blocks_is_the_scan_of_the_file_whole(tmp_path_factory, steps, seed, block,
                                                        compile_at) -> None:
    """Rows, run ids, a `compile` row first or last, the median start: the same dict from
    blocks down to a few lines as from one block holding the file."""
    tmp_path = tmp_path_factory.mktemp("scan")
    ev = nested_steps(steps, seed)
    ev = ev[ev["phase"] != "compile"].reset_index(drop=True)
    if compile_at is not None:
        ev.loc[ev.index[compile_at], "phase"] = "compile"
    path = _file(tmp_path, ev)
    with pytest.MonkeyPatch.context() as mp:
        whole, cut = _scans(path, mp, 1 << 30), _scans(path, mp, block)
    assert whole is not None and cut == whole
    assert whole[0]["rows"] == len(ev) and whole[0]["compile"] == (compile_at is not None)
    assert whole[0]["start_median"] == float(np.median(ev["start_ns"]))


@pytest.mark.parametrize("late", ["rank", "host", "local_rank_missing"])
def test_a_second_rank_or_a_missing_local_rank_in_a_late_block(tmp_path, monkeypatch, late
                                                               ) -> None:
    """A file that is not one rank's, seen only in its last block: split into its ranks' parts
    (`rank_split`: the last row a part of its own); a row without a local rank, seen last: the
    rank's local rank unknown (the run's ranks then numbered per host, as `phase_map` does)."""
    ev = nested_steps(20, 1)
    ev = ev.assign(local_rank=ev["rank"].astype("Int64"), step=1.0, items=2.0)
    i = ev.index[-1]
    if late == "rank":
        ev.loc[i, ["rank", "local_rank"]] = [5, 5]
    elif late == "host":
        ev.loc[i, "host"] = "other"
    else:
        ev.loc[i, "local_rank"] = pd.NA
    path = _file(tmp_path, ev)
    for block in (1 << 30, 256):
        scans = _scans(path, monkeypatch, block)
        if late == "local_rank_missing":
            assert scans is not None and [s["local_rank"] for s in scans] == [None]
            continue
        assert scans is not None
        assert [s["rows"] for s in scans] == [len(ev) - 1, 1]
        assert (scans[1]["host"], scans[1]["rank"]) == (str(ev.loc[i, "host"]),
                                                        int(ev.loc[i, "rank"]))


def test_the_scan_parses_a_block_at_a_time(tmp_path, monkeypatch) -> None:
    """No parse is handed the whole file (read whole, a long rank's file held its columns at
    once and pyarrow kept their memory to the end of the run): each holds a block of lines."""
    import pyarrow.csv as pacsv

    path = _file(tmp_path, nested_steps(200, 3))
    sizes: list[int] = []
    real = pacsv.read_csv

    def counted(source, **kw):
        sizes.append(source.size() if hasattr(source, "size") else -1)
        return real(source, **kw)

    monkeypatch.setattr(pacsv, "read_csv", counted)
    assert _scans(path, monkeypatch, 2048) is not None
    line = max(map(len, path.read_bytes().splitlines(keepends=True)))
    assert len(sizes) > 10 and 0 < max(sizes) <= 2048 + 2 * line


@settings(max_examples=25, deadline=None)
@given(starts=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=60),
       epoch=st.booleans(), block=st.integers(8, 4096))
def test_the_median_start_is_np_median_of_the_starts(tmp_path_factory, starts, epoch, block
                                                     ) -> None:
    """The median start, selected from the starts on disk a block at a time: np.median's
    value of the file's starts, odd and even counts, negative and epoch-sized starts alike."""
    tmp_path = tmp_path_factory.mktemp("median")
    s = np.array(starts, np.int64) + (1_700_000_000_000_000_000 if epoch else 0) // 4
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "local_rank": 0, "phase": "p",
                       "start_ns": s, "end_ns": s + 1, "step": np.nan, "items": np.nan})
    ev.to_csv(tmp_path / "events.csv", index=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rank_scan, "MEDIAN_BLOCK_STARTS", 1 + block % 7)
        scans = _scans(tmp_path / "events.csv", mp, block)
    assert scans is not None and scans[0]["start_median"] == float(np.median(s))
