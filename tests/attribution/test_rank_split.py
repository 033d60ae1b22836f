"""A file of several ranks (a merged run's events) split into one part per (host, rank) in one
pass (`rank_split`): each part the file's rows of that rank, in file order, with their types;
attributed one rank at a time as the in-memory path attributes the whole file."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_fixtures import split_files, streamed_trees


@pytest.fixture
def streamed(monkeypatch):
    """Each rank's tree built window by window (`rank_fixtures.streamed_trees`)."""
    return streamed_trees(monkeypatch)


@pytest.fixture
def split(monkeypatch):
    """Files of several ranks split in chunks of 2 kB (`rank_fixtures.split_files`)."""
    return split_files(monkeypatch)


def _tables(tmp_path, monkeypatch, **kw):
    from test_chunked import _both

    return _both(tmp_path, *kw.pop("paths"), monkeypatch, **kw)


@pytest.mark.parametrize("long", [False, True])
def test_a_file_of_several_ranks_attributes_as_the_in_memory_path(tmp_path, monkeypatch, split,
                                                                  streamed, long):
    """One events.csv holding both ranks (a merged run's): split into its ranks' parts, each
    read whole or streamed in windows of 23 rows, the in-memory table exactly; no part left."""
    from test_chunked import _write, _write_meta

    from wattlife.attribution import rank_events

    if not long:
        monkeypatch.setattr(rank_events, "STREAM_ROWS", 1 << 20)
    paths = _write(tmp_path, "zst", per_rank=False)
    _write_meta(tmp_path)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=paths, idle_split=True, n_boot=10)
    assert len(split) == 1 and not split[0].exists()
    assert len(streamed) == (2 if long else 0)
    assert not list(tmp_path.glob(".wattlife-*"))
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def test_a_merged_run_of_two_hosts_attributes_as_the_in_memory_path(tmp_path, monkeypatch, split,
                                                                    streamed):
    """Two nodes of two ranks each, merged by `wattlife merge-nodes` (one events file in start
    order, local ranks written "0.0"), the first row a concurrent `checkpoint_write` of the
    second host's rank, a run id a host: every device's table the in-memory one."""
    from test_chunked import T0, _events, _trace

    from wattlife.cli import main
    from wattlife.contracts import EVENTS_HEADER

    args: dict[str, list[str]] = {"--traces": [], "--events": []}
    for h, s in {"a": 0, "b": 1}.items():
        node = tmp_path / h
        node.mkdir()
        _trace(seed=s).assign(host=h).to_csv(node / "trace.csv", index=False)
        ev = _events(60).assign(host=h, rank=lambda d, s=s: d["rank"] + 2 * s, run_id=f"r{h}")
        if h == "b":
            ev = pd.concat([ev.iloc[[0]].assign(rank=2, phase="checkpoint_write", start_ns=T0,
                                                end_ns=T0 + 10**9), ev])
        ev[EVENTS_HEADER.strip().split(",")].to_csv(node / "events.csv", index=False)
        args["--traces"].append(str(node / "trace.csv"))
        args["--events"].append(str(node / "events.csv"))
    assert main(["merge-nodes", "--traces", *args["--traces"], "--events", *args["--events"],
                 "--trace", str(tmp_path / "trace.csv"),
                 "--events-out", str(tmp_path / "events.csv")]) == 0
    assert ",0.0," in (tmp_path / "events.csv").read_text().splitlines()[1]
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(tmp_path / "trace.csv",
                                                            tmp_path / "events.csv"), n_boot=10)
    assert len(streamed) == 4 and len(split) == 1
    assert {"gpu0", "gpu1", "cpu0"} <= set(chunked["device"])
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def _merged(n_ranks: int, seed: int, quoted: bool) -> pd.DataFrame:
    """`n_ranks` ranks on two hosts, their rows interleaved in end order (as a merged file
    holds them), a run id a host, a `checkpoint_write` of the last rank first; phase names
    with a comma and a line break where `quoted`."""
    import numpy as np

    from synth import nested_steps

    parts = []
    for r in range(n_ranks):
        ev = nested_steps(8 + r, seed + r).assign(host=f"n{r % 2}", rank=r, local_rank=r // 2,
                                                  run_id=f"r{r % 2}", step=float(r), items=2.0)
        parts.append(ev)
    ev = pd.concat(parts, ignore_index=True)
    ev = ev.iloc[np.argsort(ev["end_ns"].to_numpy(), kind="stable")]
    first = ev.iloc[[0]].assign(phase="checkpoint_write", rank=n_ranks - 1,
                                host=f"n{(n_ranks - 1) % 2}", local_rank=(n_ranks - 1) // 2)
    ev = pd.concat([first, ev], ignore_index=True)
    if quoted:
        ev.loc[ev["phase"] == "layer", "phase"] = "layer, norm\nout"
    return ev


@settings(max_examples=10, deadline=None)
@given(n_ranks=st.integers(2, 5), seed=st.integers(0, 9), block=st.integers(64, 4096),
       quoted=st.booleans(), piece=st.integers(1, 200), hold=st.integers(1, 400))
def test_each_part_is_the_files_rows_of_its_rank(tmp_path_factory, n_ranks, seed, block, quoted,
                                                 piece, hold) -> None:
    """Chunks, pieces and rows held of any size, quoted names across chunks: each part's rows
    are `read_events`' rows of its (host, rank), in file order, value and type; the scans count
    them; the parts come in the order of their ranks' first rows that nest; the median start is
    np.median's."""
    import numpy as np

    from wattlife.attribution import rank_split
    from wattlife.attribution.rank_scan import scan_sources, start_median
    from wattlife.contracts import read_events

    tmp = tmp_path_factory.mktemp("split")
    _merged(n_ranks, seed, quoted).to_csv(tmp / "events.csv", index=False)
    whole = read_events(tmp / "events.csv", lines=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rank_split, "SPLIT_BYTES", block)
        mp.setattr(rank_split, "PIECE_ROWS", piece)
        mp.setattr(rank_split, "HOLD_ROWS", hold)
        got = scan_sources(tmp / "events.csv", tmp)
    assert got is not None
    try:
        keys = [(s["host"], s["rank"]) for s in got.scans]
        nests = whole[whole["phase"] != "checkpoint_write"]
        assert keys == list(dict.fromkeys(zip(nests["host"], nests["rank"], strict=True)))
        for part, scan in zip(got.sources, got.scans, strict=True):
            mine = whole[(whole["host"] == scan["host"]) & (whole["rank"] == scan["rank"])]
            pd.testing.assert_frame_equal(part.frame().reset_index(drop=True),
                                          mine.reset_index(drop=True), check_exact=True)
            assert scan["rows"] == len(mine) and scan["run_ids"] == set(mine["run_id"])
            assert scan["compile"] and scan["local_rank"] == int(mine["local_rank"].iloc[0])
            assert start_median(part, scan) == float(np.median(mine["start_ns"]))
    finally:
        got.close()
    assert not list(tmp.glob(".wattlife-*"))


def test_a_rank_with_two_local_ranks_or_a_bad_cell_leaves_nothing(tmp_path) -> None:
    """A rank naming two local ranks: the run's events read whole (None); a bad cell in a
    late chunk: `read_events`' own error. Neither leaves a part on disk."""
    from wattlife.attribution import rank_split
    from wattlife.attribution.rank_scan import scan_sources
    from wattlife.contracts import ContractError, read_events

    ev = _merged(3, 0, False)
    ev.loc[ev.index[-1], "local_rank"] = 7
    ev.to_csv(tmp_path / "events.csv", index=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rank_split, "SPLIT_BYTES", 512)
        assert scan_sources(tmp_path / "events.csv", tmp_path) is None
        bad = _merged(3, 0, False).astype({"items": object})
        bad.loc[bad.index[-3], "items"] = "many"
        bad.to_csv(tmp_path / "events.csv", index=False)
        with pytest.raises(ContractError) as whole:
            read_events(tmp_path / "events.csv")
        with pytest.raises(ContractError, match="many") as split:
            scan_sources(tmp_path / "events.csv", tmp_path)
    assert str(split.value) == str(whole.value)
    assert not list(tmp_path.glob(".wattlife-*"))


@pytest.mark.parametrize("per_rank", [True, False])
def test_parquet_events_attribute_one_rank_at_a_time(tmp_path, monkeypatch, split, streamed,
                                                     per_rank) -> None:
    """Events as Parquet (row groups of 97 rows): each rank's file scanned a row group at a
    time and streamed, or one file of both ranks split; the in-memory table exactly."""
    from test_chunked import _events, _write

    from wattlife.contracts import EVENTS_HEADER

    p, ev_path = _write(tmp_path, "zst")
    for old in tmp_path.glob("events*.csv"):
        old.unlink()
    ev = _events()[EVENTS_HEADER.strip().split(",")]
    groups = list(ev.groupby("rank")) if per_rank else [(0, ev)]
    for rank, g in groups:
        g.to_parquet(tmp_path / ("events.parquet" if rank == 0 else f"events.rank{rank}.parquet"),
                     index=False, row_group_size=97)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(p, tmp_path / "events.parquet"),
                              n_boot=10)
    assert len(streamed) == 2 and len(split) == (0 if per_rank else 1)
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


