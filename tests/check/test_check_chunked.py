"""`wattlife check` reads a CSV trace in chunks (issue 43): its findings are exactly those of
one pass over the whole file, whatever the faults and wherever the chunk boundaries fall."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wattlife.check import check_run, run_dir
from wattlife.contracts import StreamUnreadable, streaming
from wattlife.contracts.zstd_frames import FrameWriter

T0 = 1_700_000_000_000_000_000


def _faulty_trace(n: int = 1500) -> str:
    """A trace of two GPUs' power and energy with faults of every row check spread over it."""
    rng = np.random.default_rng(7)
    lines = ["t_ns,host,device,metric,value,source"]
    e = 0.0
    for i in range(n):
        t = T0 + i * 20_000_000
        e += 5.0
        for dev in ("gpu0", "gpu1"):
            lines.append(f"{t},h,{dev},power_w,{250 + rng.normal():.3f},nvml-samples")
            lines.append(f"{t},h,{dev},energy_j,{e:.3f},nvml-counter")
    k = len(lines)
    for j in rng.choice(np.arange(2, k), 40, replace=False):
        kind = int(j) % 8
        parts = lines[j].split(",")
        if kind == 0:
            lines[j] = lines[j] + ",extra"  # csv.field-count
        elif kind == 1:
            parts[4] = "abc"  # value.type (value)
        elif kind == 2:
            parts[0] = "1.7e18"  # value.type (t_ns)
        elif kind == 3:
            parts[0] = str(int(parts[0]) - 10**9)  # clock.not-monotone
        elif kind == 4:
            parts[4] = "inf"  # trace.value
        elif kind == 5:
            parts[5] = ["weird", "aaa-src"][int(j) % 2]  # trace.source-unknown
        elif kind == 6:
            parts[2] = ["accel0", "xpu1"][int(j) % 2]  # trace.device-name
        else:
            parts[4] = "1.0" if parts[3] == "energy_j" else parts[4]  # trace.energy-falls
        if kind:
            lines[j] = ",".join(parts)
    return "\n".join(lines) + "\n" + f"{T0 + n * 20_000_000},h,gp"  # a killed writer's line


def _run(tmp_path, form: str):
    run = tmp_path / form
    run.mkdir()
    text = _faulty_trace()
    if form == "csv":
        (run / "trace.csv").write_text(text)
    else:
        w = FrameWriter(open(run / "trace.csv.zst", "wb"))
        for i in range(0, len(text), 3000):
            w.write(text[i:i + 3000])
            w.flush()
        w.close()
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "phase": ["step", "step"],
                       "start_ns": [T0 + 10**8, T0 + 40 * 10**9], "end_ns":
                       [T0 + 2 * 10**8, T0 + 41 * 10**9], "step": [0, 1], "items": 4.0})
    ev.to_csv(run / "events.csv", index=False)
    return run


@pytest.mark.parametrize("form", ["csv", "zst"])
@pytest.mark.parametrize("max_rows", [2, 50])
def test_chunked_check_finds_exactly_what_a_whole_file_check_finds(tmp_path, monkeypatch, form,
                                                                  max_rows):
    run = _run(tmp_path, form)
    monkeypatch.setattr(streaming, "BATCH_BYTES", 2048)  # ~40 rows a chunk
    chunked = check_run(run, kind="none", now_ns=T0 + 10**12, max_rows=max_rows)

    def whole(*a, **k):
        raise StreamUnreadable("whole file asked for")

    monkeypatch.setattr(run_dir, "read_csv_chunks", whole)
    one_pass = check_run(run, kind="none", now_ns=T0 + 10**12, max_rows=max_rows)
    codes = {x.code for x in chunked}
    assert {"csv.field-count", "value.type", "clock.not-monotone", "trace.value",
            "trace.source-unknown", "trace.device-name", "trace.energy-falls",
            "csv.truncated-line", "events.outside-trace"} <= codes
    assert chunked == one_pass


