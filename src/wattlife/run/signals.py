"""The signals wattlife gets while CMD runs: forwarded to CMD's process group once each (SIGINT,
SIGTERM, SIGHUP, SIGQUIT), Ctrl-Z and SIGCONT passed on, and a stop signal handed back to the
caller once the run is recorded (a sweep stops instead of starting its next cap)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class SignalRelay:
    """wattlife's signal handlers for the time of one run. Before CMD exists (`proc` None) a
    forwarded signal is kept `pending` and ends the idle baseline; once it exists, it goes to
    CMD's group. `received` and `forwarded` are what meta.json records."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.forwarded: list[str] = []
        self.pending: list[int] = []  # got while CMD was being started: forwarded once it exists
        self.proc: subprocess.Popen[bytes] | None = None
        self.stop_idle = threading.Event()
        self.old: dict[int, Any] = {}

    def install(self) -> None:
        """Take over the signals (the handlers before are kept in `old`, to put back)."""
        self.old = {s: signal.signal(s, self.on_signal) for s in FORWARDED}
        self.old[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self.on_stop)
        self.old[signal.SIGCONT] = signal.signal(signal.SIGCONT, self.on_cont)

    def restore(self) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)

    def forward(self, signum: int) -> None:
        proc = self.proc
        assert proc is not None  # called only once CMD is started
        if proc.returncode is None:
            try:  # CMD is not reaped until after the wait below, so its group id is still its own
                os.killpg(proc.pid, signum)
                self.forwarded.append(signal.Signals(signum).name)
            except ProcessLookupError:
                pass

    def forward_pending(self) -> None:
        """A signal that came during Popen (the handler saw no proc yet) goes to CMD now."""
        while self.pending:
            self.forward(self.pending.pop(0))

    def on_signal(self, signum: int, _frame: Any) -> None:
        self.received.append(signal.Signals(signum).name)
        if self.proc is not None:
            self.forward(signum)
        else:
            self.pending.append(signum)
            self.stop_idle.set()  # during the idle baseline: CMD is not started at all

    def on_stop(self, signum: int, _frame: Any) -> None:
        """Ctrl-Z: CMD's group stops too, then wattlife stops itself the default way."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # stops here until SIGCONT
        signal.signal(signum, self.on_stop)

    def on_cont(self, _signum: int, _frame: Any) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def reraise(self) -> None:
        """After the run is recorded: a SIGINT or SIGTERM wattlife got goes to the handler that
        was installed before (e.g. PowerCapController's, which restores the caps), or raises
        KeyboardInterrupt / SystemExit(128 + N), so the caller stops instead of going on."""
        stop = [signal.Signals[n] for n in self.received if n in ("SIGINT", "SIGTERM")]
        if not stop:
            return
        before = self.old[stop[0]]
        if callable(before) and before is not signal.default_int_handler:
            before(stop[0], None)
        if stop[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + stop[0])
