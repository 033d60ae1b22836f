"""A real HTTP server on 127.0.0.1 for offline downloads and uploads (the demo and the tests).

Serves files from memory (`files`: URL path -> bytes) or from a folder (`root`), with Range
requests, an optional rate limit (bytes/s, so a transfer is network-bound like a real one) and
failure injection (`reset_after`: close the connection after N bytes of a path's first response).
PUT stores the body under `upload_root` (HTTP upload of a trained model). Where a run serves and
downloads on the same machine, the server's CPU time is part of what the sampler measures: the
demo says so in its download rows (`server: loopback`)."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

log = logging.getLogger(__name__)

STEP = 64 * 1024


class _Handler(BaseHTTPRequestHandler):
    """GET (Range, rate limit, injected resets) and PUT for the `ArtefactServer` that serves it
    (`server.artefacts`)."""

    server: _Server

    def log_message(self, *a: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        outer = self.server.artefacts
        path = unquote(self.path.split("?")[0])
        outer.requests.append((path, self.headers.get("Range")))
        body = outer.body(path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0] or 0)
            if start >= len(body):
                self.send_error(416, "Range Not Satisfiable")
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._send_body(body, start, outer.reset_after.pop(path, None))

    def _send_body(self, body: bytes | memoryview, start: int, cut: int | None) -> None:
        """The body from byte `start`, paced to the server's rate; with `cut`, the connection
        reset after that many bytes."""
        rate = self.server.artefacts.rate
        sent = 0
        for i in range(start, len(body), STEP):
            chunk = body[i:i + STEP]
            if rate:
                # pace before sending: the last byte leaves no earlier than
                # bytes / rate after the first, however fast or loaded the machine
                time.sleep(len(chunk) / rate)
            if cut is not None and sent + len(chunk) > cut:
                self.wfile.write(chunk[: cut - sent])
                self.wfile.flush()
                self.connection.close()  # connection reset mid-file
                return
            self.wfile.write(chunk)
            sent += len(chunk)

    def do_PUT(self) -> None:
        outer = self.server.artefacts
        path = unquote(self.path.split("?")[0]).lstrip("/")
        n = int(self.headers.get("Content-Length", 0))
        if outer.upload_root is None or ".." in Path(path).parts:
            # read the body first: a client still sending it would see a broken pipe
            # instead of the refusal
            left = n
            while left and (chunk := self.rfile.read(min(STEP, left))):
                left -= len(chunk)
            self.send_error(403, "Uploads not accepted here")
            return
        dest = outer.upload_root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")  # renamed into place only when whole
        left = n
        try:
            with open(part, "wb") as fh:
                while left:
                    chunk = self.rfile.read(min(STEP, left))
                    if not chunk:
                        break
                    fh.write(chunk)
                    left -= len(chunk)
                    if outer.rate:
                        time.sleep(len(chunk) / outer.rate)
        finally:
            if left:
                part.unlink(missing_ok=True)
            else:
                part.replace(dest)
        self.send_response(201 if not left else 400)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Server(ThreadingHTTPServer):
    """The HTTP server of one `ArtefactServer` (its handlers reach it as `artefacts`)."""

    def __init__(self, artefacts: ArtefactServer) -> None:
        self.artefacts = artefacts
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-transfer (Ctrl-C, a reset) is no server error: quiet; anything else
        one line on stderr, never socketserver's traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        log.error(f"wattlife loopback server: {type(exc).__name__}: {exc}")


class ArtefactServer:
    """Files from memory or a folder over HTTP on 127.0.0.1 (see the module docstring); a context
    manager: serving between enter and exit, at `url`."""

    def __init__(self, files: dict[str, bytes] | None = None, root: str | Path | None = None,
                 rate_bps: float | None = None, reset_after: dict[str, int] | None = None,
                 upload_root: str | Path | None = None) -> None:
        self.files, self.root = dict(files or {}), Path(root) if root else None
        self.rate, self.reset_after = rate_bps, dict(reset_after or {})
        self.upload_root = Path(upload_root) if upload_root else None
        self.requests: list[tuple[str, str | None]] = []
        self.httpd = _Server(self)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def body(self, path: str) -> bytes | memoryview | None:
        if path in self.files:
            return self.files[path]
        if self.root is not None:
            f = (self.root / path.lstrip("/")).resolve()
            if f.is_file() and self.root.resolve() in f.parents:
                return memoryview(f.read_bytes())
        return None

    def __enter__(self) -> "ArtefactServer":
        self.thread.start()
        return self

    def __exit__(self, *a: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def loopback_server(root: str | Path | None, rate_mbps: float | None, upload: bool = False
                    ) -> Any:
    """A context manager: an ArtefactServer serving `root` (with `upload`: storing PUTs in it),
    rate-limited to `rate_mbps` Mbit/s; without `root` a null context yielding None."""
    if not root:
        return contextlib.nullcontext(None)
    rate = rate_mbps * 1e6 / 8 if rate_mbps else None
    return ArtefactServer(root=None if upload else root, upload_root=root if upload else None,
                          rate_bps=rate)