@pytest.mark.parametrize("form", ["csv", "zst"])
def test_chunked_check_finds_the_sensor_gaps_of_a_whole_file_check(tmp_path, monkeypatch, form):
    """Sensor gaps (issue 41) seen across chunks: gpu0's readings stop for 3 s (an error: more
    than 5 % of its energy bridged), gpu1's for 0.6 s (a warning: ~2 %); the same
    findings as one pass over the file, the faults of the other checks beside them."""
    text = _faulty_trace()
    lines = text.split("\n")
    keep = [ln for ln in lines if not _in_gap(ln)]
    run = tmp_path / form
    run.mkdir()
    gapped = "\n".join(keep)
    if form == "csv":
        (run / "trace.csv").write_text(gapped)
    else:
        w = FrameWriter(open(run / "trace.csv.zst", "wb"))
        for i in range(0, len(gapped), 3000):
            w.write(gapped[i:i + 3000])
            w.flush()
        w.close()
    monkeypatch.setattr(streaming, "BATCH_BYTES", 2048)
    chunked = check_run(run, kind="none", now_ns=T0 + 10**12, max_rows=5)

    def whole(*a, **k):
        raise StreamUnreadable("whole file asked for")

    monkeypatch.setattr(run_dir, "read_csv_chunks", whole)
    one_pass = check_run(run, kind="none", now_ns=T0 + 10**12, max_rows=5)
    gaps = [x for x in chunked if x.code.startswith("trace.gap")]
    assert [(x.code, x.message.split(":")[0]) for x in gaps] == [
        ("trace.gap-energy", "h/gpu0"), ("trace.gap", "h/gpu1")], gaps
    assert {"csv.field-count", "clock.not-monotone", "trace.value"} <= {x.code for x in chunked}
    assert chunked == one_pass


def _in_gap(line: str) -> bool:
    """A row of gpu0 in [10 s, 13 s), or of gpu1 in [20 s, 20.6 s)."""
    parts = line.split(",")
    if len(parts) != 6 or not parts[0].isdigit():
        return False
    t = (int(parts[0]) - T0) / 1e9
    if parts[2] == "gpu0":
        return 10 <= t < 13
    return parts[2] == "gpu1" and 20 <= t < 20.6


@pytest.mark.parametrize("window", [37, 1 << 18])
def test_gaps_are_found_a_window_of_readings_at_a_time(tmp_path, monkeypatch, window):
    """Each device's series kept on disk and read `window` readings at a time
    (`windowed.WindowedSeries`, never loaded whole): the gap findings of the series loaded
    whole, message for message (the bridged energy, the longest gap)."""
    from wattlife.attribution import chunked as chunked_mod

    rows = ["t_ns,host,device,metric,value,source"]
    for i in range(1500):
        for dev in ("gpu0", "gpu1"):
            rows.append(f"{T0 + i * 20_000_000},h,{dev},power_w,{250 + (i % 7) * 3.5},"
                        "nvml-samples")
    (tmp_path / "trace.csv").write_text("\n".join(r for r in rows if not _in_gap(r)) + "\n")
    built: list[int] = []
    real = chunked_mod.windowed_series

    def counted(*a, **k):
        w = real(*a, **k)
        built.append(w is not None)
        return w

    monkeypatch.setattr(chunked_mod, "windowed_series", counted)
    monkeypatch.setattr(run_dir, "WINDOW", window)
    windowed = check_run(tmp_path, kind="none", now_ns=T0 + 10**12, max_rows=5)
    monkeypatch.setattr(run_dir, "WINDOW", None)
    whole = check_run(tmp_path, kind="none", now_ns=T0 + 10**12, max_rows=5)
    assert built == [True, True]  # both devices on disk, in time order
    assert [x.code for x in windowed if x.code.startswith("trace.gap")] == [
        "trace.gap-energy", "trace.gap"]
    assert windowed == whole
