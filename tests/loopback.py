"""A real HTTP server on 127.0.0.1 serving generated files, for the download tests.

Supports Range requests, an optional rate limit (bytes/s, so transfers are network-bound), and
failure injection: reset the connection after N bytes of the first response of a path."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    def __init__(self, files: dict[str, bytes], rate_bps: float | None = None,
                 reset_after: dict[str, int] | None = None) -> None:
        self.files, self.rate, self.reset_after = files, rate_bps, dict(reset_after or {})
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                outer.requests.append((path, self.headers.get("Range")))
                body = outer.files.get(path)
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
                self.end_headers()
                cut = outer.reset_after.pop(path, None)
                data = body[start:]
                step = 64 * 1024
                sent = 0
                for i in range(0, len(data), step):
                    chunk = data[i:i + step]
                    if cut is not None and sent + len(chunk) > cut:
                        self.wfile.write(chunk[: cut - sent])
                        self.wfile.flush()
                        self.connection.close()  # connection reset mid-file
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if outer.rate:
                        time.sleep(len(chunk) / outer.rate)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "LoopbackServer":
        self.thread.start()
        return self

    def __exit__(self, *a) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class HubServer:
    """The subset of the Hugging Face Hub's HTTP interface that `snapshot_download` uses:
    revision info, recursive tree listing, and file resolve (HEAD and GET) for models and
    datasets, served from generated files on 127.0.0.1."""

    SHA = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, repos: dict[tuple[str, str], dict[str, bytes]]) -> None:
        import hashlib
        import json
        import re

        self.repos = repos  # (repo_type "model"|"dataset", repo_id) -> {path: bytes}
        self.requests: list[str] = []
        outer = self

        def oid(b: bytes) -> str:
            return hashlib.sha1(b).hexdigest()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, body: bytes, headers: dict[str, str], head: bool) -> None:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _route(self, head: bool) -> None:
                path = self.path.split("?")[0]
                outer.requests.append(f"{self.command} {path}")
                m = re.fullmatch(r"/api/(models|datasets)/(.+?)/revision/([^/]+)", path)
                if m:
                    files = outer.repos.get((m.group(1)[:-1], m.group(2)))
                    if files is None:
                        return self._send(404, b'{"error":"Repository not found"}',
                                          {"X-Error-Code": "RepoNotFound",
                                           "Content-Type": "application/json"}, head)
                    doc = {"id": m.group(2), "sha": outer.SHA,
                           "siblings": [{"rfilename": p} for p in sorted(files)]}
                    return self._send(200, json.dumps(doc).encode(),
                                      {"Content-Type": "application/json"}, head)
                m = re.fullmatch(r"/api/(models|datasets)/(.+?)/tree/([^/]+)(/.*)?", path)
                if m:
                    files = outer.repos.get((m.group(1)[:-1], m.group(2)), {})
                    doc = [{"type": "file", "oid": oid(b), "size": len(b), "path": p}
                           for p, b in sorted(files.items())]
                    return self._send(200, json.dumps(doc).encode(),
                                      {"Content-Type": "application/json"}, head)
                m = re.fullmatch(r"(/datasets)?/(.+?)/resolve/([^/]+)/(.+)", path)
                if m:
                    kind = "dataset" if m.group(1) else "model"
                    body = outer.repos.get((kind, m.group(2)), {}).get(m.group(4))
                    if body is None:
                        return self._send(404, b"not found", {"X-Error-Code": "EntryNotFound"}, head)
                    return self._send(200, body, {"ETag": f'"{oid(body)}"',
                                                  "X-Repo-Commit": outer.SHA}, head)
                self._send(404, b"no route", {}, head)

            def do_GET(self):
                self._route(head=False)

            def do_HEAD(self):
                self._route(head=True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *a) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
