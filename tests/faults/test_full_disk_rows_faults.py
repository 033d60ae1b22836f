"""A full disk that cuts a row in the middle and never frees up (issue #29): the file keeps every
complete row and ends on a row boundary, the cut row is whole in the fallback file, and the counts
in the summary (what meta.json records) are exact. The disk is simulated at `os.write`, as in
test_run_faults.py: half of one write gets out, then ENOSPC."""

import errno
import os

import pytest

from wattlife import safewrite
from wattlife.contracts import read_events


def _disk_fills_mid_row(monkeypatch, after_rows: int, name: str):
    """Only the disk of the file called `name` fills (the fallback file's is fine)."""
    real = os.write
    state = {"rows": 0, "full": False}

    def write(fd, data):
        if not os.readlink(f"/proc/self/fd/{fd}").endswith("/" + name):
            return real(fd, data)
        if state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        if state["rows"] >= after_rows:  # this write is cut in the middle of its first row
            state["full"] = True
            return real(fd, bytes(data[:len(data) // 2 + 1]))
        state["rows"] += bytes(data).count(b"\n")
        return real(fd, data)

    monkeypatch.setattr(safewrite.os, "write", write)


@pytest.mark.parametrize("rows_before", [1, 5])
def test_a_row_cut_by_a_full_disk_is_never_left_half(tmp_path, monkeypatch, rows_before):
    """Before: the file ended in a partial line and the cut row was dropped (rows_dropped 1)."""
    monkeypatch.setattr(safewrite.tempfile, "tempdir", str(tmp_path))
    _disk_fills_mid_row(monkeypatch, rows_before + 1, "t.csv")  # + the header
    out = safewrite.SafeAppender(tmp_path / "t.csv", "a,b\n", "test")
    for k in range(10):
        out.write(f"{k},{'x' * 20}\n")
    s = out.close()
    text = (tmp_path / "t.csv").read_text()
    assert text.endswith("\n") and text.count("\n") == rows_before + 1
    assert s["rows_written"] == rows_before and s["rows_dropped"] == 0
    assert s["rows_in_fallback"] == 10 - rows_before
    fallback = open(s["fallback"]).read().splitlines()
    assert fallback[0] == "a,b" and fallback[1] == f"{rows_before},{'x' * 20}"  # the cut row whole
    assert [r.split(",")[0] for r in text.splitlines()[1:] + fallback[1:]] == \
        [str(k) for k in range(10)]


def test_markers_on_a_disk_that_fills_mid_row_keep_every_row(tmp_path, monkeypatch):
    from wattlife import markers

    monkeypatch.setattr(safewrite.tempfile, "tempdir", str(tmp_path))
    _disk_fills_mid_row(monkeypatch, 4, "events.csv")
    rec = markers.configure(tmp_path / "events.csv", run_id="r")
    for _ in range(8):
        with markers.phase("forward"):
            pass
        rec.flush()
    rec.close()
    s = rec._out.summary()
    main = read_events(tmp_path / "events.csv")  # parses: no half row at the end
    assert (tmp_path / "events.csv").read_text().endswith("\n")
    assert s["rows_dropped"] == 0 and len(main) == s["rows_written"]
    assert len(main) + len(read_events(s["fallback"])) == 8


def test_a_device_with_one_reading_is_kept_and_flagged(tmp_path, capsys):
    """Before: gpu1 (one reading) was dropped from phases.csv without a word."""
    import numpy as np
    import pandas as pd

    from synth import T0, events_frame, trace_frame
    from wattlife.cli import main

    ms = 1_000_000
    t = T0 + np.arange(101) * 10 * ms
    tr = pd.concat([trace_frame(t, np.full(101, 100.0), "gpu0"),
                    trace_frame(t[:1], np.array([90.0]), "gpu1")], ignore_index=True)
    tr.to_csv(tmp_path / "trace.csv", index=False)
    events_frame([("forward", T0, T0 + 500 * ms)]).to_csv(tmp_path / "events.csv", index=False)
    assert main(["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
                 str(tmp_path / "events.csv"), "-o", str(tmp_path / "phases.csv"),
                 "--method", "integrate"]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "fewer than 2 readings" in err and "h/gpu1" in err
    ph = pd.read_csv(tmp_path / "phases.csv")
    row = ph[ph["device"] == "gpu1"]
    assert len(row) == 1 and row["energy_j"].isna().all() and (row["covered_fraction"] == 0).all()
    assert row["phase"].iat[0] == "unattributed"


def test_aggregate_keeps_covered_fraction():
    """Before: phase_summary dropped covered_fraction: a phase half outside the trace looked
    whole, an uncovered one 0 J."""
    import pandas as pd

    from wattlife.analysis.aggregate import phase_summary

    rows = [{"workload": "w", "storage": "shared", "checkpoint": "off", "repeat": r,
             "phase": "forward", "device_kind": "gpu", "device": d, "energy_j": 10.0,
             "energy_lo_j": 9.0, "energy_hi_j": 11.0, "time_s": 1.0, "method": "integrate",
             "source": "measured", "covered_fraction": cov}
            for r, d, cov in [(1, "gpu0", 1.0), (1, "gpu1", 0.5), (2, "gpu0", 1.0)]]
    s = phase_summary(pd.DataFrame(rows))
    assert s["covered_fraction"].tolist() == [0.5]
