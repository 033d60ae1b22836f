"""One clock: every timestamp the suite writes is a monotonic clock mapped to epoch ns once.

The wall clock (`time.time_ns`) steps when NTP corrects it or a VM resumes; a step in the middle
of a run would move every later timestamp and change phases' lengths. So timestamps are taken
from CLOCK_BOOTTIME (CLOCK_MONOTONIC where there is none: both are shared by every process of a
host and never step; BOOTTIME also counts a suspend) and mapped to epoch ns by one offset
(`ClockMapping`): measured once per process, or inherited from `wattlife run` through
`ENV_CLOCK` by every process of CMD on the same host, so the sampler's and the markers' columns
line up whatever the wall clock does meanwhile. `wall_step_ns` says how far the wall clock has
moved against the mapping since (0 without a step); meta.json records the mapping and the steps
seen (`clock`). Timestamps other code stamps in wall time (NVML's driver samples) are mapped
with `from_wall_ns`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any, Callable

#: `wattlife run` hands its mapping to CMD's processes: "<host> <offset_ns> <uncertainty_ns>"
ENV_CLOCK = "WATTLIFE_CLOCK"
#: a wall step smaller than this is the mapping's own noise, not a step
WALL_STEP_TOL_NS = 1_000_000

if hasattr(time, "CLOCK_BOOTTIME"):
    CLOCK_NAME = "CLOCK_BOOTTIME"
    _BOOTTIME = time.CLOCK_BOOTTIME

    def _monotonic() -> int:
        return time.clock_gettime_ns(_BOOTTIME)
else:  # pragma: no cover - not Linux
    CLOCK_NAME = "CLOCK_MONOTONIC"
    _monotonic = time.monotonic_ns

#: the monotonic clock every timestamp is taken from (`CLOCK_NAME`)
monotonic_ns: Callable[[], int] = _monotonic


@dataclasses.dataclass(frozen=True)
class ClockMapping:
    """epoch ns = monotonic ns + `offset_ns`, known to +- `uncertainty_ns`."""

    offset_ns: int
    uncertainty_ns: int
    inherited: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"clock": CLOCK_NAME, "offset_ns": self.offset_ns,
                "uncertainty_ns": self.uncertainty_ns, "inherited": self.inherited}


def measure_offset() -> tuple[int, int]:
    """(wall - monotonic) now, and its uncertainty: the tightest of 5 wall/monotonic/wall
    brackets."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        a = time.time_ns()
        m = monotonic_ns()
        b = time.time_ns()
        cand = ((a + b) // 2 - m, max((b - a + 1) // 2, 1))
        if best is None or cand[1] < best[1]:
            best = cand
    assert best is not None
    return best


_mapping: ClockMapping | None = None


def _inherited() -> ClockMapping | None:
    """The mapping `wattlife run` put in the environment, if it was made on this host."""
    words = os.environ.get(ENV_CLOCK, "").split()
    if len(words) != 3 or words[0] != socket.gethostname():
        return None
    try:
        return ClockMapping(int(words[1]), int(words[2]), inherited=True)
    except ValueError:
        return None


def mapping() -> ClockMapping:
    """This process's mapping: inherited from `wattlife run` on this host, else measured now."""
    global _mapping
    if _mapping is None:
        _mapping = _inherited() or ClockMapping(*measure_offset())
    return _mapping


def now_ns() -> int:
    """Epoch ns from the monotonic clock (the suite's one clock: immune to wall-clock steps)."""
    return monotonic_ns() + (_mapping or mapping()).offset_ns


def wall_step_ns() -> int:
    """How far the wall clock has moved against this process's mapping (0 while it has not
    stepped; positive: the wall clock is ahead of the mapped clock)."""
    return measure_offset()[0] - mapping().offset_ns


def from_wall_ns(wall_ns: int) -> int:
    """A timestamp stamped in wall time just now-ish (NVML's driver samples) on the one clock."""
    return wall_ns - wall_step_ns()


def env_value() -> str:
    """`ENV_CLOCK`'s value handing this process's mapping to the processes it starts."""
    m = mapping()
    return f"{socket.gethostname()} {m.offset_ns} {m.uncertainty_ns}"


def reset() -> None:
    """Forget the mapping (tests; a process that must map anew)."""
    global _mapping
    _mapping = None


class WallSteps:
    """The wall-clock steps seen while a run lasts, each call of `see` comparing the wall clock
    with the mapping (the sampler calls it at every flush): meta.json's `clock.wall_steps`."""

    MAX_KEPT = 100

    def __init__(self) -> None:
        self.last = wall_step_ns()
        self.steps: list[dict[str, int]] = []

    def see(self) -> None:
        s = wall_step_ns()
        if abs(s - self.last) > WALL_STEP_TOL_NS and len(self.steps) < self.MAX_KEPT:
            self.steps.append({"seen_at_ns": now_ns(), "step_ns": s - self.last})
        if abs(s - self.last) > WALL_STEP_TOL_NS:
            self.last = s

    def record(self) -> dict[str, Any]:
        """meta.json's `clock`: the mapping, its uncertainty and the steps seen."""
        return {**mapping().as_dict(), "wall_steps": list(self.steps)}
