"""The writer's running sha256 (issue 39: a seal need not read a long trace back)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from wattlife.custody.seal import file_entry
from wattlife.safewrite import FrameAppender, SafeAppender


def written(cls: type[SafeAppender], path: Path) -> dict | None:
    out = cls(path, "t_ns,value\n", "test")
    for i in range(50):
        out.write(f"{i},{i * 0.5}\n" * 7)
    summary = out.close()
    assert summary["digest"] == out.digest()
    return out.digest()


def test_the_digest_is_the_files_size_rows_and_sha256(tmp_path):
    for cls, name in ((SafeAppender, "trace.csv"), (FrameAppender, "trace.csv.zst")):
        path = tmp_path / name
        d = written(cls, path)
        assert d is not None
        want = file_entry(path)
        assert {k: d[k] for k in want} == want
        assert d["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        st = os.stat(path)
        assert (d["dev"], d["ino"]) == (st.st_dev, st.st_ino)


def test_no_digest_for_a_file_that_held_bytes_it_did_not_write(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("t_ns,value\n1,2\n")  # an earlier writer's rows: appended to, not hashed
    out = SafeAppender(path, "t_ns,value\n", "test")
    out.write("3,4\n")
    assert out.close()["digest"] is None
