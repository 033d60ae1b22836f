"""Real HTTP servers on 127.0.0.1 for the download tests: the package's `ArtefactServer` (plain
files: Range, rate limit, connection resets, PUT) and `HubServer` (the Hub routes that
`snapshot_download` uses)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from wattlife.prepare.serve import ArtefactServer

LoopbackServer = ArtefactServer  # the package's server: Range, rate limit, resets, PUT


class HubServer:
    """The subset of the Hugging Face Hub's HTTP interface that `snapshot_download` uses:
    revision info, recursive tree listing, and file resolve (HEAD and GET) for models and
    datasets, served from generated files on 127.0.0.1; and what `HfApi.upload_folder` uses:
    repository creation, preupload (every file `regular`, i.e. inline) and the NDJSON commit,
    whose files land in `repos`."""

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
                        return self._send(404, b"not found", {"X-Error-Code": "EntryNotFound"},
                                          head)
                    return self._send(200, body, {"ETag": f'"{oid(body)}"',
                                                  "X-Repo-Commit": outer.SHA}, head)
                self._send(404, b"no route", {}, head)

            def do_POST(self):
                import base64

                path = self.path.split("?")[0]
                outer.requests.append(f"POST {path}")
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                js = {"Content-Type": "application/json"}
                if path == "/api/repos/create":
                    req = json.loads(body)
                    rid = (f"{req['organization']}/{req['name']}" if req.get("organization")
                           else req["name"])
                    outer.repos.setdefault((req.get("type") or "model", rid), {})
                    return self._send(200, json.dumps({"url": f"{outer.url}/{rid}"}).encode(), js,
                                      False)
                m = re.fullmatch(r"/api/(models|datasets)/(.+?)/(preupload|commit)/([^/]+)", path)
                if not m:
                    return self._send(404, b"no route", {}, False)
                repo = outer.repos.get((m.group(1)[:-1], m.group(2)))
                if repo is None:
                    return self._send(404, b'{"error":"Repository not found"}',
                                      {"X-Error-Code": "RepoNotFound", **js}, False)
                if m.group(3) == "preupload":
                    files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                             for f in json.loads(body)["files"]]
                    return self._send(200, json.dumps({"files": files}).encode(), js, False)
                for line in body.decode().splitlines():
                    op = json.loads(line)
                    if op["key"] == "file":
                        v = op["value"]
                        repo[v["path"]] = base64.b64decode(v["content"])
                doc = {"commitUrl": f"{outer.url}/{m.group(2)}/commit/{outer.SHA}",
                       "commitOid": outer.SHA, "pullRequestUrl": None}
                return self._send(200, json.dumps(doc).encode(), js, False)

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
