"""Fetch an artefact to its final path: plain HTTP(S) and local/shared paths.

HTTP downloads stream to `<dest>.part`, resume from where a broken transfer stopped (HTTP Range),
retry connection errors with exponential backoff, verify sha256 when one is given, and only then
rename to `dest` (atomic on one file system). A rerun with `dest` present does nothing unless
forced (the record's `verified` says whether a sha256 confirmed it). An HTTP status other than
`RETRIED_HTTP` (408, 425, 429, 500, 502-504: a 404, a 501...), a scheme other than http(s), an
unwritable destination or a full disk is final and named (not retried; `upload --put` follows the
same rule); a checksum mismatch removes the partial file and never promotes it. A body is
promoted only when it is known to be whole: its Content-Length, a complete chunked encoding or the
sha256. One writer per destination: a second transfer to the same `dest` is refused (`pathlock`),
in the words of the command (`upload --copy` names --copy). A copy interrupted (Ctrl-C) removes
its temporary copy.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import IncompleteRead
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..errors import InputError, SetupError
from ..pathlock import PathBusy, PathLock

CHUNK = 1 << 20


class FetchError(SetupError):
    """A download failed for good; the message names the artefact and why."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


PERMANENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS,
                    errno.ENOTDIR, errno.EISDIR)
#: HTTP statuses worth another attempt (a timeout, too many requests, a passing server fault);
#: every other client or server error is final (501 Not Implemented, 505: never better)
RETRIED_HTTP = (408, 425, 429, 500, 502, 503, 504)


def http_final(code: int) -> bool:
    """Whether an HTTP error status is permanent (not retried): anything but `RETRIED_HTTP`."""
    return code not in RETRIED_HTTP


def _verified(dest: Path, sha256: str | None) -> bool:
    return dest.exists() and (sha256 is None or sha256_of(dest) == sha256.lower())


def destination_lock(dest: Path, verb: str = "fetch", option: str = "-o") -> PathLock:
    """The lock on `dest` held while it is written (its folder created); FetchError, in the
    words of the command (`verb`, its destination `option`), if another transfer holds it or it
    cannot be created."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return PathLock(dest, f"{verb}ing it").acquire()
    except PathBusy as busy:
        raise FetchError(f"{dest}: another transfer is writing it ({busy}); two transfers must "
                         f"not share a destination: wait for it to end or give another "
                         f"{option}") from None
    except OSError as exc:
        raise FetchError(f"{dest}: cannot write there ({exc.strerror or exc}); not "
                         "retried") from exc


def _folder(dest: str | Path) -> bool:
    """Whether `dest` names a folder: one that exists, or a path written with a trailing
    separator (`out/`: the user means a folder, though none exists yet)."""
    return Path(dest).is_dir() or str(dest).endswith(("/", os.sep))


def fetch_http(url: str, dest: str | Path, sha256: str | None = None, retries: int = 5,
               backoff_s: float = 0.5, force: bool = False, timeout_s: float = 60.0,
               progress: bool = True) -> dict[str, Any]:
    """Download `url` to `dest`; returns bytes transferred, seconds, attempts, resumed."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchError(f"{url}: scheme {scheme + '://' if scheme else '(none)'} is not "
                         "supported; --url takes http:// or https:// (not retried)")
    if _folder(dest):
        raise FetchError(f"{Path(dest)}: is a directory; give the file's path, e.g. "
                         f"{Path(dest) / Path(url).name}")
    dest = Path(dest)
    lock = destination_lock(dest)
    try:
        return _fetch_http(url, dest, sha256, retries, backoff_s, force, timeout_s, progress)
    finally:
        lock.release()


@dataclass
class _Transfer:
    """What the attempts of one download have done so far (kept across retries)."""

    transferred: int = 0  # bytes received, over every attempt
    attempts: int = 0
    resumed: bool = False  # an attempt continued the partial file (HTTP 206)
    delimited: bool = False  # the body's end is known: a Content-Length or chunked encoding


