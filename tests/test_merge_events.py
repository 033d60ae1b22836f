"""`merge-nodes` sorts the events by an external sort of the files read in chunks (issue 43):
the merged events.csv is byte for byte the in-memory sort of all of them (`pd.concat` of
`read_events`, a stable sort, `to_csv`), whatever the chunk, run, block and fan-in sizes, with
ties of (start, host, rank) within and across files and chunks, a file naming two hosts, clock
shifts; no file is read whole, the step ends are those of the files read whole, and files
whose chunks' types differ (a Parquet file's row groups) are merged whole alike."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wattlife import merge_events
from wattlife.contracts import read_events
from wattlife.merge_nodes import _read_events_compact, merge_node_runs, shift_hosts

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
HEADER = "run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock,clamp_ns\n"


def _file(rng: np.random.Generator, hosts: tuple[str, ...], rank: int, n: int) -> str:
    """`n` rows of coarse random starts (many ties), in end order as the markers write them."""
    rows = []
    for k in range(n):
        a = T0 + int(rng.integers(0, 40)) * MS
        b = a + int(rng.integers(0, 5)) * MS
        phase = ("step", "forward", "z backward")[k % 3]
        items = "8" if phase == "step" else ""
        host = hosts[k % len(hosts)]
        rows.append((b, f"r,{host},{rank},{phase},{a},{b},{k // 3},{items},{rank},,host,0\n"))
    return HEADER + "".join(r for _, r in sorted(rows, key=lambda x: x[0]))


def _nodes(tmp: Path) -> tuple[list[Path], list[Path], list[Path]]:
    rng = np.random.default_rng(3)
    traces, events, metas = [], [], []
    for host, steps in (("zeta", 0), ("alpha", 2), ("mid", 1)):
        d = tmp / host
        d.mkdir()
        rows = "".join(f"{T0 + k * 20 * MS},{host},gpu0,power_w,300.0,sim\n" for k in range(5))
        (d / "trace.csv").write_text("t_ns,host,device,metric,value,source\n" + rows)
        hosts = (host, "beta") if host == "mid" else (host,)  # a file naming two hosts
        (d / "events.csv").write_text(_file(rng, hosts, 0, 60))
        (d / "events.rank1.csv").write_text(_file(rng, (host,), 1, 45))
        (d / "meta.json").write_text(json.dumps({"host": host, "clock": {
            "uncertainty_ns": 1000, "wall_steps": [{"step_ns": 3 * MS}] * steps}}))
        traces.append(d / "trace.csv")
        events.append(d / "events.csv")
        metas.append(d / "meta.json")
    return traces, events, metas


pytestmark = pytest.mark.filterwarnings("ignore:node clocks disagree")


@pytest.mark.parametrize("block", [1, 4, 1 << 15])
def test_merged_events_are_the_in_memory_sort_byte_for_byte(tmp_path, monkeypatch, block):
    traces, events, metas = _nodes(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(merge_events, "MERGE_BLOCK_ROWS", block)
    check = merge_node_runs(traces, events, out / "trace.csv", out / "events.csv", metas=metas)
    shifts = dict(zip(check["host"], (check["shift_ms"] * MS).round().astype(int), strict=True))
    assert set(shifts.values()) != {0}
    ev = shift_hosts(_read_events_compact(events), shifts, ["start_ns", "end_ns"])
    want = ev.sort_values(["start_ns", "host", "rank"], kind="stable").to_csv(index=False)
    got = (out / "events.csv").read_text()
    assert got == want
    assert len(got.splitlines()) == 1 + 3 * (60 + 45)


def test_files_of_other_columns_are_merged_in_memory_alike(tmp_path):
    traces, events, _ = _nodes(tmp_path)
    extra = events[1].with_name("events.rank1.csv")
    df = pd.read_csv(extra, dtype=str, keep_default_na=False)
    df.assign(note="x").to_csv(extra, index=False)  # a column only this file has
    out = tmp_path / "out"
    out.mkdir()
    check = merge_node_runs(traces, events, out / "trace.csv", out / "events.csv")
    shifts = dict(zip(check["host"], (check["shift_ms"] * MS).round().astype(int), strict=True))
    ev = shift_hosts(_read_events_compact(events), shifts, ["start_ns", "end_ns"])
    want = ev.sort_values(["start_ns", "host", "rank"], kind="stable").to_csv(index=False)
    assert (out / "events.csv").read_text() == want


def _in_memory(events: list[Path], shifts: dict[str, int]) -> str:
    """The merged events.csv of the files read whole: `pd.concat`, a stable sort, `to_csv`."""
    ev = pd.concat([read_events(p, siblings=False) for p in merge_events.events_paths(events)],
                   ignore_index=True)
    ev = shift_hosts(ev, shifts, ["start_ns", "end_ns"])
    return str(ev.sort_values(["start_ns", "host", "rank"], kind="stable").to_csv(index=False))


def _merged(tmp: Path, monkeypatch: pytest.MonkeyPatch, sizes: tuple[int, int, int, int, int],
            files: tuple[list[Path], list[Path], list[Path]]) -> tuple[str, dict[str, int]]:
    """merge-nodes of the files with these chunk bytes, run rows, block rows, write rows and
    fan-in, every whole read of an events file refused; the merged events.csv, the shifts."""
    chunk, run, block, write, fan_in = sizes
    for name, value in (("CHUNK_BYTES", chunk), ("RUN_ROWS", run), ("MERGE_BLOCK_ROWS", block),
                        ("WRITE_ROWS", write)):
        monkeypatch.setattr(merge_events, name, value)
    monkeypatch.setattr(merge_events, "FAN_IN", fan_in)

    def whole(*args: object, **kw: object) -> None:
        raise AssertionError(f"an events file read whole: {args}")

    monkeypatch.setattr(merge_events, "read_events", whole)
    traces, events, metas = files
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    check = merge_node_runs(traces, events, out / "trace.csv", out / "events.csv", metas=metas)
    shifts = dict(zip(check["host"], (check["shift_ms"] * MS).round().astype(int), strict=True))
    monkeypatch.undo()
    return (out / "events.csv").read_text(), shifts


def test_files_cut_into_many_chunks_and_runs_merge_as_in_memory(tmp_path, monkeypatch):
    """Chunks of ~4 rows, runs of 7 rows (45 runs, merged 3 at a time: four passes), blocks of
    2: ties cross every chunk and run boundary; the bytes are the in-memory merge's."""
    files = _nodes(tmp_path)
    got, shifts = _merged(tmp_path, monkeypatch, (300, 7, 2, 5, 3), files)
    assert set(shifts.values()) != {0}
    want = _in_memory(files[1], shifts)
    assert got == want
    ev = pd.read_csv(io.StringIO(got))
    key = ev[["start_ns", "host", "rank"]]
    assert key.duplicated().sum() > 30  # many ties, each kept in file order
    assert ev["host"].nunique() == 4 and ev["rank"].nunique() == 2


