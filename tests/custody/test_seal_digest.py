"""The seal takes the trace's entry from its writer's running sha256 where the file is still the
one written (same inode and size), and reads it back otherwise (custody.seal.writer_digests)."""

from __future__ import annotations

import json
from pathlib import Path

from wattlife.custody.seal import file_entry, seal_attempt
from wattlife.safewrite import SafeAppender


def attempt(tmp_path: Path) -> Path:
    folder = tmp_path / "a1"
    out = SafeAppender(folder / "trace.csv", "t_ns,value\n", "test")
    out.write("1,2\n3,4\n")
    rec = out.close()
    (folder / "meta.json").write_text(json.dumps({"recording": {"trace": rec}}))
    return folder


def test_the_seal_takes_the_writers_digest_of_an_untouched_trace(tmp_path, monkeypatch):
    folder = attempt(tmp_path)
    want = file_entry(folder / "trace.csv")
    import wattlife.custody.seal as S

    read = []
    monkeypatch.setattr(S, "file_entry", lambda p: read.append(p.name) or file_entry(p))
    doc = seal_attempt(folder, "c", {}, 0.0, 1.0, 0)
    assert doc["hashed_while_written"] == ["trace.csv"] and doc["files"]["trace.csv"] == want
    assert "trace.csv" not in read and "meta.json" in read  # the trace is not read back


def test_a_replaced_trace_of_the_same_size_is_read_again(tmp_path):
    folder = attempt(tmp_path)
    trace = folder / "trace.csv"
    data = trace.read_bytes().replace(b"1,2", b"5,6")
    tmp = folder / ".trace.csv.swp"
    tmp.write_bytes(data)
    tmp.replace(trace)  # an editor's save: a new file in its place, the same size
    doc = seal_attempt(folder, "c", {}, 0.0, 1.0, 0)
    assert doc["hashed_while_written"] == [] and doc["files"]["trace.csv"] == file_entry(trace)

