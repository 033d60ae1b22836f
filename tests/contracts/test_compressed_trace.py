"""trace.csv.zst (issue 43): the sampler writes one zstd frame per flush; every row of a whole
frame stays readable after a kill or a disk that fills mid-frame, and the counts are exact."""

from __future__ import annotations

import errno
import os
import time
import warnings

import pytest

from wattlife import safewrite
from wattlife.contracts import read_trace
from wattlife.contracts.zstd_frames import FrameReader
from wattlife.devices.simgpu import SimGpuBackend
from wattlife.sampler import Sampler


def test_the_sampler_writes_a_zstd_trace_the_readers_take(tmp_path):
    path = tmp_path / "trace.csv.zst"
    s = Sampler([SimGpuBackend(n_gpus=2, interval_s=0.02)], path, flush_s=0.1)
    s.start()
    time.sleep(0.6)
    s.stop()
    tr = read_trace(path)
    assert len(tr) == s.rows_written > 20 and set(tr["device"]) >= {"gpu0", "gpu1"}
    assert path.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # zstd magic: compressed


def test_a_kill_at_any_byte_leaves_every_whole_frame_readable(tmp_path):
    path = tmp_path / "t.csv.zst"
    out = safewrite.FrameAppender(path, "a,b\n", "test", truncate=True)
    rows_at = [0]
    ends = []
    for k in range(6):
        out.write("".join(f"{k},{j}\n" for j in range(50)))
        rows_at.append(out.rows_written)
        ends.append(path.stat().st_size)
    out.close()
    data = path.read_bytes()
    for cut in range(1, len(data) + 1, 7):
        p = tmp_path / "cut.csv.zst"
        p.write_bytes(data[:cut])
        whole = sum(1 for e in ends if e <= cut)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = FrameReader(p).read()
        want = 1 + 50 * whole if whole else got.count(b"\n")  # before frame 1: the header or not
        assert got.count(b"\n") == want and want <= 1 + 50 * whole
        assert got.endswith(b"\n") or not got


def test_a_disk_that_fills_mid_frame_keeps_every_whole_frame(tmp_path, monkeypatch):
    """Half of the third write gets out, then ENOSPC (the first write is the header's frame and
    the first rows' frame): the file is cut back to its whole frames, the cut frame goes whole
    to the fallback file, the counts are exact."""
    monkeypatch.setattr(safewrite.tempfile, "tempdir", str(tmp_path))
    real = os.write
    state = {"writes": 0, "full": False}

    def write(fd, data):
        if not os.readlink(f"/proc/self/fd/{fd}").endswith("/t.csv.zst"):
            return real(fd, data)
        if state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        state["writes"] += 1
        if state["writes"] == 3:
            state["full"] = True
            return real(fd, bytes(data[:len(data) // 2]))
        return real(fd, data)

    monkeypatch.setattr(safewrite.os, "write", write)
    out = safewrite.FrameAppender(tmp_path / "t.csv.zst", "a,b\n", "test", truncate=True)
    for k in range(4):
        out.write("".join(f"{k},{j}\n" for j in range(10)))
    summary = out.close()
    assert summary["rows_written"] == 20 and summary["rows_in_fallback"] == 20
    assert summary["rows_dropped"] == 0
    assert FrameReader(tmp_path / "t.csv.zst").read().count(b"\n") == 21
    fallback = FrameReader(summary["fallback"]).read()
    assert fallback.startswith(b"a,b\n2,0\n") and fallback.count(b"\n") == 21


@pytest.mark.parametrize("form", ["csv", "zst"])
def test_rows_written_count_whole_rows_only(tmp_path, form):
    cls = safewrite.FrameAppender if form == "zst" else safewrite.SafeAppender
    out = cls(tmp_path / f"t.{form}", "a,b\n", "test", truncate=True)
    out.write("1,2\n3,4\n")
    assert out.rows_written == 2 and out.pending_rows == 0
    assert out.close()["rows_written"] == 2
