import warnings

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.contracts import ContractError, read_events, read_trace

HEADER = "t_ns,host,device,metric,value,source\n"


def test_truncated_last_line_is_dropped_with_its_line_number(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text(HEADER + "1,h,gpu0,power_w,100.0,nvml-samples\n2,h,gpu0,power_w,1")
    with pytest.warns(UserWarning, match=r"trace.csv:3: truncated"):
        df = read_trace(p)
    assert len(df) == 1 and df["value"].iloc[0] == 100.0


def test_malformed_row_names_file_line_and_column(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text(HEADER + "1,h,gpu0,power_w,100,x\n2,h,gpu0,power_w,abc,x\n")
    with pytest.raises(ContractError, match=r"trace.csv:3: column 'value' expects a number"):
        read_trace(p)


def test_missing_column_is_named(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text("run_id,host,rank,phase,start_ns\nr,h,0,forward,1\n")
    with pytest.raises(ContractError, match="missing column"):
        read_events(p)


def test_events_end_before_start(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text("run_id,host,rank,phase,start_ns,end_ns,step,items\nr,h,0,forward,10,5,0,\n")
    with pytest.raises(ContractError, match=r"events.csv:2: end_ns before start_ns"):
        read_events(p)


def test_parquet_trace(tmp_path):
    df = pd.DataFrame({"t_ns": [1, 2], "host": "h", "device": "gpu0", "metric": "power_w",
                       "value": [1.0, 2.0], "source": "sim"})
    df.to_parquet(tmp_path / "t.parquet")
    assert read_trace(tmp_path / "t.parquet")["value"].tolist() == [1.0, 2.0]


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2**62), st.floats(0, 5000, allow_nan=False)),  # physical range
                     min_size=1, max_size=30),
       cut=st.integers(0, 40))
def test_any_prefix_of_a_trace_reads_or_fails_clearly(tmp_path_factory, rows, cut):
    """A trace cut at any byte (a killed writer) reads every complete row before the cut."""
    text = HEADER + "".join(f"{t},h,gpu0,power_w,{v!r},sim\n" for t, v in rows)
    cut_at = max(len(HEADER), len(text) - cut)
    p = tmp_path_factory.mktemp("t") / "trace.csv"
    p.write_text(text[:cut_at])
    complete = text[:cut_at].count("\n") - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = read_trace(p)
    assert len(df) == complete
    assert df["t_ns"].tolist() == [t for t, _ in rows[:complete]]
