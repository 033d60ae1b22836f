"""`wattlife check`: a real run passes; each kind of damage gives its finding with file and line."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import wattlife_sim_run
from synth import T0, events_frame
from wattlife.attribution import phase_tree
from wattlife.check import ERROR, WARNING, check_run, check_runs, nesting, read_csv_lines
from wattlife.contracts import ContractError

# a tiny image-classification-like workload: the phases src/wattlife/workloads/image.py marks
WORK = ("import json, os, pathlib, time\nfrom wattlife.markers import phase, step\n"
        "with phase('model_load'):\n    time.sleep(0.02)\n"
        "for i in range(6):\n"
        "    with step(items=4):\n"
        "        with phase('data_load'):\n            time.sleep(0.005)\n"
        "        with phase('h2d'):\n            pass\n"
        "        with phase('forward'):\n            sum(range(100000))\n"
        "        with phase('backward'):\n            time.sleep(0.02)\n"
        "        with phase('optimizer'):\n            time.sleep(0.005)\n"
        "w = pathlib.Path(os.environ['WATTLIFE_EVENTS']).parent / 'work'\n"
        "w.mkdir(exist_ok=True)\n"
        "(w / 'summary.json').write_text(json.dumps({'steps': 6, 'throughput': 1.0,\n"
        "    'throughput_unit': 'images/s (all ranks)', 'classes': 3}))\n")


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("good") / "run"
    run.mkdir()
    wattlife_sim_run(run, WORK)
    return run


@pytest.fixture
def run(good_run, tmp_path):
    """A fresh copy of the good run to damage."""
    dst = tmp_path / "run"
    shutil.copytree(good_run, dst)
    return dst


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _find(findings, code):
    return [f for f in findings if f.code == code]


def _line_of(path: Path, phase: str, nth: int = 0) -> int:
    """CSV line number (header = 1) of the nth row of `phase` in an events file."""
    hits = [i + 1 for i, ln in enumerate(_lines(path)) if ln.split(",")[3] == phase]
    return hits[nth]


def _set_step_items(path: Path, nth: int, items: str) -> int:
    """Rewrite the `items` of the nth `step` row of an events file; returns its line number."""
    lines = _lines(path)
    n = _line_of(path, "step", nth)
    cols = lines[n - 1].split(",")
    cols[7] = items
    lines[n - 1] = ",".join(cols)
    path.write_text("".join(lines))
    return n


def _unstalled(findings):
    """The findings but `trace.stall`: on a loaded machine the sampler thread of this short run
    may not be scheduled for a few periods, which check reports (a warning, never an error);
    the tests must not depend on the machine's speed."""
    return [f for f in findings if f.code != "trace.stall"]


def test_good_run_passes(good_run):
    findings = check_run(good_run, kind="image_classification")
    assert [f for f in findings if f.severity == ERROR] == [], [f.text() for f in findings]
    assert _unstalled(findings) == [], [f.text() for f in findings]
    # auto finds the kind from work/summary.json's keys and still passes
    assert _unstalled(check_run(good_run)) == []


def test_missing_column(run):
    df = pd.read_csv(run / "trace.csv").drop(columns=["source"])
    df.to_csv(run / "trace.csv", index=False)
    (f,) = _find(check_run(run), "columns.missing")
    assert (f.severity, f.file, f.line) == (ERROR, str(run / "trace.csv"), 1)
    assert "source" in f.message


def test_event_outside_the_trace(run):
    ev = run / "events.csv"
    lines = _lines(ev)
    t_min = pd.read_csv(run / "trace.csv")["t_ns"].min()
    n = _line_of(ev, "model_load")
    cols = lines[n - 1].split(",")
    cols[4] = str(int(t_min) - 5_000_000_000)  # starts 5 s before the sampler's first reading
    lines[n - 1] = ",".join(cols)
    ev.write_text("".join(lines))
    found = _find(check_run(run), "events.outside-trace")
    assert [(f.severity, f.file, f.line) for f in found] == [(ERROR, str(ev), n)]


def test_overlapping_siblings(run):
    ev = run / "events.csv"
    lines = _lines(ev)
    fwd, bwd = _line_of(ev, "forward", 1), _line_of(ev, "backward", 1)
    cols_f, cols_b = lines[fwd - 1].split(","), lines[bwd - 1].split(",")
    cols_f[5] = str(int(cols_b[4]) + 2_000_000)  # forward now ends 2 ms into backward
    lines[fwd - 1] = ",".join(cols_f)
    ev.write_text("".join(lines))
    found = _find(check_run(run), "events.overlap")
    assert [(f.severity, f.file, f.line) for f in found] == [(ERROR, str(ev), bwd)]
    # the phases as recorded, the lines as integers
    assert found[0].message.startswith("phase 'backward' [")
    assert f"overlaps 'forward' ({ev}:{fwd}, [" in found[0].message


