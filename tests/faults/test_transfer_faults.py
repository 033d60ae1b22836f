"""Transfers: upload follows fetch's rules (an existing different destination is kept unless
--force; a permanent HTTP error is final; a concurrent writer is refused in upload's own words),
and Ctrl-C anywhere ends with one line and nothing half-written.

Before: `upload --copy` overwrote a different destination silently; `upload --put` retried a
501 four times; Ctrl-C during `fetch --serve-dir` printed a 20-line traceback; a second upload
was refused with a message about "another fetch" and `-o`."""

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.cli import main
from wattlife.pathlock import PathLock
from wattlife.prepare.fetch import FetchError
from wattlife.prepare.upload import upload_http


def _upload(src, dest, *extra):
    return main(["upload", str(src), "--copy", str(dest), *extra])


@pytest.mark.parametrize("folder", [False, True])
def test_an_existing_different_copy_destination_is_kept_unless_forced(tmp_path, capsys, folder):
    src, dest = tmp_path / "model", tmp_path / "out" / "model"
    if folder:
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "w.bin").write_bytes(b"new weights")
        (dest / "sub").mkdir(parents=True)
        (dest / "sub" / "w.bin").write_bytes(b"old weights")
        dest_file, old = dest / "sub" / "w.bin", b"old weights"
    else:
        src.write_bytes(b"new weights")
        dest.parent.mkdir()
        dest.write_bytes(b"old weights")
        dest_file, old = dest, b"old weights"
    capsys.readouterr()
    assert _upload(src, dest) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--copy {dest}: exists and differs" in err and "--force" in err
    assert dest_file.read_bytes() == old
    assert _upload(src, dest, "--force") == 0
    assert dest_file.read_bytes() == b"new weights"
    assert _upload(src, dest) == 0  # the same content: skipped, kept
    assert '"skipped": true' in capsys.readouterr().out.replace(" ", "").replace('":', '": ')


def test_a_concurrent_upload_is_refused_in_uploads_words(tmp_path, capsys):
    src, dest = tmp_path / "model", tmp_path / "out" / "model"
    src.write_bytes(b"w")
    dest.parent.mkdir()
    with PathLock(dest, "uploading it"):
        assert _upload(src, dest) == 2
    err = capsys.readouterr().err
    assert "another transfer is writing it" in err and "--copy" in err
    assert "another fetch" not in err and " -o" not in err


class _Status(BaseHTTPRequestHandler):
    status = 501
    hits: list = []

    def log_message(self, *a):
        pass

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).hits.append(self.path)
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def status_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@settings(max_examples=20, deadline=None)
@given(code=st.sampled_from([400, 401, 403, 404, 405, 408, 409, 413, 429, 500, 501, 502, 503,
                             504, 505, 507, 511]))
def test_a_permanent_http_status_is_final_a_passing_one_retried(status_server, tmp_path_factory,
                                                                code):
    src = tmp_path_factory.mktemp("put") / "m.bin"
    src.write_bytes(b"x" * 10)
    _Status.status, _Status.hits = code, []
    with pytest.raises(FetchError) as err:
        upload_http(src, status_server + "/up", retries=3, backoff_s=0.0)
    retried = code in (408, 429, 500, 502, 503, 504)
    assert len(_Status.hits) == (4 if retried else 1), (code, _Status.hits)
    assert ("gave up after 4 attempts" if retried else "permanent, not retried") in str(err.value)


def test_ctrl_c_during_fetch_serve_dir_is_one_line_and_leaves_no_output(tmp_path, env_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "big.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    out = tmp_path / "got" / "big.bin"
    proc = subprocess.Popen([sys.executable, "-m", "wattlife.cli", "fetch", "--serve-dir",
                             str(served), "--url", "/big.bin", "-o", str(out), "--rate-mbps", "2"],
                            env=env_path, stderr=subprocess.PIPE, text=True,
                            # Ctrl-C's default, as at a terminal: a runner started in the
                            # background by a shell without job control ignores SIGINT
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        part = out.with_name(out.name + ".part")
        deadline = time.monotonic() + 120
        while not (part.exists() and part.stat().st_size > 0):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and "%|" not in ln]
    assert lines == ["wattlife fetch: interrupted"], err  # the progress bar's lines aside
    assert not out.exists()


def test_a_client_gone_mid_body_leaves_no_traceback(capfd):
    """What Ctrl-C does to the loopback server: its client vanishes mid-body (deterministic form
    of the test above: the handler is waited for)."""
    import socket

    from wattlife.prepare.serve import ArtefactServer

    with ArtefactServer(files={"/b": b"x" * (4 << 20)}, rate_bps=8e6) as srv:
        host, port = srv.httpd.server_address
        with socket.create_connection((host, port)) as s:
            s.sendall(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
            s.recv(65536)
        deadline = time.monotonic() + 120
        while any("process_request_thread" in t.name and t.is_alive()
                  for t in threading.enumerate()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert "Traceback" not in capfd.readouterr().err


def test_an_upload_cut_short_leaves_nothing_half_written(tmp_path):
    """A PUT whose client stops mid-body (Ctrl-C of `upload --put`) stores nothing."""
    import socket

    from wattlife.prepare.serve import ArtefactServer

    store = tmp_path / "store"
    with ArtefactServer(upload_root=store) as srv:
        with socket.create_connection(srv.httpd.server_address) as s:
            s.sendall(b"PUT /m.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
                      + b"y" * 5000)
        _settle(srv)
    assert not [p for p in store.rglob("*") if p.is_file()]


def _settle(srv):
    """Wait until every request the server has accepted is handled: one more request answered
    (so the earlier connection was accepted and its handler started), then no handler left."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(srv.url + "/none", timeout=60)
    except urllib.error.HTTPError:
        pass
    deadline = time.monotonic() + 120
    while any("process_request_thread" in t.name and t.is_alive()
              for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