def _fetch_http(url: str, dest: Path, sha256: str | None, retries: int, backoff_s: float,
                force: bool, timeout_s: float, progress: bool) -> dict[str, Any]:
    """`fetch_http` once the destination's lock is held."""
    if not force and _verified(dest, sha256):
        return {"url": url, "dest": str(dest), "skipped": True, "bytes": 0, "seconds": 0.0,
                "verified": sha256 is not None}
    part = dest.with_name(dest.name + ".part")
    if force and part.exists():
        part.unlink()
    t0 = time.monotonic()
    state = _Transfer()
    _download_with_retries(url, dest, part, state, retries, backoff_s, timeout_s, progress)
    _check_whole(url, part, sha256, state.delimited)
    os.replace(part, dest)
    return {"url": url, "dest": str(dest), "skipped": False, "bytes": state.transferred,
            "seconds": time.monotonic() - t0, "attempts": state.attempts,
            "resumed": state.resumed, "size_bytes": dest.stat().st_size,
            "verified": sha256 is not None}


def _download_with_retries(url: str, dest: Path, part: Path, state: _Transfer, retries: int,
                           backoff_s: float, timeout_s: float, progress: bool) -> None:
    """Attempts until `part` holds the whole body: a client error or a permanent write error is
    final, anything else is retried with exponential backoff up to `retries` times."""
    while True:
        state.attempts += 1
        have = part.stat().st_size if part.exists() else 0
        try:
            _attempt(url, dest, part, have, state, timeout_s, progress)
            return
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # asked past the end: the part is already complete
                state.delimited = True
                return
            if http_final(exc.code):
                raise FetchError(f"{url}: HTTP {exc.code} {exc.reason} (permanent, not "
                                 "retried)") from exc
            err: Exception = exc
        except (urllib.error.URLError, ConnectionError, IncompleteRead, TimeoutError,
                OSError) as exc:
            code = getattr(exc, "errno", None)
            if code in PERMANENT_ERRNOS:
                why = getattr(exc, "strerror", None)
                what = "disk full" if code in (errno.ENOSPC, errno.EDQUOT) else "cannot write"
                raise FetchError(f"{url}: {what} writing {part} ({why}); {_kept(part)}, nothing "
                                 "promoted, not retried") from exc
            err = exc
        if state.attempts > retries:
            raise FetchError(f"{url}: gave up after {state.attempts} attempts: {err} "
                             f"({_kept(part)})")
        time.sleep(backoff_s * 2 ** (state.attempts - 1))


def _attempt(url: str, dest: Path, part: Path, have: int, state: _Transfer, timeout_s: float,
             progress: bool) -> None:
    """One request: from byte `have` of `part` (HTTP Range) when there is a partial file, the
    body streamed onto it (or over it when the server sends the whole file); IncompleteRead
    when the body ends before its Content-Length."""
    req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        if have and resp.status == 206:
            mode, state.resumed = "ab", True
        else:
            mode, have = "wb", 0
        total = resp.headers.get("Content-Length")
        total = int(total) + have if total is not None else None
        state.delimited = total is not None or getattr(resp, "chunked", False)
        with open(part, mode) as fh, tqdm(total=total, initial=have, unit="B", unit_scale=True,
                                          desc=dest.name, disable=not progress,
                                          leave=False) as bar:
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                fh.write(block)
                state.transferred += len(block)
                bar.update(len(block))
        if total is not None and part.stat().st_size < total:
            raise IncompleteRead(b"", total - part.stat().st_size)


def _check_whole(url: str, part: Path, sha256: str | None, delimited: bool) -> None:
    """Refuse to promote a body not known to be whole: neither delimited nor checked by a sha256
    (kept for resume), or one whose sha256 differs (removed)."""
    if sha256 is None and not delimited:
        raise FetchError(f"{url}: the server sent neither a Content-Length nor a chunked body, so "
                         f"a cut-short download cannot be told from a whole one; nothing promoted "
                         f"({_kept(part)}): give --sha256 to accept it")
    if sha256 is not None and sha256_of(part) != sha256.lower():
        part.unlink()
        raise FetchError(f"{url}: sha256 mismatch (expected {sha256}); partial file removed, "
                         "nothing promoted")


