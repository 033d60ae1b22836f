import json
import warnings

import pandas as pd
import pytest
from hypothesis import example, given, settings
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


def test_a_parquet_events_file_with_empty_number_cells_reads_as_its_csv(tmp_path):
    """Missing `items` and `depth` (only steps carry items): NaN, as the CSV's empty cells read
    (a Parquet float column's NaN was refused: "column 'items' expects a number, got nan"); a
    text cell in a number column is still refused."""
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "phase": ["step", "forward"],
                       "start_ns": [1, 1], "end_ns": [9, 5], "step": [0, 0],
                       "items": [32.0, None], "depth": [1.0, None]})
    ev.to_csv(tmp_path / "events.csv", index=False)
    ev.to_parquet(tmp_path / "events.parquet")
    pd.testing.assert_frame_equal(read_events(tmp_path / "events.parquet"),
                                  read_events(tmp_path / "events.csv"))
    ev.assign(items=["32", "x"]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ContractError, match=r"bad.parquet.*column 'items' expects a number, "
                                            r"got 'x'"):
        read_events(tmp_path / "bad.parquet")


@settings(max_examples=80, deadline=None)
# values in the physical range
@given(rows=st.lists(st.tuples(st.integers(0, 2**62), st.floats(0, 5000, allow_nan=False)),
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


# ---------------------------------------------------------------- run metadata and headers

def _meta_doc() -> dict:
    return {"run_id": "r1", "host": "h", "cmd": ["python", "-c", "pass"], "cell": {"repeat": 1},
            "start_ns": 1_700_000_000_000_000_000, "end_ns": 1_700_000_010_000_000_000,
            "workload_start_ns": 1_700_000_002_000_000_000,
            "workload_end_ns": 1_700_000_009_000_000_000,
            "idle_baseline": {"start_ns": 1_700_000_000_000_000_000,
                              "end_ns": 1_700_000_002_000_000_000},
            "exit_code": 0, "gpu_model": None, "driver": None, "sampler": {"rows": 3},
            "sensor_notes": [], "platform": "Linux", "python": "3.12", "libraries": {}}


def test_run_meta_round_trip_keeps_fields_version_and_unknown_keys(tmp_path):
    from wattlife.contracts import META_SCHEMA_VERSION, RunMeta, read_meta, write_meta

    doc = {**_meta_doc(), "nodes": {"a": {"exit_code": 0}}}
    p = write_meta(tmp_path / "meta.json", RunMeta.from_dict(doc))
    written = json.loads(p.read_text())
    assert written["schema_version"] == META_SCHEMA_VERSION
    assert written["nodes"] == {"a": {"exit_code": 0}}  # an unknown key is kept
    m = read_meta(p)
    assert m.schema_version == META_SCHEMA_VERSION and m.run_id == "r1"
    assert m.idle_window == (doc["idle_baseline"]["start_ns"], doc["idle_baseline"]["end_ns"])
    assert m.get("nodes") == {"a": {"exit_code": 0}} and m.cell == {"repeat": 1}
    assert read_meta(write_meta(tmp_path / "again.json", m)) == m


def test_meta_without_schema_version_reads_as_version_1(tmp_path):
    from wattlife.contracts import read_meta

    p = tmp_path / "meta.json"
    p.write_text(json.dumps(_meta_doc()))
    assert read_meta(p).schema_version == 1


def test_committed_reference_meta_files_read():
    from pathlib import Path

    from wattlife.contracts import META_REQUIRED_KEYS, read_meta

    files = sorted(Path(__file__).parents[2].glob("results/reference/**/meta.json"))
    assert files
    for f in files:
        m = read_meta(f)
        assert all(m.get(k) is not None or k in ("gpu_model", "driver") for k in META_REQUIRED_KEYS)


@pytest.mark.parametrize("key,value,match", [
    ("start_ns", "soon", r"key 'start_ns': 'start_ns' expects an integer"),
    ("cell", [1], r"key 'cell': 'cell' expects an object"),
    ("exit_code", True, r"key 'exit_code'"),
    ("idle_baseline", {"start_ns": 1}, r"key 'idle_baseline': 'idle_baseline.end_ns'"),
    ("schema_version", 99, r"key 'schema_version': 'schema_version' 99 is not one"),
])
def test_bad_meta_key_is_named_with_the_file(tmp_path, key, value, match):
    from wattlife.contracts import read_meta, write_meta

    p = tmp_path / "meta.json"
    p.write_text(json.dumps({**_meta_doc(), key: value}))
    with pytest.raises(ContractError, match=str(p).replace(".", r"\.") + ": " + match):
        read_meta(p)
    with pytest.raises(ContractError, match=match):
        write_meta(tmp_path / "out.json", {**_meta_doc(), key: value})


def test_meta_that_is_not_json_names_file_and_line(tmp_path):
    from wattlife.contracts import read_meta

    p = tmp_path / "meta.json"
    p.write_text('{\n "run_id": \n}')
    with pytest.raises(ContractError, match=r"meta.json:3:1: not valid JSON"):
        read_meta(p)


def test_writers_take_their_headers_from_contracts(tmp_path):
    from wattlife import markers
    from wattlife.contracts import (
        EVENTS_COLUMNS,
        EVENTS_EXTRA_COLUMNS,
        EVENTS_HEADER,
        TRACE_COLUMNS,
        TRACE_HEADER,
    )
    from wattlife.devices.base import SensorBackend
    from wattlife.sampler import Sampler

    assert TRACE_HEADER == ",".join(TRACE_COLUMNS) + "\n"
    assert EVENTS_HEADER == ",".join(EVENTS_COLUMNS + EVENTS_EXTRA_COLUMNS) + "\n"

    class One(SensorBackend):
        name = "one"

        def poll(self, now_ns):
            return [(now_ns, "gpu0", "power_w", 1.0, "sim")]

    trace = tmp_path / "trace.csv"
    s = Sampler([One()], trace)
    s.start()
    s.stop()
    assert trace.read_text().splitlines()[0] + "\n" == TRACE_HEADER
    assert list(read_trace(trace).columns) == TRACE_COLUMNS
    events = tmp_path / "events.csv"
    markers.configure(events, run_id="r")
    with markers.phase("forward"):
        pass
    markers.reset()
    assert events.read_text().splitlines()[0] + "\n" == EVENTS_HEADER
    assert list(read_events(events).columns[:len(EVENTS_COLUMNS)]) == EVENTS_COLUMNS


def test_markers_and_sampler_import_without_pandas():
    import subprocess
    import sys

    code = ("import sys, wattlife.markers, wattlife.sampler; "
            "sys.exit('pandas' in sys.modules or 'numpy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_curves_without_source_is_an_error_naming_the_file(tmp_path):
    from wattlife.contracts import read_curves

    p = tmp_path / "curves.csv"
    p.write_text("job,gpu_model,n_gpus,cap_w,throughput,throughput_unit,power_w\n"
                 "a,H200,1,700,10,img/s,600\n")
    with pytest.raises(ContractError, match=r"curves.csv: missing column 'source'"):
        read_curves(p)


# ---------------------------------------------------------------- integer timestamps, exactly

EV_HEADER = "run_id,host,rank,phase,start_ns,end_ns,step,items\n"
NS = 1_796_434_645_354_875_338  # a real run's forward start: 19 digits, above 2**53


def test_a_float_timestamp_is_refused_naming_file_line_and_column(tmp_path):
    """One start_ns in exponent form once made pandas read the whole column as float64: the
    unchanged row's ...338 came back as ...392, silently. Now: an error, nothing read."""
    p = tmp_path / "events.csv"
    p.write_text(EV_HEADER + f"r,h,0,forward,{NS},{NS + 150_123_552},0,\n"
                 f"r,h,0,backward,1.7964346455e18,{NS + 250_287_115},0,\n")
    with pytest.raises(ContractError, match=r"events.csv:3: column 'start_ns' expects integer "
                                            r"nanoseconds .*got '1.7964346455e18'"):
        read_events(p)
    p.write_text(EV_HEADER + f"r,h,0,forward,{NS},{NS + 150_123_552},0,\n")
    assert read_events(p)["start_ns"].tolist() == [NS]


def test_a_float_trace_time_is_refused_in_csv_and_parquet(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text(HEADER + f"{NS},h,gpu0,power_w,100,x\n{NS + 10**7}.0,h,gpu0,power_w,100,x\n")
    with pytest.raises(ContractError, match=r"trace.csv:3: column 't_ns' expects integer "
                                            r"nanoseconds.*\(device gpu0\)"):
        read_trace(p)
    df = pd.DataFrame({"t_ns": [float(NS)], "host": "h", "device": "gpu0", "metric": "power_w",
                       "value": [1.0], "source": "sim"})
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ContractError, match=r"t.parquet: column 't_ns' is stored as float64"):
        read_trace(tmp_path / "t.parquet")


INT64 = st.integers(-(2**63), 2**63 - 1)


def _events_text(spans: list[tuple[int, int]]) -> str:
    return EV_HEADER + "".join(f"r,h,0,p{k},{a},{b},{k},\n" for k, (a, b) in enumerate(spans))


@settings(max_examples=80, deadline=None)
@given(spans=st.lists(st.tuples(INT64, INT64).map(sorted), min_size=1, max_size=30))
@example(spans=[[-(2**63), 2**63 - 1], [NS, NS]])
def test_any_int64_timestamps_survive_read_events_exactly(tmp_path_factory, spans):
    p = tmp_path_factory.mktemp("e") / "events.csv"
    p.write_text(_events_text(spans))
    df = read_events(p)
    assert str(df["start_ns"].dtype) == "int64" and str(df["end_ns"].dtype) == "int64"
    assert list(zip(df["start_ns"], df["end_ns"], strict=True)) == [tuple(s) for s in spans]


@pytest.mark.parametrize("cell,value", [
    ("1796434645354875338", NS), (" +12 ", 12), ("-9223372036854775808", -(2**63)),
    ("9223372036854775807", 2**63 - 1), ("9223372036854775808", None), ("12.0", None),
    ("1.7964346455e18", None), ("", None), ("0x10", None), ("\u0661\u0662", None),
    ("123456789012345678901", None)])
def test_exact_ints_takes_digits_within_int64_only(cell, value):
    from wattlife.contracts import exact_ints

    vals, bad = exact_ints(pd.Series([cell, "7"], dtype=str))
    assert bad.tolist() == [value is None, False]
    assert vals.tolist() == [0 if value is None else value, 7]


FLOAT_FORMS = [lambda v: f"{float(v)!r}", lambda v: f"{v}.0", lambda v: f"{v:.10e}",
               lambda v: f"{v / 1e9:.9f}", lambda v: f"{float(v):E}"]


@settings(max_examples=80, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)).map(sorted),
                      min_size=1, max_size=30),
       data=st.data())
def test_a_row_with_a_float_timestamp_is_refused_with_its_line(tmp_path_factory, spans, data):
    k = data.draw(st.integers(0, len(spans) - 1))
    col = data.draw(st.sampled_from([4, 5]))  # start_ns, end_ns
    form = data.draw(st.sampled_from(FLOAT_FORMS))
    lines = _events_text(spans).splitlines(keepends=True)
    cells = lines[k + 1].split(",")
    cells[col] = form(int(cells[col]))
    lines[k + 1] = ",".join(cells)
    p = tmp_path_factory.mktemp("e") / "events.csv"
    p.write_text("".join(lines))
    name = EV_HEADER.split(",")[col]
    with pytest.raises(ContractError, match=rf"events.csv:{k + 2}: column '{name}' expects "
                                            "integer nanoseconds"):
        read_events(p)