@pytest.mark.parametrize("how", ["per_rank", "merged", "one_row"])
def test_events_without_a_local_rank_attribute_one_rank_at_a_time(tmp_path, monkeypatch, split,
                                                                  streamed, how) -> None:
    """No `local_rank` column (per-rank files, or one file of two hosts' ranks 0-3), or one row
    without one: the run's ranks numbered per host as `phase_map` numbers them (ranks 2 and 3
    drive gpu0 and gpu1 of host b), each rank read alone; the in-memory table exactly."""
    from test_chunked import _events, _trace

    from wattlife.contracts import EVENTS_HEADER

    tr = pd.concat([_trace(seed=s).assign(host=h) for h, s in (("a", 0), ("b", 1))])
    tr.sort_values("t_ns", kind="stable").to_csv(tmp_path / "trace.csv", index=False)
    ev = pd.concat([_events(60).assign(host=h, rank=lambda d, s=s: d["rank"] + 2 * s)
                    for h, s in (("a", 0), ("b", 1))])
    cols = [c for c in EVENTS_HEADER.strip().split(",") if c != "local_rank" or how == "one_row"]
    if how == "one_row":
        ev = ev.astype({"local_rank": float})
        ev.iloc[5, ev.columns.get_loc("local_rank")] = float("nan")
    if how == "per_rank":
        for k, (_, g) in enumerate(ev.groupby(["host", "rank"])):
            g[cols].to_csv(tmp_path / ("events.csv" if k == 0 else f"events.rank{k}.csv"),
                           index=False)
    else:
        ev.sort_values("start_ns", kind="stable")[cols].to_csv(tmp_path / "events.csv",
                                                               index=False)
    chunked, memory = _tables(tmp_path, monkeypatch, paths=(tmp_path / "trace.csv",
                                                            tmp_path / "events.csv"), n_boot=10)
    assert len(streamed) == 4 and len(split) == (0 if how == "per_rank" else 1)
    devices = set(zip(chunked["host"], chunked["device"], strict=True))
    assert {("b", "gpu1"), ("a", "cpu0")} <= devices
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)