def _kept(part: Path) -> str:
    """What a failed download left: the partial file (kept for resume), if there is one."""
    try:
        size = part.stat().st_size if part.is_file() else 0
    except OSError:
        size = 0
    return f"partial file kept for resume: {part}, {size} bytes" if size else "no partial file"


def fetch_path(src: str | Path, dest: str | Path, force: bool = False,
               progress: bool | None = None, verb: str = "fetch", option: str = "-o",
               existing: Any = None) -> dict[str, Any]:
    """Copy a file or folder from a local/shared path, into a temporary name, then rename (a
    progress bar on stderr when it is a terminal, or with `progress=True`). An existing `dest`
    is kept unless `force`; `existing(src, dest)`, called under the lock, may refuse it (raise)."""
    folder = _folder(dest)
    src, dest = Path(src), Path(dest)
    if not src.exists():
        raise FetchError(f"{src}: no such file or folder")
    if src.is_file() and folder:
        raise FetchError(f"{dest}: is a directory and {src} a file; give the file's path, e.g. "
                         f"{dest / src.name}")
    lock = destination_lock(dest, verb, option)
    try:
        if dest.exists() and not force and existing is not None:
            existing(src, dest)
        return _fetch_path(src, dest, force, progress)
    finally:
        lock.release()


def _fetch_path(src: Path, dest: Path, force: bool, progress: bool | None) -> dict[str, Any]:
    """`fetch_path` once the destination's lock is held."""
    if dest.exists() and not force:
        return {"src": str(src), "dest": str(dest), "skipped": True, "bytes": 0, "seconds": 0.0,
                "verified": False}
    t0 = time.monotonic()
    tmp = dest.with_name(dest.name + ".part")
    if tmp.exists():
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    total = (sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) if src.is_dir()
             else src.stat().st_size)
    with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False,
              disable=None if progress is None else not progress) as bar:
        def copy(a: str, b: str) -> str:
            out = shutil.copy2(a, b)
            bar.update(os.path.getsize(b))
            return out

        try:
            if src.is_dir():
                shutil.copytree(src, tmp, copy_function=copy)
                size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
            else:
                copy(str(src), str(tmp))
                size = tmp.stat().st_size
        except BaseException:  # Ctrl-C, a full disk: nothing half-written is left behind
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()
            raise
    if dest.exists():
        shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
    os.replace(tmp, dest)
    return {"src": str(src), "dest": str(dest), "skipped": False, "bytes": size,
            "seconds": time.monotonic() - t0}