def test_step_ends_from_chunks_are_the_whole_files(tmp_path, monkeypatch):
    """`spill_events`' step ends, its chunks a few rows each: those of the files read whole."""
    _, events, _ = _nodes(tmp_path)
    paths = merge_events.events_paths(events)
    whole = pd.concat([read_events(p, siblings=False) for p in paths], ignore_index=True)
    st = whole[whole["phase"] == "step"]
    want = st.groupby(["host", "step"])["end_ns"].min().rename("end_ns").reset_index()
    monkeypatch.setattr(merge_events, "CHUNK_BYTES", 200)
    spill = merge_events.spill_events(paths, tmp_path)
    assert len(spill.chunks) > 3 * len(paths)
    pd.testing.assert_frame_equal(spill.steps.drop(columns="phase"), want, check_exact=True)
    assert spill.hosts == sorted(whole["host"].unique()) and not spill.whole


def _parquet(df: pd.DataFrame, path: Path) -> None:
    """`df` as a Parquet file of row groups of 10 rows, without pandas' metadata (as another
    writer makes it: an integer column with missing cells reads as float64)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    pq.write_table(table, path, row_group_size=10)


def test_a_parquet_file_whose_groups_type_a_column_apart_is_merged_whole_alike(tmp_path):
    """Parquet events files whose `note` column (integers) has missing cells in their first row
    group only: their chunks come as float64 then int64, the files whole as float64 ("4.0"):
    merged whole, the bytes of the in-memory merge."""
    traces, events, metas = _nodes(tmp_path)
    for name in ("events", "events.rank1"):
        src = events[0].with_name(f"{name}.csv")
        # no missing float cells: `read_events` refuses those of a Parquet file (NaN as text)
        df = read_events(src, siblings=False).fillna({"items": 0.0, "depth": 0.0})
        note = pd.array([None if k in (3, 5) else k for k in range(len(df))], dtype="Int64")
        _parquet(df.assign(note=note), src.with_suffix(".parquet"))
        src.unlink()
    events[0] = events[0].with_suffix(".parquet")
    one = [events[0].with_name("events.rank1.parquet")]
    (tmp_path / "s").mkdir()
    assert merge_events.spill_events(one, tmp_path / "s").whole  # this file's groups alone
    out = tmp_path / "out"
    out.mkdir()
    check = merge_node_runs(traces, events, out / "trace.csv", out / "events.csv", metas=metas)
    shifts = dict(zip(check["host"], (check["shift_ms"] * MS).round().astype(int), strict=True))
    got = (out / "events.csv").read_text()
    assert got == _in_memory(events, shifts)
    assert got.count(",4.0\n") == 2  # the files' type whole: float


@pytest.mark.slow
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(60, 3000), run=st.integers(1, 80), block=st.integers(1, 40),
       write=st.integers(1, 200), fan_in=st.integers(2, 6))
def test_any_chunk_run_and_block_sizes_merge_as_in_memory(tmp_path_factory, chunk, run, block,
                                                          write, fan_in):
    """Any chunk bytes, run, block and write rows, fan-in: the in-memory merge's bytes."""
    tmp = tmp_path_factory.mktemp("merge")
    files = _nodes(tmp)
    with pytest.MonkeyPatch.context() as mp:
        got, shifts = _merged(tmp, mp, (chunk, run, block, write, fan_in), files)
    assert got == _in_memory(files[1], shifts)