def test_sub_ms_cross_clock_overlap_is_a_warning_as_attribution_clamps_it(run):
    """The H200 case: a phase ends 116 µs after the next one's start (two anchors of the GPU
    timeline): attribution clamps it, so check warns (same rule) instead of failing."""
    ev = run / "events.csv"
    lines = _lines(ev)
    fwd, bwd = _line_of(ev, "forward", 1), _line_of(ev, "backward", 1)
    cols_f, cols_b = lines[fwd - 1].split(","), lines[bwd - 1].split(",")
    cols_f[5] = str(int(cols_b[4]) + 116_000)
    lines[fwd - 1] = ",".join(cols_f)
    ev.write_text("".join(lines))
    findings = check_run(run)
    assert not _find(findings, "events.overlap")
    found = _find(findings, "events.overlap-clamped")
    assert [(f.severity, f.file, f.line) for f in found] == [(WARNING, str(ev), bwd)]
    assert "116.0 us" in found[0].message


def test_a_cut_short_gzip_trace_is_a_finding(run):
    """A trace.csv.gz cut short (a copy interrupted) is reported with its file, not raised."""
    tr = pd.read_csv(run / "trace.csv")
    (run / "trace.csv").unlink()
    tr.to_csv(run / "trace.csv.gz", index=False)
    assert not [f for f in check_run(run) if f.severity == ERROR]
    gz = (run / "trace.csv.gz").read_bytes()
    (run / "trace.csv.gz").write_bytes(gz[: len(gz) // 2])
    found = _find(check_run(run), "file.gzip")
    assert [(f.severity, f.file) for f in found] == [(ERROR, str(run / "trace.csv.gz"))]
    assert found[0].message.startswith("not a readable gzip file")


def test_step_without_items(run):
    ev = run / "events.csv"
    n = _set_step_items(ev, 3, "")
    found = _find(check_run(run), "events.step-items")
    assert [(f.severity, f.file, f.line) for f in found] == [(ERROR, str(ev), n)]


def test_step_of_zero_items_is_a_warning(run):
    """A step whose batch was all corrupt images trained nothing: recorded, not an error."""
    ev = run / "events.csv"
    n = _set_step_items(ev, 3, "0")
    findings = check_run(run)
    assert not _find(findings, "events.step-items")
    found = _find(findings, "events.step-zero-items")
    assert [(f.severity, f.file, f.line) for f in found] == [(WARNING, str(ev), n)]


def test_millisecond_timestamps(run):
    ev = run / "events.csv"
    df = pd.read_csv(ev)
    df["start_ns"] //= 1_000_000
    df["end_ns"] //= 1_000_000
    df.to_csv(ev, index=False)
    found = _find(check_run(run, max_rows=3), "clock.before-2000")
    assert found[0].severity == ERROR and found[0].file == str(ev) and found[0].line == 2
    assert "milliseconds" in found[0].message
    assert found[-1].line is None and "more row(s)" in found[-1].message  # capped, counted


def test_missing_meta_key(run):
    meta = json.loads((run / "meta.json").read_text())
    del meta["exit_code"]
    (run / "meta.json").write_text(json.dumps(meta))
    (f,) = _find(check_run(run), "meta.key-missing")
    assert f.severity == ERROR and f.file == str(run / "meta.json") and "exit_code" in f.message


@pytest.mark.parametrize("key,value,code,words", [
    ("start_ns", "1.7e18", "meta.type", "'start_ns' expects an integer"),
    ("idle_baseline", {"start_ns": 1}, "meta.type", "idle_baseline.end_ns"),
    ("schema_version", 99, "meta.schema-version", "99"),
])
def test_meta_contract_problems_are_named(run, key, value, code, words):
    meta = json.loads((run / "meta.json").read_text())
    meta[key] = value
    (run / "meta.json").write_text(json.dumps(meta))
    (f,) = _find(check_run(run), code)
    assert f.severity == ERROR and f.file == str(run / "meta.json") and words in f.message


def test_failed_workload_is_an_error(run):
    meta = json.loads((run / "meta.json").read_text())
    meta["exit_code"] = 137
    (run / "meta.json").write_text(json.dumps(meta))
    (f,) = _find(check_run(run), "meta.exit-code")
    assert f.severity == ERROR and "137" in f.message


def test_truncated_last_line_and_a_broken_middle_line(run):
    tr = run / "trace.csv"
    lines = _lines(tr)
    n = len(lines)
    lines[9] = lines[9].rstrip("\n") + ",extra\n"  # line 10 has 7 fields
    tr.write_text("".join(lines) + lines[5][:20])  # line n + 1 is cut mid-row
    findings = check_run(run)
    (cut,) = _find(findings, "csv.truncated-line")
    assert (cut.severity, cut.file, cut.line) == (WARNING, str(tr), n + 1)
    (bad,) = _find(findings, "csv.field-count")
    assert (bad.severity, bad.file, bad.line) == (ERROR, str(tr), 10)
    assert "7 fields, header has 6" in bad.message


def test_trace_time_going_back(run):
    tr = run / "trace.csv"
    df = pd.read_csv(tr)
    sel = np.flatnonzero(((df["device"] == "gpu0") & (df["metric"] == "power_w")).to_numpy())
    i = sel[5]
    df.loc[i, "t_ns"] = df.loc[sel[3], "t_ns"] - 1
    df.to_csv(tr, index=False)
    found = _find(check_run(run), "clock.not-monotone")
    assert [(f.file, f.line) for f in found] == [(str(tr), i + 2)]


def test_step_lacking_backward(run):
    ev = run / "events.csv"
    lines = _lines(ev)
    bwd = _line_of(ev, "backward", 4)
    step_line = _line_of(ev, "step", 4)
    del lines[bwd - 1]
    ev.write_text("".join(lines))
    found = _find(check_run(run, kind="image_classification"), "events.step-children")
    assert [(f.file, f.line) for f in found] == [(str(ev), step_line - 1)]  # a line moved up
    assert "backward" in found[0].message
    assert _find(check_run(run, kind="none"), "events.step-children") == []


def test_causal_lm_needs_tokenize(run):
    found = _find(check_run(run, kind="causal_lm"), "events.phase-missing")
    assert len(found) == 1 and "tokenize" in found[0].message


def test_cli_exit_codes_and_json(good_run, run, capsys):
    from wattlife.cli import main

    assert main(["check", str(good_run)]) == 0
    out = capsys.readouterr().out
    assert "ok (0 error(s), 0 warning(s))" in out or "[trace.stall]" in out, out
    (run / "meta.json").unlink()
    assert main(["check", "--json", str(good_run), str(run)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(d["run_dir"], d["code"], d["severity"]) for d in doc] == [
        (str(run), "file.missing", "error")]


def test_nesting_hand_made():
    # step [0,100] holds a zero-length data_load at the instant h2d starts, h2d, forward;
    # a second top-level interval overlaps the first step without nesting
    ev = events_frame([("step", T0, T0 + 100), ("data_load", T0 + 10, T0 + 10),
                       ("h2d", T0 + 10, T0 + 20), ("forward", T0 + 20, T0 + 100),
                       ("eval", T0 + 50, T0 + 150)])
    tree = nesting(ev, tol_ns=0)  # a 50 ns overlap: within the default tolerance, clamped
    assert not nesting(ev)["overlap"].any() and nesting(ev)["clamp_ns"].tolist() == [0] * 4 + [50]
    assert tree["depth"].tolist() == [0, 2, 1, 1, 2]  # eval starts inside forward
    assert tree["parent"].tolist() == [-1, 2, 0, 0, 3]
    assert tree["overlap"].tolist() == [False, False, False, False, True]
    # per rank: the same intervals on another rank never interact
    two = pd.concat([ev.iloc[:4], events_frame([("eval", T0 + 50, T0 + 150)], rank=1)],
                    ignore_index=True)
    assert not nesting(two, tol_ns=0)["overlap"].any()


def test_check_runs_reports_every_run(good_run, tmp_path):
    rc, text = check_runs([good_run, tmp_path / "nope"])
    assert rc == 1
    assert f"{good_run}: ok" in text and "not a directory" in text


def test_bad_cells_are_found_on_their_lines(run):
    tr, ev = run / "trace.csv", run / "events.csv"
    lines = _lines(tr)
    cols = lines[6].split(",")
    cols[4] = "n/a"  # line 7: value not a number
    lines[6] = ",".join(cols)
    tr.write_text("".join(lines))
    lines = _lines(ev)
    cols = lines[2].split(",")
    cols[4] = ""  # line 3: start_ns empty
    lines[2] = ",".join(cols)
    ev.write_text("".join(lines))
    found = _find(check_run(run), "value.type")
    assert sorted((f.file, f.line) for f in found) == sorted([(str(tr), 7), (str(ev), 3)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=25))
def test_nesting_agrees_with_attribution(spans):
    """On random intervals (nested or not), `nesting` finds an overlap exactly when attribution's
    phase_tree refuses the events, and otherwise the same depths and parents."""
    ev = events_frame([(f"p{i}", T0 + a, T0 + a + d) for i, (a, d) in enumerate(spans)])
    tree = nesting(ev, tol_ns=0)  # every overlap here is far below the default tolerance
    try:
        ref = phase_tree(ev)
    except ContractError:
        assert tree["overlap"].any()
        return
    assert not tree["overlap"].any()
    # phase_tree sorts by (start, -end); map its positions back to ev's labels by name
    label = {name: i for i, name in enumerate(ev["phase"])}
    order = [label[n] for n in ref.name]
    assert tree["depth"].to_numpy()[order].tolist() == ref.depth.tolist()
    parents = [-1 if p < 0 else order[p] for p in ref.parent]
    assert tree["parent"].to_numpy()[order].tolist() == parents


def test_per_rank_events_files_are_checked_together(run):
    ev = pd.read_csv(run / "events.csv")
    ev.assign(rank=1, local_rank=1).to_csv(run / "events.rank1.csv", index=False)
    assert _unstalled(check_run(run, kind="image_classification")) == []
    n = _set_step_items(run / "events.rank1.csv", 2, "-1")
    found = _find(check_run(run), "events.step-items")
    assert [(f.file, f.line) for f in found] == [(str(run / "events.rank1.csv"), n)]


def test_a_float_timestamp_is_a_value_error_and_the_other_rows_stay_exact(tmp_path):
    """An int column is parsed from its digits: a float cell is reported at its line, and the
    other rows keep every nanosecond (pandas once read the column as float64: ...338 -> ...392)."""
    p = tmp_path / "events.csv"
    ns = 1_796_434_645_354_875_338
    p.write_text("run_id,host,rank,phase,start_ns,end_ns,step,items\n"
                 f"r,h,0,forward,{ns},{ns + 150_123_552},0,\n"
                 f"r,h,0,backward,1.7964346455e18,{ns + 250_287_115},0,\n")
    df, found = read_csv_lines(p, 5, {"start_ns": "int", "end_ns": "int", "rank": "int"})
    assert [(f.code, f.line) for f in found] == [("value.type", 3)]
    assert "'start_ns' expects integer nanoseconds" in found[0].message
    assert df["start_ns"].iloc[0] == ns and pd.isna(df["start_ns"].iloc[1])
    assert df["end_ns"].tolist() == [ns + 150_123_552, ns + 250_287_115]


@settings(max_examples=60, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)).map(sorted),
                      min_size=1, max_size=20), data=st.data())