def fetch_hf(repo_id: str, dest: str | Path, repo_type: str = "model", revision: str | None = None,
             endpoint: str | None = None, force: bool = False) -> dict[str, Any]:
    """A Hugging Face model or dataset repository through `huggingface_hub.snapshot_download`.

    Endpoint from the argument or `HF_ENDPOINT`; the token comes from the standard places
    (`HF_TOKEN`, the cached login) inside the client and is never read or logged here."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    dest = Path(dest)
    t0 = time.monotonic()
    before = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) if dest.exists() else 0
    try:
        path = snapshot_download(repo_id, repo_type=repo_type, revision=revision,
                                 local_dir=str(dest), endpoint=endpoint, force_download=force)
    except RepositoryNotFoundError as exc:
        raise FetchError(f"{repo_type} repository {repo_id!r} not found at "
                         f"{endpoint or os.environ.get('HF_ENDPOINT', 'the Hub')}") from exc
    except HfHubHTTPError as exc:
        raise FetchError(f"{repo_type} repository {repo_id!r}: {exc}") from exc
    files = [p for p in Path(path).rglob("*") if p.is_file() and ".cache" not in p.parts]
    size = sum(p.stat().st_size for p in files)
    return {"repo_id": repo_id, "repo_type": repo_type, "dest": str(path), "files": len(files),
            "size_bytes": size, "bytes": max(size - before, 0) if not force else size,
            "seconds": time.monotonic() - t0, "skipped": size == before and not force}


def fetch_kaggle(dataset: str, dest: str | Path, force: bool = False) -> dict[str, Any]:
    """A Kaggle dataset (`owner/name[/version]`) through the `kaggle` client, unzipped into a
    temporary folder and renamed to `dest` when complete.

    Credentials come from the client's standard places (`~/.kaggle/kaggle.json`, or
    `KAGGLE_USERNAME`/`KAGGLE_KEY`) and are never read or logged here.
    `KAGGLE_API_ENVIRONMENT=LOCALHOST` (the Kaggle SDK's name for http://localhost) turns on the
    client's `--local` switch: the tests serve the client's DownloadDataset call on 127.0.0.1:80.
    `kaggle` is imported only here because importing it authenticates."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()) and not force:
        return {"dataset": dataset, "dest": str(dest), "skipped": True, "bytes": 0, "seconds": 0.0}
    t0 = time.monotonic()
    try:
        from kaggle.api.kaggle_api_extended import KaggleApi
    except (OSError, ValueError, SystemExit) as exc:  # the client authenticates on import
        raise FetchError(f"kaggle dataset {dataset!r}: no Kaggle credentials "
                         "(~/.kaggle/kaggle.json or KAGGLE_USERNAME/KAGGLE_KEY)") from exc
    import requests

    api = KaggleApi()
    api.authenticate()
    if os.environ.get("KAGGLE_API_ENVIRONMENT") == "LOCALHOST":
        api.args = [*getattr(api, "args", []), "--local"]  # the client's own switch: http://localhost
    tmp = dest.with_name(dest.name + ".part")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        api.dataset_download_files(dataset, path=str(tmp), force=True, quiet=False, unzip=True)
    except requests.exceptions.HTTPError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        code = exc.response.status_code if exc.response is not None else "?"
        raise FetchError(f"kaggle dataset {dataset!r}: HTTP {code} {exc}") from exc
    size = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return {"dataset": dataset, "dest": str(dest), "skipped": False, "bytes": size,
            "size_bytes": size, "seconds": time.monotonic() - t0}


def network_bytes() -> dict[str, int]:
    """Bytes received and sent over all interfaces, loopback included (psutil counters)."""
    import psutil

    c = psutil.net_io_counters()
    return {"recv": int(c.bytes_recv), "sent": int(c.bytes_sent)}


def fetch_artefact(output: str | Path, *, url: str | None = None, hf: str | None = None,
                   kaggle: str | None = None, path: str | Path | None = None,
                   kind: str = "dataset", revision: str | None = None,
                   endpoint: str | None = None, sha256: str | None = None, force: bool = False,
                   retries: int = 5, server_url: str | None = None) -> dict[str, Any]:
    """Fetch one artefact from whichever source is given (an HTTP(S) URL, relative to
    `server_url` when a loopback server serves it; a Hugging Face repository of `kind`; a Kaggle
    dataset; else a path) to `output`; the client's result with `client` and `direction`."""
    if url:
        full = server_url + "/" + url.lstrip("/") if server_url else url
        r = fetch_http(full, output, sha256=sha256, force=force, retries=retries)
        r["client"] = "http"
    elif hf:
        r = fetch_hf(hf, output, repo_type=kind, revision=revision, endpoint=endpoint, force=force)
        r["client"] = "huggingface_hub"
    elif kaggle:
        r = fetch_kaggle(kaggle, output, force=force)
        r["client"] = "kaggle"
    else:
        if path is None:
            raise InputError("fetch: give one source (--url, --hf, --kaggle or --path)")
        r = fetch_path(path, output, force=force)
        r["client"] = "copy"
    r["direction"] = "download"
    return r
