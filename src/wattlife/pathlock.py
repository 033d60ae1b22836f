"""One writer per destination: an exclusive lock on `<path>.lock` (`fcntl.flock`, released by the
kernel if its holder dies), held for as long as a command writes `path`.

Used by `wattlife run` (its events file), `fetch`/`upload` (the destination, whose `.part` would
otherwise be appended to by two clients at once) and `attribute` (its outputs). A second writer
is refused at once with the holder's line (pid, host, what it does), never made to wait."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from .errors import SetupError


class PathBusy(SetupError):
    """Another process holds the lock; the message is the holder's line."""


class PathLock:
    """`with PathLock(path, what):` holds `<path>.lock` (created, and removed on release)."""

    def __init__(self, path: str | Path, what: str) -> None:
        path = Path(path)
        self.path = path.with_name(path.name + ".lock")
        self.fd = -1
        self.what = what

    def acquire(self) -> PathLock:
        """Take the lock; PathBusy (the holder's line) if another process has it; OSError if the
        lock file cannot be created."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 300).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise PathBusy(holder) from None
            try:  # the previous holder may have removed the file between our open and our lock
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, {self.what}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> PathLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def one_writer(path: str | Path, what: str) -> Iterator[None]:
    """Hold `path`'s lock while the body writes it; RuntimeError (one line naming the holder) if
    another `what` (e.g. "attribute") holds it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    lock = PathLock(path, what)
    try:
        lock.acquire()
    except PathBusy as busy:
        raise SetupError(f"{path}: another {what} is writing it ({busy}); two writers must not "
                           "share an output: wait for it to end or choose another -o") from None
    try:
        yield
    finally:
        lock.release()
