"""Appending rows to a file that may fail (full disk, read-only or vanished folder, I/O error).

`SafeAppender` is how the sampler writes the trace and the markers write events: a failing write
never raises into the caller (the sampler thread, the workload's training loop). The first failure
is reported once (stderr, and `on_error` so it reaches meta.json); rows not yet written stay in
memory (up to `max_pending_bytes`, newer rows beyond that are counted as dropped) and every later
write retries, so a disk that frees up loses nothing. What is still unwritten at `close()` goes to a
fallback file in the temporary folder, named in the summary. Writes use `os.write` on the raw
descriptor, so exactly what reached the file is known and a retry never duplicates a byte. A row
cut by a failing write whose rest never gets out is cut back off the file at `close()` (the file
ends on a row boundary) and written whole to the fallback file: no row is lost or left half.
Every byte that reaches the file also feeds a running sha256 (`digest()`, in `summary()`: the
seal of a measurement takes it instead of reading a long trace back; custody.seal).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 64 << 20


class SafeAppender:
    """Rows of text appended to `path`, never raising on a write. See the module docstring."""

    def __init__(self, path: str | Path, header: str, label: str, truncate: bool = False,
                 on_error: Callable[[dict[str, Any]], None] | None = None,
                 max_pending_bytes: int = MAX_PENDING_BYTES, strict_open: bool = False) -> None:
        """`strict_open`: a failure to open the file at construction raises OSError (for callers
        that can still refuse to start) instead of being reported and retried."""
        self.path, self.header, self.label = Path(path), header, label
        self.on_error = on_error
        self.max_pending = max_pending_bytes
        self._truncate = truncate
        self._fd: int | None = None
        self._out = bytearray()
        self._mid_line = False  # the file ends inside a row (a partial write before a failure)
        self._head = 0  # bytes of that row already in the file
        self._headbytes = b""
        self._header_nl = 0  # newlines of a queued header, not counted as rows
        self.rows_written = self.rows_dropped = self.error_count = 0
        self.errors: list[str] = []
        self.fallback: str | None = None
        self.rows_in_fallback = 0
        self.closed = False
        self._sha = hashlib.sha256()  # of every byte that reached the file
        self._digest_ok = False  # the file was new (or truncated) when opened: all of it is ours
        self._bytes = self._newlines = 0
        self._ends_nl = True
        self._ident: tuple[int, int, int] | None = None  # st_dev, st_ino, st_ctime_ns at close
        self._open(strict=strict_open)

    def _fail(self, action: str, exc: OSError) -> None:
        self.error_count += 1
        msg = f"cannot {action} {self.path}: {exc.strerror or exc}"
        if msg not in self.errors:
            self.errors.append(msg)
            log.warning(f"wattlife {self.label}: {msg}; rows are kept in memory and written when "
                        "it succeeds again, else to a fallback file at the end")
            if self.on_error is not None:
                try:
                    self.on_error({"label": self.label, "path": str(self.path), "error": msg})
                except Exception:  # reporting must not break recording
                    pass

    def _open(self, strict: bool = False) -> bool:
        if self._fd is not None:
            return True
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if self._truncate else os.O_APPEND)
        try:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except FileExistsError:  # a file where a folder of the path should be
                raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of its folder "
                                         f"{self.path.parent}") from None
            self._fd = os.open(self.path, flags, 0o644)
            st = os.fstat(self._fd)
            new = self._truncate or st.st_size == 0
        except OSError as exc:
            if strict:
                raise
            self._fail("open", exc)
            return False
        if new:
            self._out[:0] = self._encode(self.header)
            self._header_nl = self.header.count("\n")
        self._digest_ok = new
        self._truncate = False
        return True

    def write(self, text: str) -> None:
        """Queue `text` (whole rows, each ending in a newline) and write what can be written."""
        if self.closed:
            return
        data = self._encode(text)
        if len(self._out) + len(data) > self.max_pending:
            self.rows_dropped += text.count("\n")
        else:
            self._out += data
            self._queued(len(data), text.count("\n"))
        self.flush()

    def _encode(self, text: str) -> bytes:
        """The bytes `text` is written as (FrameAppender: one zstd frame)."""
        return text.encode()

    def _queued(self, nbytes: int, rows: int) -> None:
        """A write of `rows` rows, `nbytes` bytes, was queued (FrameAppender counts by frame)."""

    def _account(self, done: bytes) -> None:
        """Rows written and whether the file ends inside one, after `done` reached the file."""
        nl = done.count(b"\n")
        skip = min(nl, self._header_nl)
        self._header_nl -= skip
        self.rows_written += nl - skip
        self._mid_line = not done.endswith(b"\n")
        self._head = (len(done) - done.rfind(b"\n") - 1 if nl
                      else self._head + len(done)) if self._mid_line else 0

    def _digested(self, done: bytes) -> None:
        """`done` reached the file: the running sha256, size and newline count follow it."""
        if done:
            self._sha.update(done)
            self._bytes += len(done)
            self._newlines += done.count(b"\n")
            self._ends_nl = done.endswith(b"\n")

    def digest(self) -> dict[str, Any] | None:
        """The file as this writer wrote it, for a seal: size, rows (newlines), sha256, whether it
        ends in a newline, and the file's identity at `close()` (st_dev, st_ino, st_ctime_ns: a
        file replaced, appended to, linked or touched since differs); None before `close()`, where
        the file held bytes not written here (it existed when opened) or was cut back."""
        if not self._digest_ok or self._ident is None:
            return None
        dev, ino, ctime = self._ident
        return {"size": self._bytes, "rows": self._newlines, "sha256": self._sha.hexdigest(),
                "complete": self._ends_nl, "dev": dev, "ino": ino, "ctime_ns": ctime}

    def flush(self) -> bool:
        """Write what is queued; True when nothing is left queued."""
        if not self._out:
            return True
        if not self._open():
            return False
        assert self._fd is not None  # _open() succeeded
        try:
            while self._out:
                n = os.write(self._fd, self._out)
                done = bytes(self._out[:n])
                self._digested(done)
                self._account(done)
                del self._out[:n]
        except OSError as exc:
            self._fail("write", exc)
            return False
        return True

    def _head_back(self) -> bool:
        """Cut the head of the row that a failing write left in the file, so the file ends on a
        row boundary (truncating frees space, so it works on a full disk); its bytes are kept in
        `_headbytes`. False if the file cannot be read back or truncated."""
        if self._fd is None:
            return False
        try:
            size = os.fstat(self._fd).st_size
            with open(self.path, "rb") as fh:
                fh.seek(size - self._head)
                self._headbytes = fh.read(self._head)
            if len(self._headbytes) != self._head or not self._one_row(self._headbytes):
                return False
            os.ftruncate(self._fd, size - self._head)
            self._digest_ok = False  # the running sha256 cannot be cut back: the seal reads it
        except OSError:
            return False
        self._mid_line, self._head = False, 0
        return True

    def _one_row(self, head: bytes) -> bool:
        """Whether `head`, cut back off the file, is the start of one row (no newline in it)."""
        return b"\n" not in head

    @property
    def pending_rows(self) -> int:
        return self._rows_in(bytes(self._out)) - self._header_nl

    def _rows_in(self, data: bytes) -> int:
        """Rows in queued bytes (FrameAppender: of the queued frames)."""
        return data.count(b"\n")

    def close(self) -> dict[str, Any]:
        """Last write attempt, then the fallback file for what is left; returns `summary()`."""
        if self.closed:
            return self.summary()
        self.flush()
        if self._out:
            data = bytes(self._out)
            if self._mid_line and self._head_back():
                data = self._headbytes + data  # the whole row goes to the fallback file
            elif self._mid_line:  # the head of this row stays in the main file: its tail is no row
                cut = data.find(b"\n") + 1
                self.rows_dropped += 1 if cut else 0
                data = data[cut:]
            n_rows = self._rows_in(data)
            head = self._encode(self.header)
            if self._header_nl and data.startswith(head):
                data = data[len(head):]  # the header is written below anyway
                n_rows -= self._header_nl
            name = None
            try:
                fd, name = tempfile.mkstemp(prefix=f"wattlife-{self.label}-{os.getpid()}-",
                                            suffix=f"-{self.path.name}")
                try:
                    view = memoryview(head + data)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
                self.fallback, self.rows_in_fallback = name, n_rows
                log.warning(f"wattlife {self.label}: {n_rows} row(s) that could not be written to "
                            f"{self.path} are in {name}")
            except OSError as exc:
                self.rows_dropped += n_rows
                log.error(f"wattlife {self.label}: {n_rows} row(s) lost: neither {self.path} nor "
                          f"a fallback file ({name or tempfile.gettempdir()}) can be written "
                          f"({exc.strerror or exc})")
            self._out.clear()
            self._header_nl = 0
        if self._fd is not None:
            try:
                st = os.fstat(self._fd)
                self._ident = (st.st_dev, st.st_ino, st.st_ctime_ns)
                os.close(self._fd)
            except OSError as exc:
                self._fail("close", exc)
            self._fd = None
        self.closed = True
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """What meta.json records: rows written, dropped, in the fallback file, errors."""
        return {"path": str(self.path), "rows_written": self.rows_written,
                "rows_dropped": self.rows_dropped, "rows_pending": self.pending_rows,
                "rows_in_fallback": self.rows_in_fallback,
                "write_errors": self.error_count, "errors": list(self.errors),
                "fallback": self.fallback, "digest": self.digest()}


class FrameAppender(SafeAppender):
    """A SafeAppender of a zstd file (`trace.csv.zst`): each `write` is one zstd frame
    (`contracts.zstd_frames`), so the file reads up to its last whole frame whatever happens (a
    kill, a failing write); rows are counted as whole frames reach the file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._frames: list[list[int]] = []  # [size, bytes not yet written, rows] a queued frame
        super().__init__(*args, **kwargs)

    def _encode(self, text: str) -> bytes:
        from .contracts.zstd_frames import compress_frame

        return compress_frame(text.encode())

    def _open(self, strict: bool = False) -> bool:
        before = len(self._out)
        ok = super()._open(strict)
        if len(self._out) > before:  # the header's frame was queued in front
            size = len(self._out) - before
            self._frames.insert(0, [size, size, self._header_nl])
        return ok

    def _queued(self, nbytes: int, rows: int) -> None:
        self._frames.append([nbytes, nbytes, rows])

    def _account(self, done: bytes) -> None:
        n = len(done)
        while n and self._frames:
            take = min(n, self._frames[0][1])
            self._frames[0][1] -= take
            n -= take
            if self._frames[0][1] == 0:
                rows = self._frames.pop(0)[2]
                skip = min(rows, self._header_nl)
                self._header_nl -= skip
                self.rows_written += rows - skip
        first = self._frames[0] if self._frames else [0, 0, 0]
        self._mid_line = first[1] < first[0]
        self._head = first[0] - first[1]

    def _one_row(self, head: bytes) -> bool:
        return True  # the head of one frame, cut back whole

    def _rows_in(self, data: bytes) -> int:
        return sum(f[2] for f in self._frames)
