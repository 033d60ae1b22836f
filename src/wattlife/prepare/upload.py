"""Post-execution: the trained model leaves the facility through a real client.

- `upload_http`: HTTP PUT of each file (streamed, retried with backoff);
- `upload_hf`: `huggingface_hub.HfApi.upload_folder` (endpoint from the argument or
  `HF_ENDPOINT`; the token from the client's standard places, never read or logged here);
- a copy to a target path is `fetch.fetch_path` (same atomic rename).
The CLI marks each as an `upload` phase."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import InputError
from .fetch import FetchError, fetch_path, http_final, sha256_of


def _files(src: Path) -> list[Path]:
    if not src.exists():
        raise FetchError(f"{src}: nothing to upload (no such file or folder)")
    return [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())


def upload_http(src: str | Path, url: str, retries: int = 3, backoff_s: float = 0.5,
                timeout_s: float = 60.0) -> dict[str, Any]:
    """PUT `src` (a file, or every file of a folder under `url`/<relative path>)."""
    src = Path(src)
    t0, sent = time.monotonic(), 0
    for f in _files(src):
        rel = f.name if src.is_file() else f.relative_to(src).as_posix()
        target = url.rstrip("/") + "/" + rel
        for attempt in range(retries + 1):
            try:
                with open(f, "rb") as fh:
                    req = urllib.request.Request(target, data=fh, method="PUT",
                                                 headers={"Content-Length": str(f.stat().st_size)})
                    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                        if resp.status not in (200, 201, 204):
                            raise FetchError(f"PUT {target}: HTTP {resp.status}")
                break
            except urllib.error.HTTPError as exc:
                if http_final(exc.code):
                    raise FetchError(f"PUT {target}: HTTP {exc.code} {exc.reason} "
                                     "(permanent, not retried)") from exc
                err: Exception = exc
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                err = exc
            if attempt == retries:
                raise FetchError(f"PUT {target}: gave up after {retries + 1} attempts: {err}")
            time.sleep(backoff_s * 2 ** attempt)
        sent += f.stat().st_size
    return {"src": str(src), "url": url, "bytes": sent, "seconds": time.monotonic() - t0}


def upload_hf(src: str | Path, repo_id: str, repo_type: str = "model",
              endpoint: str | None = None, create: bool = True) -> dict[str, Any]:
    """Upload a folder to a Hugging Face repository in one commit."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    src = Path(src)
    files = _files(src)
    api = HfApi(endpoint=endpoint)
    t0 = time.monotonic()
    try:
        if create:
            api.create_repo(repo_id, repo_type=repo_type, exist_ok=True)
        info = api.upload_folder(folder_path=str(src), repo_id=repo_id, repo_type=repo_type,
                                 commit_message="wattlife upload")
    except HfHubHTTPError as exc:
        raise FetchError(f"upload to {repo_type} repository {repo_id!r}: {exc}") from exc
    return {"src": str(src), "repo_id": repo_id, "bytes": sum(f.stat().st_size for f in files),
            "files": len(files), "seconds": time.monotonic() - t0,
            "commit": getattr(info, "oid", None)}


def last_checkpoint(summary_path: str | Path) -> str:
    """The last checkpoint a cell's work/summary.json lists (what `--from-summary` uploads)."""
    ckpts = json.loads(Path(summary_path).read_text()).get("checkpoints") or []
    if not ckpts:
        raise FetchError(f"{summary_path}: the cell wrote no checkpoint to upload "
                         "(run a checkpoint-on cell)")
    return str(ckpts[-1])


def _digests(root: Path) -> dict[str, str]:
    """sha256 of every file of a file or folder, by path relative to it."""
    if root.is_file():
        return {"": sha256_of(root)}
    return {p.relative_to(root).as_posix(): sha256_of(p) for p in _files(root)}


def refuse_different(src: Path, dest: Path) -> None:
    """An existing copy destination is kept (as fetch keeps one): the same content is skipped,
    a different one is an error (the upload did not happen) unless --force."""
    if dest.is_dir() != src.is_dir() or _digests(dest) != _digests(src):
        raise FetchError(f"--copy {dest}: exists and differs from {src}; kept (give --force to "
                         "replace it)")


def upload_artefact(src: str | Path, *, put: str | None = None, hf: str | None = None,
                    copy: str | Path | None = None, endpoint: str | None = None,
                    server_url: str | None = None, force: bool = False) -> dict[str, Any]:
    """Send `src` out by HTTP PUT (to `put`, relative to `server_url` when a loopback server
    stores it), to a Hugging Face model repository, or as a copy to a path (an existing different
    copy is kept unless `force`: `refuse_different`); the client's result with `client` and
    `direction`."""
    if put:
        r = upload_http(src, server_url + "/" + put.lstrip("/") if server_url else put)
        r["client"] = "http-put"
    elif hf:
        r = upload_hf(src, hf, endpoint=endpoint)
        r["client"] = "huggingface_hub"
    else:
        if copy is None:
            raise InputError("upload: give one target (--put, --hf or --copy)")
        r = fetch_path(src, copy, force=force, verb="upload", option="--copy",
                       existing=refuse_different)
        r["client"] = "copy"
    r["direction"] = "upload"
    return r
