"""Attribution, reading the trace in chunks, gives exactly the table of the in-memory path
(issue 43): traces cut into many chunks, phases crossing chunk boundaries, deconvolved short
phases, every trace form (CSV, gzip, zstd frames, Parquet), and a killed zstd writer."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlife.attribution import attribute_files
from wattlife.attribution import files as attribution_files
from wattlife.attribution.rank_events import RankEvents
from wattlife.contracts import (
    EVENTS_HEADER,
    TRACE_COLUMNS,
    ContractError,
    StreamUnreadable,
    iter_trace,
    read_trace,
    streaming,
    write_meta,
)
from wattlife.contracts.zstd_frames import FrameReader, FrameWriter

T0 = 1_700_000_000_000_000_000
SMALL = 4096  # bytes of CSV a chunk: ~60 rows, so a phase spans many chunks


def _trace(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Two GPUs (20 ms power readings, one duplicate timestamp, a power limit), a CPU with an
    energy counter only, DRAM power, telemetry, and a GPU with one reading; rows interleaved
    in time as a sampler writes them."""
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(n, dtype=np.int64) * 20_000_000 + rng.integers(0, 2_000_000, n)
    parts = []
    for dev, base in (("gpu0", 300.0), ("gpu1", 450.0), ("dram0", 20.0)):
        parts.append(pd.DataFrame({"t_ns": t, "device": dev, "metric": "power_w",
                                   "value": base + 200 * np.sin(np.arange(n) / 7.0) ** 2
                                   + rng.normal(0, 5, n), "source": "nvml-samples"}))
    parts.append(pd.DataFrame({"t_ns": t, "device": "cpu0", "metric": "energy_j",
                               "value": np.cumsum(rng.uniform(1, 3, n)), "source": "rapl"}))
    parts.append(pd.DataFrame({"t_ns": t[::50], "device": "gpu0", "metric": "util_gpu",
                               "value": 50.0, "source": "nvml-poll"}))
    parts.append(pd.DataFrame({"t_ns": t[:2], "device": ["gpu0", "gpu1"],
                               "metric": "power_limit_w", "value": [700.0, 650.0],
                               "source": "nvml-poll"}))
    parts.append(pd.DataFrame({"t_ns": t[5:6], "device": "gpu3", "metric": "power_w",
                               "value": [80.0], "source": "nvml-poll"}))
    dup = parts[0].iloc[[100]].assign(value=999.0)  # same timestamp twice: the last one counts
    df = pd.concat([*parts, dup], ignore_index=True).sort_values("t_ns", kind="stable")
    return df.assign(host="h")[TRACE_COLUMNS]


def _events(n_steps: int = 140, step_ms: int = 300) -> pd.DataFrame:
    """Rank 0 and 1: steps of 0.3 s with data_load/forward/backward/optimizer (forward and
    optimizer shorter than the 20 ms readings: deconvolved), a checkpoint; rank 1 on gpu1."""
    rows = []
    for rank in (0, 1):
        t = T0 + 150_000_000 + rank * 3_000_000
        for i in range(n_steps):
            s = t + i * step_ms * 1_000_000
            marks = [("data_load", 0, 40), ("forward", 40, 52), ("backward", 52, 250),
                     ("optimizer", 250, 262)]
            for name, a, b in marks:
                rows.append((rank, name, s + a * 1_000_000, s + b * 1_000_000, i, "", 1))
            rows.append((rank, "step", s, s + 290_000_000, i, "32", 0))
        end = t + n_steps * step_ms * 1_000_000
        rows.append((rank, "checkpoint", end, end + 5_000_000_000, n_steps, "", 0))
    ev = pd.DataFrame(rows, columns=["rank", "phase", "start_ns", "end_ns", "step", "items",
                                     "depth"])
    return ev.assign(run_id="r", host="h", local_rank=ev["rank"], clock="host", clamp_ns=0)


def _write_events(tmp_path, ev: pd.DataFrame, per_rank: bool) -> Path:
    """events.csv (every rank), or events.csv + events.rank1.csv as the markers write them."""
    cols = EVENTS_HEADER.strip().split(",")
    ev_path = tmp_path / "events.csv"
    if not per_rank:
        ev[cols].to_csv(ev_path, index=False)
        return ev_path
    for rank, g in ev.groupby("rank"):
        g[cols].to_csv(ev_path if rank == 0 else tmp_path / f"events.rank{rank}.csv",
                       index=False)
    return ev_path


