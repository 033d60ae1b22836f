"""`wattlife check` checks a run's events one rank's file at a time (issue 43): the findings are
those of the checks of all the files joined (same codes, files, lines, order), with every events
defect the checks find, files naming one (host, rank) together, and chunk edges anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from synth import write_check_side_files
from wattlife.check import (
    Finding,
    check_events,
    check_kind_phases,
    check_run,
    check_span,
    check_summary,
    events_run,
    infer_kind,
    warmup_findings,
)
from wattlife.check.events_reading import EVENTS_ALLOW_EMPTY, EVENTS_KINDS, with_file_name
from wattlife.check.reading import READ_CODES, read_csv_lines
from wattlife.check.trace import trace_span
from wattlife.contracts import streaming
from wattlife.contracts.compact import concat_compact

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000
NOW = T0 + 10**13
HEADER = "run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock,clamp_ns\n"
CHILDREN = ("data_load", "h2d", "forward", "backward", "optimizer")


def _rank_rows(host: str, rank: int, steps: int, t0: int) -> list[list[str]]:
    """One rank's rows, in end order as the markers write them: model_load, steps of 0.3 s
    with their five children, a background checkpoint write."""
    rows = [[host, rank, "model_load", t0, t0 + S // 2, "", ""]]
    for k in range(steps):
        t = t0 + S + k * 300_000_000
        for j, name in enumerate(CHILDREN):
            a = t + j * 50_000_000
            rows.append([host, rank, name, a, a + 40_000_000, k, ""])
        rows.append([host, rank, "step", t, t + 280_000_000, k, 8])
    t = t0 + S + steps * 300_000_000
    rows.append([host, rank, "checkpoint_write", t - 200_000_000, t - 100_000_000, "", ""])
    return [[str(c) for c in r] for r in rows]


def _text(rows: list[list[str]], rank_col: int | None = None) -> str:
    return HEADER + "".join(
        f"r,{h},{rk},{ph},{a},{b},{st},{it},{rank_col if rank_col is not None else rk},,host,0\n"
        for h, rk, ph, a, b, st, it in rows)


def _damaged_run(run: Path) -> None:
    """A run of five events files with every defect the events checks find, and a file whose
    (host, rank) is another file's."""
    r0 = _rank_rows("h", 0, 40, T0)
    r0[3][3] = "12345"  # clock.before-2000 (and outside the trace)
    r0[8][4] = str(int(r0[8][3]) - 5)  # events.end-before-start
    r0[20][4] = str(int(r0[20][4]) + 150_000_000)  # events.overlap (out of its step)
    r0[35][4] = str(int(r0[35][4]) + 40_500_000)  # events.overlap-clamped (0.5 ms)
    r0[12][6] = ""  # events.step-items
    r0[18][6] = "0"  # events.step-zero-items
    r0[26][2] = "fwd"  # events.step-children
    (run / "events.csv").write_text(_text(r0))
    r1 = _rank_rows("h", 1, 40, T0 + 700_000)
    r1[5][4] = str(NOW + 10**16)  # clock.future
    r1[-2][3] = str(T0 - S)  # outside the trace and the workload window
    (run / "events.rank1.csv").write_text(_text(r1))
    r2 = [r for r in _rank_rows("other", 2, 10, T0) if r[2] != "model_load"]  # phase-missing
    (run / "events.rank2.csv").write_text(_text(r2))  # host-untraced
    extra = _rank_rows("h", 0, 3, T0 + 30 * S)[1:]  # rank 0 again, in another file
    extra[2][3] = str(int(r0[40][3]) + 1)  # overlaps a step of events.csv
    (run / "events.rank3.csv").write_text(_text(extra))
    r4 = _rank_rows("h", 4, 4, T0)  # steps.no-steady
    r4[-1][4] = str(int(r4[-1][4]) + 10 * S)  # events.concurrent-unfinished
    (run / "events.rank4.csv").write_text(_text(r4))
    # a trace of 0.2-s readings over the same 44 s (the events checks read only its span and
    # hosts): read in 173-byte chunks, the 20-ms one took 85 % of the chunked check's time
    write_check_side_files(run, ("h", "h2"), 220, T0 + 40 * S, 39, 5, period_ns=S // 5)


def _joined_checks(run: Path, kind: str) -> list[Finding]:
    """The events findings of all the files read whole and joined (the path before)."""
    paths = [run / "events.csv", *sorted(run.glob("events.rank*.csv"))]
    frames = []
    for p in paths:
        df, _ = read_csv_lines(p, 5, EVENTS_KINDS, allow_empty=EVENTS_ALLOW_EMPTY)
        assert df is not None
        frames.append(with_file_name(df, p))
    ev = concat_compact(frames)
    ev = ev[(ev["start_ns"].notna() & ev["end_ns"].notna()).to_numpy()]
    ev = ev.astype({"start_ns": np.int64, "end_ns": np.int64, "rank": np.int64})
    ev["phase"], ev["host"] = ev["phase"].astype(str), ev["host"].astype(str)
    tr, _ = read_csv_lines(run / "trace.csv", 5, {"t_ns": "int", "value": "float"})
    meta = json.loads((run / "meta.json").read_text())
    summary = json.loads((run / "work" / "summary.json").read_text())
    sum_file = str(run / "work" / "summary.json")
    f = check_events(ev, NOW, 5) + check_span(trace_span(tr), ev, str(run / "trace.csv"), meta)
    f += check_summary(summary, ev, sum_file)
    f += [Finding(*x[:3], None, x[3])  # type: ignore[misc]
          for x in warmup_findings(ev, summary, str(paths[0]), sum_file)]
    k = infer_kind(meta, summary, ev["phase"]) if kind == "auto" else kind
    return f + check_kind_phases(ev, k, meta, 5)


def _events_part(found: list[Finding], run: Path) -> list[Finding]:
    files = {str(p) for p in run.glob("events*.csv")} | {str(run / "work" / "summary.json")}
    return [x for x in found if x.file in files and x.code not in (*READ_CODES, "columns.missing")]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    _damaged_run(run)
    return run


def test_the_run_holds_every_events_defect(damaged: Path) -> None:
    codes = {x.code for x in _joined_checks(damaged, "auto")}
    assert {"clock.before-2000", "clock.future", "events.end-before-start", "events.overlap",
            "events.overlap-clamped", "events.concurrent-unfinished", "events.step-items",
            "events.step-zero-items", "events.outside-trace", "events.outside-workload",
            "events.host-untraced", "summary.steps", "steps.no-steady",
            "events.compile-unmarked", "summary.step-throughput", "events.phase-missing",
            "events.step-children"} <= codes


@pytest.mark.parametrize(("chunk", "kind"), [(173, "auto"), (1000, "image_classification"),
                                             (1 << 30, "auto")])
def test_events_checked_a_file_at_a_time_find_what_the_joined_files_find(
        damaged: Path, chunk: int, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = _joined_checks(damaged, kind)
    monkeypatch.setattr(streaming, "BATCH_BYTES", chunk)
    got = check_run(damaged, kind=kind, now_ns=NOW)
    assert _events_part(got, damaged) == want
    files = {x.file for x in want if x.code == "events.overlap"}
    assert str(damaged / "events.rank3.csv") in files  # its parent lies in events.csv


def test_the_events_checks_hold_one_rank_file_at_a_time(tmp_path, monkeypatch):
    """Each group checked holds one file, but the files naming one (host, rank): together."""
    _damaged_run(tmp_path)
    seen: list[list[str]] = []
    real = events_run.check_events

    def spy(ev: pd.DataFrame, now_ns: int, max_rows: int = 5) -> list[Finding]:
        seen.append(sorted(Path(str(x)).name for x in ev["file_name"].unique()))
        return real(ev, now_ns, max_rows)

    monkeypatch.setattr(events_run, "check_events", spy)
    check_run(tmp_path, now_ns=NOW)
    assert seen == [["events.csv"], ["events.rank1.csv"], ["events.rank2.csv"],
                    ["events.csv", "events.rank3.csv"], ["events.rank4.csv"]]
