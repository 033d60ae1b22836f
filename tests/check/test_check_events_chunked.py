"""`wattlife check` reads events files in chunks (issue 43): the rows and findings are those of
one pass over each whole file, wherever the chunk boundaries fall, and the joined table keeps
its text as categories (a day of 8 ranks read as strings took ~6 GB)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.check import check_run
from wattlife.check.events_reading import (
    EVENTS_ALLOW_EMPTY,
    EVENTS_KINDS,
    read_events_file,
    with_file_name,
)
from wattlife.check.reading import read_csv_lines
from wattlife.contracts import streaming
from wattlife.contracts.compact import concat_compact

T0 = 1_700_000_000_000_000_000
HEADER = "run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock,clamp_ns"


def _events(rank: int, n: int = 400, faults: tuple[int, ...] = (), cut: bool = False) -> str:
    """One rank's steps (data_load, forward, backward inside each), with faults at `faults`
    (row numbers): a non-numeric start, an extra field, a step without items, an overlap."""
    rows = [HEADER]
    for k in range(n):
        t = T0 + k * 300_000_000 + rank * 700_000
        rows.append(f"r,h,{rank},step,{t},{t + 280_000_000},{k},256,{rank},0,host,0")
        for j, name in enumerate(("data_load", "forward", "backward")):
            a = t + j * 90_000_000
            rows.append(f"r,h,{rank},{name},{a},{a + 80_000_000},{k},,{rank},1,host,0")
    for i in faults:
        i = 1 + i % (len(rows) - 1)
        kind = (i // 4) % 4
        if kind == 2:
            i = 1 + 4 * ((i - 1) // 4)  # the step of that group: events.step-items
        parts = rows[i].split(",")
        if kind == 0:
            parts[4] = "soon"  # value.type
        elif kind == 1:
            parts.append("extra")  # csv.field-count
        elif kind == 2:
            parts[7] = ""
        elif parts[5].isdigit():
            parts[5] = str(int(parts[5]) + 150_000_000)  # events.overlap
        rows[i] = ",".join(parts)
    text = "\n".join(rows) + "\n"
    return text + "r,h,0,step,17" if cut else text


def _as_text(df: pd.DataFrame) -> pd.DataFrame:
    return df.astype({c: str for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)})


@settings(max_examples=8, deadline=None)
@given(chunk=st.integers(200, 6000), faults=st.lists(st.integers(0, 1600), max_size=30),
       cut=st.booleans())
def test_an_events_file_read_in_chunks_is_the_file_read_whole(tmp_path_factory, chunk, faults,
                                                               cut):
    p = tmp_path_factory.mktemp("ev") / "events.csv"
    p.write_text(_events(0, faults=tuple(faults), cut=cut))
    whole, f_whole = read_csv_lines(p, 5, EVENTS_KINDS, allow_empty=EVENTS_ALLOW_EMPTY)
    parts, f_parts = read_events_file(p, 5, chunk_bytes=chunk)
    assert f_parts == f_whole
    assert whole is not None and parts is not None
    pd.testing.assert_frame_equal(_as_text(parts), _as_text(whole), check_dtype=False)


def test_check_of_events_cut_into_many_chunks_finds_what_one_pass_finds(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.csv").write_text(_events(0, faults=tuple(range(3, 1500, 37)), cut=True))
    (run / "events.rank1.csv").write_text(_events(1, faults=(10, 11, 12, 13, 14, 15)))
    now = T0 + 10**13
    monkeypatch.setattr(streaming, "BATCH_BYTES", 1 << 30)
    once = check_run(run, kind="image_classification", now_ns=now)
    monkeypatch.setattr(streaming, "BATCH_BYTES", 700)
    chunked = check_run(run, kind="image_classification", now_ns=now)
    codes = {f.code for f in once}
    assert {"value.type", "csv.field-count", "csv.truncated-line", "events.step-items",
            "events.overlap"} <= codes
    assert chunked == once


def test_the_joined_events_keep_their_text_as_categories(tmp_path):
    frames = []
    for rank in range(3):
        p = tmp_path / f"events.rank{rank}.csv"
        p.write_text(_events(rank, n=2000))
        df, found = read_events_file(p, 5, chunk_bytes=4096)
        assert df is not None and not found
        frames.append(with_file_name(df, p))
    ev = concat_compact(frames)
    for c in ("run_id", "host", "phase", "clock", "file_name"):
        assert isinstance(ev[c].dtype, pd.CategoricalDtype), c
    assert list(ev["file_name"].cat.categories) == sorted(str(tmp_path / f"events.rank{r}.csv")
                                                          for r in range(3))
    assert ev["start_ns"].dtype == np.int64 and len(ev) == 3 * 2000 * 4
    per_row = ev.memory_usage(deep=True).sum() / len(ev)
    as_strings = _as_text(ev).memory_usage(deep=True).sum() / len(ev)
    assert per_row < 100 < as_strings  # numbers + category codes, against a string a cell


def test_merge_nodes_writes_the_events_and_offsets_the_whole_tables_give(tmp_path):
    """Nodes' events with rank siblings, hosts and phase names that sort differently from their
    order of appearance, text with spaces and an empty cell: the merged events.csv and
    clock_offsets.csv are byte for byte those of the whole tables (`pd.concat` of `read_events`,
    sorted, written), the events now held as categories."""
    from wattlife.contracts import read_events
    from wattlife.merge_nodes import _read_events_compact, clock_offsets, merge_node_runs

    trace_head = "t_ns,host,device,metric,value,source\n"
    traces, events = [], []
    for n, host in enumerate(("zeta", "alpha node")):
        d = tmp_path / host
        d.mkdir()
        rows = [f"{T0 + k * 20_000_000},{host},gpu0,power_w,300.0,sim" for k in range(50)]
        (d / "trace.csv").write_text(trace_head + "\n".join(rows) + "\n")
        for rank in (0, 1):
            text = _events(rank, n=30).replace(",h,", f",{host},").replace("r,", f"run {n},", 1)
            text = text.replace("backward", "z backward" if rank else "backward")
            name = "events.csv" if rank == 0 else "events.rank1.csv"
            (d / name).write_text(text.replace(",host,0\n", ",,0\n", 3))
        traces.append(d / "trace.csv")
        events.append(d / "events.csv")
    out = tmp_path / "merged"
    out.mkdir()
    merge_node_runs(traces, events, out / "trace.csv", out / "events.csv")
    whole = pd.concat([read_events(e) for e in events], ignore_index=True)
    want = whole.sort_values(["start_ns", "host", "rank"], kind="stable").to_csv(index=False)
    assert (out / "events.csv").read_text() == want
    check = clock_offsets(whole)  # the step-end check; the merged table adds the alignment (41)
    merged = pd.read_csv(out / "clock_offsets.csv")
    assert merged[list(check.columns)].to_csv(index=False) == check.to_csv(index=False)
    held = _read_events_compact(events)
    assert isinstance(held["host"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(_as_text(held), whole, check_dtype=False)