def _write_meta(tmp_path) -> None:
    """meta.json: an idle baseline before the first phase, the command's start and end."""
    write_meta(tmp_path / "meta.json", {
        "run_id": "r", "host": "h", "start_ns": T0, "end_ns": T0 + 60 * 10**9,
        "workload_start_ns": T0 + 120_000_000, "workload_end_ns": T0 + 55 * 10**9,
        "idle_baseline": {"start_ns": T0 + 20_000_000, "end_ns": T0 + 120_000_000}})


def _write(tmp_path, form: str, per_rank: bool = True) -> tuple:
    tr, ev = _trace(), _events()
    ev_path = _write_events(tmp_path, ev, per_rank)
    text = tr.to_csv(index=False, lineterminator="\n")
    if form == "csv":
        p = tmp_path / "trace.csv"
        p.write_text(text)
    elif form == "gz":
        p = tmp_path / "trace.csv.gz"
        p.write_bytes(gzip.compress(text.encode()))
    elif form == "zst":
        p = tmp_path / "trace.csv.zst"
        w = FrameWriter(open(p, "wb"))
        lines = text.splitlines(keepends=True)
        for i in range(0, len(lines), 450):  # one frame a flush, as the sampler writes
            w.write("".join(lines[i:i + 450]))
            w.flush()
        w.close()
    else:
        p = tmp_path / "trace.parquet"
        tr.to_parquet(p, row_group_size=500)
    return p, ev_path


