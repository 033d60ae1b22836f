"""A value polled in a thread every ~1 ms (`nvml_sensor.py`'s NVML polls, issue 46)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pandas as pd


class Poller:
    """Calls `fn` (-> (value, driver timestamp or 0)) every `period_s` in a thread: rows of
    (t_before_ns, t_after_ns, value, stamp). Gives up after 50 failures in a row."""

    def __init__(self, name: str, fn: Any, period_s: float = 0.001) -> None:
        self.name, self.fn, self.period_s = name, fn, period_s
        self.rows: list[tuple[int, int, float, int]] = []
        self.errors: Counter[str] = Counter()
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"poll-{name}")

    def start(self) -> Poller:
        self.thread.start()
        return self

    def _loop(self) -> None:
        fails = 0
        while not self.stop_ev.is_set():
            t0 = time.time_ns()
            try:
                v, stamp = self.fn()
                fails = 0
            except Exception as exc:  # noqa: BLE001 - an unsupported call is a result
                self.errors[f"{type(exc).__name__}: {exc}"[:200]] += 1
                fails += 1
                if fails >= 50:
                    return
                self.stop_ev.wait(0.01)
                continue
            t1 = time.time_ns()
            self.rows.append((t0, t1, float(v), int(stamp)))
            rest = self.period_s - (t1 - t0) / 1e9
            if rest > 0:
                self.stop_ev.wait(rest)

    def stop(self) -> None:
        self.stop_ev.set()
        self.thread.join(timeout=10)

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows, columns=["t0_ns", "t1_ns", "value", "stamp_us"])
        return df.assign(t_ns=(df["t0_ns"] + df["t1_ns"]) // 2, poller=self.name)
