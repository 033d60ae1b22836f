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
