"""No two writers share a destination, a partial download is never promoted, permanent errors are
not retried and messages name only files that exist (issue #29). Real loopback HTTP servers."""

import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wattlife.cli import main
from wattlife.prepare.fetch import FetchError, fetch_http
from wattlife.prepare.serve import ArtefactServer

BODY = bytes(range(256)) * 1600  # 409,600 bytes
SHA = hashlib.sha256(BODY).hexdigest()


class _Gated(BaseHTTPRequestHandler):
    """Sends half of BODY, waits until `gate` is set, then the rest (Content-Length given)."""

    gate = threading.Event()

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY[:len(BODY) // 2])
        self.wfile.flush()
        self.gate.wait(60)
        self.wfile.write(BODY[len(BODY) // 2:])


def _serve(handler):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/a.bin"


def test_two_fetches_to_one_destination_one_is_refused(tmp_path, children, env_path):
    """Before: both appended to one .part and the first to end promoted a corrupt file."""
    dest = tmp_path / "a.bin"
    _Gated.gate.clear()
    srv, url = _serve(_Gated)
    try:
        first = children.spawn([sys.executable, "-m", "wattlife.cli", "fetch", "--url", url,
                                "-o", str(dest)], env=env_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        part = tmp_path / "a.bin.part"
        while not part.exists():  # the first is writing it (the server holds the rest back)
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        out = subprocess.run([sys.executable, "-m", "wattlife.cli", "fetch", "--url", url,
                              "-o", str(dest)], env=env_path, capture_output=True, text=True,
                             timeout=60)
        _Gated.gate.set()
        assert first.wait(timeout=60) == 0, first.stderr.read().decode()
    finally:
        _Gated.gate.set()
        srv.shutdown()
        srv.server_close()
    assert out.returncode == 2
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and "another transfer is writing it" in err and "pid" in err
    assert dest.read_bytes() == BODY
    assert not (tmp_path / "a.bin.lock").exists() and not part.exists()


class _NoLength(BaseHTTPRequestHandler):
    """HTTP/1.0, no Content-Length, the body ends when the connection closes: `cut` bytes."""

    protocol_version = "HTTP/1.0"
    cut = len(BODY)

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(BODY[:self.cut])


@pytest.fixture
def no_length():
    srv, url = _serve(_NoLength)
    yield url
    srv.shutdown()
    srv.server_close()


def test_a_cut_short_body_without_content_length_is_never_promoted(tmp_path, no_length,
                                                                   monkeypatch):
    """Before: promoted without a word (a close-delimited body cannot show it was cut)."""
    monkeypatch.setattr(_NoLength, "cut", len(BODY) // 2)
    with pytest.raises(FetchError, match="neither a Content-Length nor a chunked body"):
        fetch_http(no_length, tmp_path / "a.bin", progress=False)
    assert not (tmp_path / "a.bin").exists()
    with pytest.raises(FetchError, match="sha256 mismatch"):  # the sha tells it apart
        fetch_http(no_length, tmp_path / "a.bin", sha256=SHA, progress=False, force=True)
    assert not (tmp_path / "a.bin").exists()
    monkeypatch.setattr(_NoLength, "cut", len(BODY))
    fetch_http(no_length, tmp_path / "a.bin", sha256=SHA, progress=False, force=True)
    assert (tmp_path / "a.bin").read_bytes() == BODY


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:9/a.bin", "file:///etc/hostname", "a.bin"])
def test_an_unsupported_scheme_is_refused_at_once(tmp_path, capsys, monkeypatch, url):
    """Before: ftp:// was tried six times with 60 s time-outs (6 min 16 s). Counted, not timed:
    no connection is opened and no back-off slept."""
    import urllib.request

    tried: list[str] = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: tried.append("open"))
    monkeypatch.setattr(time, "sleep", lambda s: tried.append(f"sleep {s}"))
    assert main(["fetch", "--url", url, "-o", str(tmp_path / "a.bin")]) == 2
    assert tried == []
    err = capsys.readouterr().err.strip()
    assert "is not supported; --url takes http:// or https://" in err
    assert len(err.splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_an_unwritable_destination_is_final_and_not_retried(tmp_path):
    with ArtefactServer(files={"/a.bin": BODY}) as srv:
        (tmp_path / "a.bin.part").mkdir()  # the partial file's path cannot be opened for writing
        with pytest.raises(FetchError, match="cannot write .*not retried"):
            fetch_http(srv.url + "/a.bin", tmp_path / "a.bin", progress=False)
        assert len(srv.requests) == 1
        (tmp_path / "file").write_text("x")
        with pytest.raises(FetchError, match="cannot write there"):
            fetch_http(srv.url + "/a.bin", tmp_path / "file" / "a.bin", progress=False)
        assert len(srv.requests) == 1  # refused before asking


def test_a_failed_fetch_never_mentions_a_partial_file_that_does_not_exist(tmp_path):
    port = socket.socket()
    port.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    url = f"http://127.0.0.1:{port.getsockname()[1]}/x"
    with pytest.raises(FetchError) as exc:
        fetch_http(url, tmp_path / "x", retries=1, backoff_s=0.01, progress=False)
    port.close()
    assert "no partial file" in str(exc.value) and "kept for resume" not in str(exc.value)
    assert not (tmp_path / "x.part").exists()


def test_an_existing_file_kept_without_a_sha_is_not_called_verified(tmp_path, capsys):
    (tmp_path / "a.bin").write_bytes(b"something else")
    with ArtefactServer(files={"/a.bin": BODY}) as srv:
        assert main(["fetch", "--url", srv.url + "/a.bin", "-o", str(tmp_path / "a.bin"),
                     "--record", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "kept existing file, not verified" in err and "(verified" not in err
    assert json.loads((tmp_path / "r.json").read_text())["verified"] is False


def test_two_runs_cannot_share_a_trace(tmp_path, children, env_path):
    """Before: only the events file was locked; two runs with one --trace wrote one file."""
    def cmd(events, code):
        return [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(tmp_path / "trace.csv"),
                "--events", str(tmp_path / events), "--gpu", "sim", "--cpu", "none", "--",
                sys.executable, "-c", code]

    ready = tmp_path / "ready"
    a = children.spawn(cmd("a.csv", f"import time, pathlib; pathlib.Path({str(ready)!r}).touch(); "
                                    "time.sleep(300)"), env=env_path, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert a.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    out = children.run(cmd("b.csv", "pass"), env=env_path, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 2
    err = out.stderr.strip()
    # refused by the trace's own lock, or first by the run-folder lock (runlock) of its folder
    assert len(err.splitlines()) == 1
    assert ("--trace" in err and "in use by another wattlife run" in err) or \
        (".wattlife-run.lock" in err and str(tmp_path) in err)
    assert not (tmp_path / "b.csv").exists()
    a.terminate()
    assert a.wait(timeout=30) == 143


def test_two_attributions_to_one_output_one_is_refused(tmp_path, capsys):
    """An attribution holding phases.csv (its lock, as a running `wattlife attribute` holds it):
    a second one to the same -o is refused with one line naming the holder."""
    import numpy as np

    from synth import T0, events_frame, trace_frame
    from wattlife.pathlock import PathLock

    t = T0 + 10_000_000 * np.arange(50)
    trace_frame(t, [100.0] * 50, "gpu0").to_csv(tmp_path / "trace.csv", index=False)
    events_frame([("forward", T0, T0 + 10**8)]).to_csv(tmp_path / "events.csv", index=False)
    args = ["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
            str(tmp_path / "events.csv"), "-o", str(tmp_path / "phases.csv")]
    with PathLock(tmp_path / "phases.csv", "attribute"):
        assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another attribute is writing it (pid" in err
    assert not (tmp_path / "phases.csv").exists()
    assert main(args) == 0 and (tmp_path / "phases.csv").exists()  # once it is free
