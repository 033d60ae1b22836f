"""`wattlife check` reads a Parquet trace row group by row group (issue 43): the findings of one
read of the whole table, every row check's fault included (a Parquet table has no lines: its
findings name the file, never a line), wherever the row groups end."""

from __future__ import annotations

import numpy as np
import pytest
from test_check_chunked import T0, _faulty_trace

from wattlife.check import check_run, check_trace, run_dir
from wattlife.check.reading import read_csv_lines
from wattlife.check.trace import check_gaps

NOW = T0 + 10**13


@pytest.mark.parametrize("row_group", [7, 250, 1 << 20])
def test_a_parquet_trace_in_row_groups_finds_what_one_read_finds(tmp_path, monkeypatch,
                                                                 row_group):
    (tmp_path / "t.csv").write_text(_faulty_trace())
    tab, _ = read_csv_lines(tmp_path / "t.csv", 5, {"t_ns": "int", "value": "float"})
    assert tab is not None
    text = ["host", "device", "metric", "source"]
    tab = tab.drop(columns="line_no").astype({c: str for c in text})
    run = tmp_path / "run"
    run.mkdir()
    path = run / "trace.parquet"
    tab.to_parquet(path, row_group_size=row_group)
    (run / "events.csv").write_text("run_id,host,rank,phase,start_ns,end_ns,step,items\n"
                                    f"r,h,0,model_load,{T0 + 10**9},{T0 + 2 * 10**9},,\n")
    raw, _ = read_csv_lines(path)
    assert raw is not None
    tr = raw[raw["t_ns"].notna()].astype({"t_ns": np.int64})
    want = check_trace(tr, str(path), NOW, 5) + check_gaps(tr, str(path))
    assert {"clock.not-monotone", "trace.value", "trace.source-unknown", "trace.device-name",
            "trace.energy-falls"} <= {x.code for x in want}
    assert all(x.line is None for x in want)
    whole = run_dir.read_csv_lines

    def no_whole_trace(p, *a, **k):  # type: ignore[no-untyped-def]
        assert p != path, "the Parquet trace was read whole"
        return whole(p, *a, **k)

    monkeypatch.setattr(run_dir, "read_csv_lines", no_whole_trace)
    got = [x for x in check_run(run, kind="none", now_ns=NOW) if x.file == str(path)]
    assert got == want
