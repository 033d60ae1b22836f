"""Phase names: any name a marker accepts is written to events.csv and read back identically
(the contract reader and `wattlife check`), whatever it holds (commas, quotes, line breaks,
non-ASCII, spaces); a name no file can hold back is refused by the marker at once, in one line.

Before: `phase("eval, split=val")` wrote an unquoted row, the reader failed with "column
'start_ns' expects integer nanoseconds" and the run could not be attributed."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import T0, trace_frame
from wattlife import markers
from wattlife.attribution import attribute_energy
from wattlife.check import read_csv_lines
from wattlife.contracts import EVENTS_TYPES, read_events

MS = 1_000_000

# every character a str may hold: line breaks, quotes, separators, non-ASCII, surrogates, NUL
NAMES = st.text(st.characters(codec=None), max_size=12)
AWKWARD = ["eval, split=val", 'say "hi"', "two\nlines", "cr\rlf\r\n", " padded ", "ünïcødé ✓",
           "NA", "nan", "null", '"', ",", "\n", "#comment", "a\tb"]


def _record(tmp_path, names, run_id="r1"):
    """Record each name as one phase (the same run, in order); the events path."""
    path = tmp_path / "events.csv"
    markers.configure(path, run_id=run_id)
    for name in names:
        with markers.phase(name):
            pass
    markers.reset()
    return path


def _read_back(path):
    ev = read_events(path)
    checked, findings = read_csv_lines(path, 5, {c: k for c, k in EVENTS_TYPES.items()},
                                       allow_empty=("items",))
    assert not [f for f in findings if f.severity == "error"], findings
    return list(ev["phase"]), list(checked["phase"].astype(str)), set(ev["run_id"])


@pytest.mark.parametrize("name", AWKWARD)
def test_an_awkward_name_is_written_and_read_back_identically(tmp_path, name):
    got, checked, run_ids = _read_back(_record(tmp_path, ["setup", name, "step"]))
    assert got == ["setup", name, "step"] == checked
    assert run_ids == {"r1"}


def test_a_run_id_with_a_comma_and_quotes_is_read_back(tmp_path):
    _, _, run_ids = _read_back(_record(tmp_path, ["setup"], run_id='r, "1"'))
    assert run_ids == {'r, "1"'}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(NAMES, min_size=1, max_size=4))
def test_any_name_is_read_back_identically_or_refused_at_once(tmp_path_factory, names):
    from wattlife.contracts import phase_name_problem

    tmp = tmp_path_factory.mktemp("names")
    accepted = [n for n in names if phase_name_problem(n) is None]
    for bad in set(names) - set(accepted):
        markers.configure(tmp / "refused.csv")
        with pytest.raises(ValueError) as err:
            with markers.phase(bad):
                pass
        assert "\n" not in str(err.value).strip() and "phase name" in str(err.value)
        markers.reset()
    if accepted:
        got, checked, _ = _read_back(_record(tmp, accepted))
        assert got == accepted == checked


def test_only_unwritable_names_are_refused():
    from wattlife.contracts import phase_name_problem

    assert phase_name_problem("") and phase_name_problem("a\0b") and phase_name_problem("\ud800")
    assert phase_name_problem(3)
    for name in AWKWARD:
        assert phase_name_problem(name) is None


def test_a_run_with_a_comma_in_a_phase_name_is_attributed(tmp_path):
    """The issue's case end to end: the events with `eval, split=val` give that phase its energy."""
    path = tmp_path / "events.csv"
    path.write_text("")
    markers.configure(path, run_id="r")
    rec = markers.get_recorder()
    rows = [("step", 0, 400), ("eval, split=val", 400, 900)]
    for name, a, b in rows:  # exact times: write the rows as the recorder does
        op = rec.begin(name)
        rec._emit(op, T0 + a * MS, T0 + b * MS, "", "host")
        rec._stack.pop()
    markers.reset()
    t = T0 + np.arange(0, 101) * 10 * MS
    out = attribute_energy(trace_frame(t, np.full(len(t), 100.0), "gpu0"), read_events(path),
                           method="integrate").set_index("phase")
    assert out.loc["eval, split=val", "energy_j"] == pytest.approx(50.0, rel=0.05)


def test_rows_after_a_multi_line_name_are_named_by_their_own_line(tmp_path):
    path = _record(tmp_path, ["a\nb\nc", "d"])
    ev = read_events(path, lines=True)
    checked, _ = read_csv_lines(path, 5, {c: k for c, k in EVENTS_TYPES.items()},
                                allow_empty=("items",))
    assert list(ev["line_no"]) == [2, 5] == list(checked["line_no"])


@pytest.mark.parametrize("name", ["NA", "null", "nan", "eval, split=val", "two\nlines", 'q"t'])
def test_a_phase_name_survives_phases_csv(tmp_path, name):
    """phases.csv (pandas' writer) and its readers (aggregate, waiting, downloads: read_table)
    give the name back, never a missing value."""
    from wattlife.contracts import PHASES_COLUMNS, read_table, write_table

    t = T0 + np.arange(0, 101) * 10 * MS
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "phase": [name],
                       "start_ns": [T0 + 100 * MS], "end_ns": [T0 + 600 * MS], "step": 0,
                       "items": np.nan})
    out = attribute_energy(trace_frame(t, np.full(len(t), 100.0), "gpu0"), ev,
                           method="integrate")
    write_table(out, tmp_path / "phases.csv", PHASES_COLUMNS)
    back = read_table(tmp_path / "phases.csv", PHASES_COLUMNS)
    assert name in set(back["phase"]) and back["phase"].notna().all()


def test_quoted_names_in_several_rank_files_are_read_together(tmp_path):
    """events.csv and events.rank1.csv, each with quoted names: read as one table, each row
    named by its own file's line (before: pd.concat failed comparing the files' line arrays)."""
    head = "run_id,host,rank,phase,start_ns,end_ns,step,items,depth\n"
    (tmp_path / "events.csv").write_text(
        head + f'r,h,0,"a, b",{T0},{T0 + 5},0,,0\nr,h,0,c,{T0},{T0 + 5},1,,0\n')
    (tmp_path / "events.rank1.csv").write_text(
        head + f'r,h,1,"x\ny",{T0},{T0 + 5},0,,0\nr,h,1,z,{T0},{T0 + 5},1,,0\n')
    ev = read_events(tmp_path / "events.csv", lines=True)
    assert list(ev["phase"]) == ["a, b", "c", "x\ny", "z"]
    assert list(ev["line_no"]) == [2, 3, 2, 4]
