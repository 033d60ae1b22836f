"""What a run holds around CMD's process: the locks on its events and trace, the socket the
markers report their write errors to, and how CMD is started (its death tied to wattlife's) and
its status read (the shell's convention)."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SetupError
from ..pathlock import PathBusy, PathLock

PR_SET_PDEATHSIG = 1

_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def shell_status(returncode: int) -> int:
    """Popen's returncode in the shell's convention: -N (killed by signal N) -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def die_with_parent(parent_pid: int, pdeathsig: bool = True,
                     join: Callable[[], None] | None = None) -> Callable[[], None]:
    """preexec_fn: the kernel SIGKILLs the child when its parent dies (even by SIGKILL), unless
    the guardian does it (`pdeathsig` False: CMD must outlive wattlife by the moment the guardian
    needs to stop its whole tree, or its children would be orphaned before being found); `join`
    (moving the child into CMD's cgroup) runs first, so every descendant is born inside."""
    def preexec() -> None:
        if join is not None:
            join()
        if _LIBC is not None and pdeathsig:
            _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(128 + signal.SIGKILL)
    return preexec


class EventsLock:
    """An exclusive lock on `<events>.lock` (or on `<trace>.lock`, `option` "--trace") for the
    duration of a run (see the module docstring)."""

    def __init__(self, events: Path, run_id: str, option: str = "--events") -> None:
        self.lock = PathLock(events, f"run_id {run_id}")
        self.path = self.lock.path
        try:
            events.parent.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
        except PathBusy as busy:
            raise SetupError(
                f"{option} {events} is in use by another wattlife run ({busy}); two runs "
                f"must not share it: give this run its own {option}") from None
        except OSError as exc:
            raise SetupError(f"{option} {events}: cannot create its lock file {self.path}: "
                               f"{exc.strerror}") from exc

    def release(self) -> None:
        self.lock.release()


class StatusListener:
    """Receives the markers' write-error reports (abstract unix datagram socket, Linux)."""

    def __init__(self) -> None:
        self.address: str | None = f"wattlife-{os.getpid()}-{secrets.token_hex(6)}"
        self.messages: list[dict[str, Any]] = []
        self.sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind("\0" + self.address)
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            self.sock, self.address = None, None

    def drain(self) -> list[dict[str, Any]]:
        while self.sock is not None:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            try:
                self.messages.append(json.loads(data))
            except ValueError:
                self.messages.append({"unparsed": data.decode(errors="replace")})
        return self.messages

    def close(self) -> None:
        self.drain()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