def test_check_reads_int64_times_exactly_and_reports_a_float_one(tmp_path_factory, spans, data):
    """Every int64 cell read exactly; a cell in float form (exponent, decimal point) is a
    `value.type` error at its line, whatever the column's other values."""
    text = "run_id,host,rank,phase,start_ns,end_ns,step,items\n" + "".join(
        f"r,h,0,p,{a},{b},0,\n" for a, b in spans)
    p = tmp_path_factory.mktemp("e") / "events.csv"
    kinds = {"start_ns": "int", "end_ns": "int", "rank": "int"}
    p.write_text(text)
    df, found = read_csv_lines(p, 5, kinds)
    assert not found and [list(r) for r in zip(df["start_ns"], df["end_ns"], strict=True)] == spans
    k = data.draw(st.integers(0, len(spans) - 1))
    form = data.draw(st.sampled_from(["{:.12e}", "{}.0", "{:.3E}"]))
    lines = text.splitlines(keepends=True)
    cells = lines[k + 1].split(",")
    cells[4] = form.format(int(cells[4]))
    lines[k + 1] = ",".join(cells)
    p.write_text("".join(lines))
    df, found = read_csv_lines(p, 5, kinds)
    assert [(f.code, f.line) for f in found] == [("value.type", k + 2)]
    assert df["end_ns"].tolist() == [b for _, b in spans]