def _both(tmp_path, p, ev_path, monkeypatch, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(chunked, in-memory) phases tables of one trace."""
    monkeypatch.setattr(streaming, "BATCH_BYTES", SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunked = attribute_files(p, ev_path, tmp_path / "chunked.csv", **kw)

        def refuse(*a, **k):
            raise StreamUnreadable("in-memory path asked for")

        monkeypatch.setattr(attribution_files, "SpilledTrace", refuse)
        memory = attribute_files(p, ev_path, tmp_path / "memory.csv", **kw)
    monkeypatch.undo()
    return chunked, memory


@pytest.mark.parametrize("form", ["csv", "gz", "zst", "parquet"])
def test_chunked_attribution_equals_the_in_memory_one_exactly(tmp_path, monkeypatch, form):
    """Per-rank events files: read one rank at a time (RankEvents) beside the chunked trace."""
    p, ev_path = _write(tmp_path, form)
    assert sum(1 for _ in iter_trace(p, SMALL)) >= 20 or form == "parquet"
    chunked, memory = _both(tmp_path, p, ev_path, monkeypatch, n_boot=20)
    assert {"deconvolve"} <= set(chunked["method"])  # short phases were deconvolved
    assert len(chunked) > 10 and "gpu3" in set(chunked["device"])  # the one-reading GPU
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


@pytest.mark.parametrize("method", ["integrate", "deconvolve"])
@pytest.mark.parametrize("per_rank", [True, False])
def test_chunked_equals_in_memory_for_each_method(tmp_path, monkeypatch, method, per_rank):
    """Per-rank files, or one events file for both ranks (split into its ranks' parts by
    `RankEvents.open`, removed by `close`)."""
    p, ev_path = _write(tmp_path, "csv", per_rank)
    ranks = RankEvents.open(ev_path, lambda ev, c: ev, spill_dir=tmp_path)
    assert ranks is not None and len(ranks.sources) == 2
    assert len(list(tmp_path.glob(".wattlife-ranks-*"))) == (0 if per_rank else 1)
    ranks.close()
    assert not list(tmp_path.glob(".wattlife-*"))
    chunked, memory = _both(tmp_path, p, ev_path, monkeypatch, method=method, n_boot=10,
                            window_ms=20.0)
    assert set(chunked.loc[chunked["device"].str.startswith("gpu0"), "method"]) == {method}
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def test_streamed_batches_are_the_read_trace(tmp_path):
    p, _ = _write(tmp_path, "zst")
    whole = read_trace(tmp_path / "trace.csv.zst")
    parts = pd.concat(list(iter_trace(p, SMALL)))
    for c in ("host", "device", "metric", "source"):
        parts[c] = parts[c].astype(str)
    pd.testing.assert_frame_equal(parts[TRACE_COLUMNS], whole[TRACE_COLUMNS], check_exact=True)


def test_a_killed_zstd_writer_loses_only_its_unflushed_frame(tmp_path):
    p, _ = _write(tmp_path, "zst")
    data = p.read_bytes()
    full = FrameReader(p).read()
    cut = tmp_path / "cut" / "trace.csv.zst"
    cut.parent.mkdir()
    cut.write_bytes(data[:-9])  # the last frame cut mid-way
    got = FrameReader(cut).read()
    assert full.startswith(got) and got.endswith(b"\n") and len(full) - len(got) < 40_000
    with pytest.warns(UserWarning, match="truncated last line ignored"):
        rows = sum(len(b) for b in iter_trace(cut, SMALL))
    assert rows == got.count(b"\n") - 1


def test_a_float_timestamp_falls_back_to_the_contract_reader(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text("t_ns,host,device,metric,value,source\n"
                 f"{T0},h,gpu0,power_w,100.0,sim\n1.7e18,h,gpu0,power_w,100.0,sim\n")
    with pytest.raises(StreamUnreadable):
        list(iter_trace(p))
    with pytest.raises(ContractError, match=r"trace.csv:3: column 't_ns'"):
        read_trace(p)


def test_an_impossible_reading_names_its_line_in_a_later_chunk(tmp_path):
    tr = _trace()
    tr.iloc[2500, tr.columns.get_loc("value")] = -5.0
    tr.iloc[2500, tr.columns.get_loc("metric")] = "power_w"
    p = tmp_path / "trace.csv"
    tr.to_csv(p, index=False)
    with pytest.raises(ContractError, match=r"trace.csv:2502: .*the chunk read"):
        list(iter_trace(p, SMALL))


def test_one_process_driving_two_gpus_reads_its_events_for_both(tmp_path, monkeypatch):
    """meta.json's `gpus` give local rank 0 both GPUs (one process: `wattlife run` records it so;
    found running `wattlife attribute` after `wattlife run --gpu amdsmi` on a stand-in of two
    GPUs): the one-rank-at-a-time events give gpu1 rank 0's phases, as the in-memory path does
    (the rank's file, read first for the run's head, was cached without the mapping)."""
    p, ev_path = _write(tmp_path, "csv")
    (tmp_path / "events.rank1.csv").unlink()
    _write_meta(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["gpus"] = [{"device": f"gpu{i}", "cuda_ordinal": i, "nvml_index": i, "uuid": None,
                     "pci_bus_id": None, "name": None, "local_rank": 0} for i in (0, 1)]
    write_meta(tmp_path / "meta.json", meta)
    assert RankEvents.open(ev_path, lambda ev, c: ev) is not None
    chunked, memory = _both(tmp_path, p, ev_path, monkeypatch, method="integrate", n_boot=10)
    assert "backward" in set(chunked.loc[chunked["device"] == "gpu1", "phase"])
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


@pytest.mark.parametrize("compiled", [False, True])
def test_chunked_equals_in_memory_with_meta_json_idle_split_and_compile(tmp_path, monkeypatch,
                                                                        compiled):
    """meta.json's wrapper intervals and idle baseline, the warm-up labels of a compiled run
    (compile rows added per rank), with the one-rank-at-a-time events."""
    p, ev_path = _write(tmp_path, "zst")
    _write_meta(tmp_path)
    if compiled:
        (tmp_path / "summary.json").write_text('{"compile": true}')
    chunked, memory = _both(tmp_path, p, ev_path, monkeypatch, idle_split=True, n_boot=10)
    assert {"idle_baseline", "process_startup", "process_exit", "warmup"} <= set(chunked["phase"])
    assert ("compile" in set(chunked["phase"])) == compiled
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


def test_a_cut_gzip_trace_is_the_contract_readers_error(tmp_path):
    """The streaming parser leaves a cut gzip file to read_trace, whose error it was before."""
    p, ev_path = _write(tmp_path, "gz")
    p.write_bytes(p.read_bytes()[:-40])
    with pytest.raises(StreamUnreadable):
        list(iter_trace(p, SMALL))
    with pytest.raises(ContractError, match="not a readable gzip file"):
        attribute_files(p, ev_path, tmp_path / "phases.csv")


@pytest.mark.parametrize("cells", [
    ["007", "-0", "12", "-9223372036854775808", "9223372036854775807"],
    ["1", "+2"], ["1", " 2 "], ["1", "1.0"], ["1", "99999999999999999999"], ["1", ""]])
def test_arrow_int_cells_parse_as_the_exact_path(cells):
    """exact_ints' Arrow fast path (pandas' Arrow-backed strings) gives the values and bad
    cells of its regex path (object strings), or leaves the column to it."""
    from wattlife.contracts import exact_ints

    fast = exact_ints(pd.Series(cells, dtype="str"))
    slow = exact_ints(pd.Series(cells, dtype=object))
    pd.testing.assert_series_equal(fast[0], slow[0], check_exact=True)
    assert (fast[1] == slow[1]).all()


def test_events_number_cells_read_as_before(tmp_path):
    """The events' number columns (digits or empty: Arrow's cast) hold what to_numeric gave."""
    from wattlife.contracts import read_events

    p = tmp_path / "events.csv"
    p.write_text("run_id,host,rank,phase,start_ns,end_ns,step,items,depth\n"
                 f"r,h,0,a,{T0},{T0 + 5},0,,0\nr,h,0,b,{T0},{T0 + 5},12,256,1\n"
                 f"r,h,0,c,{T0},{T0 + 5},3,0.5,-1\n")
    got = read_events(p)
    assert got["items"].tolist()[1:] == [256.0, 0.5] and np.isnan(got["items"].iloc[0])
    assert got["depth"].tolist() == [0.0, 1.0, -1.0] and got["step"].tolist() == [0.0, 12.0, 3.0]


def _gapped(tr: pd.DataFrame) -> pd.DataFrame:
    """The trace with sensor gaps (issue 41): gpu0's power readings stop for 2 s inside the
    steps (point readings: bridged energy), cpu0's energy counter for 1.5 s across a chunk
    boundary (an averaging source), each far above 5 reading periods and 0.5 s."""
    t0 = T0 + 10 * 10**9
    hole0 = ((tr["device"] == "gpu0") & (tr["metric"] == "power_w")
             & tr["t_ns"].between(t0, t0 + 2 * 10**9))
    hole1 = ((tr["device"] == "cpu0") & tr["t_ns"].between(t0 + 20 * 10**9, t0 + 21.5 * 10**9))
    return tr[~(hole0 | hole1)]


@pytest.mark.parametrize("form", ["csv", "zst"])
@pytest.mark.parametrize("per_rank", [True, False])
def test_chunked_equals_in_memory_on_a_trace_with_sensor_gaps(tmp_path, monkeypatch, form,
                                                               per_rank):
    """Sensor gaps (issue 41) in a trace read in chunks: the same gap_s, gap_energy_j,
    covered_fraction and widened interval as the in-memory path, and the same warning."""
    p, ev_path = _write(tmp_path, "csv", per_rank)
    tr = _gapped(_trace())
    text = tr.to_csv(index=False, lineterminator="\n")
    if form == "csv":
        p.write_text(text)
    else:
        p.unlink()
        p = tmp_path / "trace.csv.zst"
        w = FrameWriter(open(p, "wb"))
        lines = text.splitlines(keepends=True)
        for i in range(0, len(lines), 450):
            w.write("".join(lines[i:i + 450]))
            w.flush()
        w.close()
    monkeypatch.setattr(streaming, "BATCH_BYTES", SMALL)
    with pytest.warns(UserWarning, match=r"h/cpu0: 1 gap\(s\).*h/gpu0: 1 gap\(s\)"):
        attribute_files(p, ev_path, tmp_path / "warned.csv", n_boot=10)
    monkeypatch.undo()
    chunked, memory = _both(tmp_path, p, ev_path, monkeypatch, n_boot=10)
    for dev in ("gpu0", "cpu0"):
        rows = chunked[chunked["device"] == dev]
        assert rows["gap_s"].sum() == pytest.approx(
            2.0 if dev == "gpu0" else 1.5, abs=0.05), dev
        assert rows["gap_energy_j"].sum() > 0 and rows["covered_fraction"].min() < 1.0
    assert (chunked.loc[chunked["device"] == "gpu1", "gap_s"] == 0).all()
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)


@pytest.mark.parametrize("per_rank", [True, False])
def test_chunked_reads_quoted_phase_names_as_the_in_memory_path(tmp_path, monkeypatch,
                                                                per_rank):
    """Quoted phase names (issue 41: commas, quotes, line breaks, 'NA') in the events beside a
    trace read in chunks: the names come back as written and the table is the in-memory one."""
    names = {"data_load": "eval, split=val", "backward": 'two\nlines "q"', "optimizer": "NA"}
    ev = _events().replace({"phase": names})
    p, ev_path = _write(tmp_path, "csv", per_rank)
    _write_events(tmp_path, ev, per_rank)
    chunked, memory = _both(tmp_path, p, ev_path, monkeypatch, n_boot=10)
    assert set(names.values()) <= set(chunked["phase"])
    pd.testing.assert_frame_equal(chunked, memory, check_exact=True)
    from wattlife.contracts import read_table

    back = read_table(tmp_path / "chunked.csv", ["phase"])
    assert set(names.values()) <= set(back["phase"])


def test_one_ranks_rows_are_one_frame_for_all_its_devices(tmp_path, monkeypatch):
    """A rank's file read for its devices (issue 43): the phase map is found on one row a file,
    never on the rank's rows (which it copied per key: a day of one rank, 1.4 M rows a copy);
    its GPU and its host's CPU take the one prepared frame, equal to the in-memory map's."""
    from wattlife.attribution import rank_events
    from wattlife.attribution.energy import phase_map
    from wattlife.attribution.tree import clamp_events, timeline

    _, ev_path = _write(tmp_path, "csv")
    seen: list[int] = []

    def counting(ev, *a, **k):
        seen.append(len(ev))
        return phase_map(ev, *a, **k)

    monkeypatch.setattr(rank_events, "phase_map", counting)
    ranks = RankEvents.open(ev_path, lambda ev, c: ev)
    assert ranks is not None
    ranks.map_devices(None, None)
    gpu0, cpu = ranks[("h", "gpu0")], ranks[("h", "host")]
    gpu1 = ranks[("h", "gpu1")]
    assert seen == [2]  # one row a file
    assert gpu0 is cpu
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = phase_map(clamp_events(timeline(_events())))
    for key, got in ((("h", "gpu0"), gpu0), (("h", "gpu1"), gpu1)):
        w = want[key].reset_index(drop=True)
        pd.testing.assert_frame_equal(got.reset_index(drop=True)[["phase", "start_ns", "end_ns"]],
                                      w[["phase", "start_ns", "end_ns"]], check_dtype=False)


def test_each_ranks_events_file_is_read_once(tmp_path, monkeypatch):
    """The file that gives the run's first row (`RankEvents.head`, read before the devices are
    mapped) is kept for its rank's devices, not read a second time (issue 43: a day of one
    rank, 1.4 M rows, read twice was the peak of a long run)."""
    from wattlife.attribution import rank_events

    p, ev_path = _write(tmp_path, "csv")
    reads: list[str] = []
    real = rank_events.read_events

    def counted(path, *a, **k):
        reads.append(Path(path).name)
        return real(path, *a, **k)

    monkeypatch.setattr(rank_events, "read_events", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attribute_files(p, ev_path, tmp_path / "phases.csv", n_boot=5)
    assert sorted(reads) == ["events.csv", "events.rank1.csv"]


def test_a_ranks_tree_is_built_once_and_its_rows_let_go(tmp_path, monkeypatch):
    """`RankEvents.tree`: one tree for all the devices of a rank (its file read once), the
    tree `phase_tree` makes of the rank's rows, and the rows no longer held once it is built
    (issue 43: not kept through the devices' estimation)."""
    import gc
    import weakref

    from wattlife.attribution import rank_events
    from wattlife.attribution.tree import phase_tree

    _, ev_path = _write(tmp_path, "csv")
    frames: list[weakref.ref] = []  # the rows as prepared and clamped: what a rank holds
    real = rank_events.clamp_events

    def watched(*a, **k):
        df = real(*a, **k)
        frames.append(weakref.ref(df))
        return df

    monkeypatch.setattr(rank_events, "clamp_events", watched)
    ranks = RankEvents.open(ev_path, lambda ev, c: ev)
    assert ranks is not None
    ranks.map_devices(None, None)
    gpu, host = ("h", "gpu0"), ("h", "host")
    assert not ranks.only_idle(gpu)
    first = ranks.tree(gpu, "w")
    assert ranks.tree(host, "w") is first and len(frames) == 1
    gc.collect()
    assert all(f() is None for f in frames)  # none held
    again = phase_tree(ranks[gpu])  # asked for its rows: read again
    for f in ("name", "start", "end", "depth", "parent"):
        np.testing.assert_array_equal(getattr(first, f), getattr(again, f))
