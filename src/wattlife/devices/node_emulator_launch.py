"""Starting and ending the pm_counters emulator (`devices.node_emulator`) for one measuring run.

With `sampler.node_sources.pm_counters.emulator` set, building the node backend starts
`wattlife node-emulator pm-counters` on a fresh temporary tree (its own session: a Ctrl-C of the
run does not reach it first), waits for its first update (bounded), and reads that tree; closing
the reader (`Sampler.stop`, or the run's start failing) ends the emulator and removes the tree.
The emulator also ends by itself when this process has ended (`--parent`), so a SIGKILL of the
run leaves none behind. `wattlife run` hands CMD's pid to the emulator (`watch`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SensorError
from .base import SensorUnavailable
from .node import NodeReading
from .node_sources import EMULATOR_MARKER, PmCountersReader

#: how long the emulator may take to write its first update (importing it on a loaded machine)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
WATCH_FILE = "watch_pid"  # devices.node_emulator.WATCH_FILE (that module imports psutil)
LOG_FILE = "emulator.log"  # the emulator's stderr, in its tree


@dataclass(frozen=True)
class EmulatorTerms:
    """The emulated node's CPU and GPU terms: the sampler's CPU estimate and simulated GPUs
    (`gpus` 0: the node excludes the GPUs)."""

    cpu_idle_w: float = 50.0
    cpu_max_w: float = 200.0
    gpus: int = 0
    mem_share: float = 0.3
    cap_w: float | None = None


class EmulatedPmCounters(PmCountersReader):
    """The reader of the tree of an emulator this process started; `close` ends the emulator."""

    def __init__(self, proc: subprocess.Popen[bytes], root: Path, period_s: float) -> None:
        self.proc = proc
        super().__init__(root, period_s)
        self.watch_pid: int | None = None

    def watch(self, pid: int) -> None:
        """Drive the emulated CPU and GPU terms by `pid`'s process tree."""
        tmp = self.root / f".{WATCH_FILE}.tmp"
        tmp.write_text(f"{pid}\n")
        tmp.replace(self.root / WATCH_FILE)
        self.watch_pid = pid

    def read(self) -> NodeReading | None:
        """A reading of the tree while the emulator runs; once it has ended, an error (a sensor
        gap), never its last values again."""
        if self.proc.poll() is not None:
            raise SensorError(ended(self.proc, self.root / LOG_FILE))
        return super().read()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "emulator_pid": self.proc.pid}

    def close(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """End `proc`: SIGTERM, then SIGKILL after STOP_TIMEOUT_S; reaped either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def emulator_argv(root: Path, period_s: float, base_w: float, disk_w_per_mbps: float,
                  net_w_per_mbps: float, terms: EmulatorTerms, parent: int) -> list[str]:
    """The `wattlife node-emulator pm-counters` command line for these settings."""
    argv = [sys.executable, "-m", "wattlife.cli", "node-emulator", "pm-counters",
            "--root", str(root), "--period-ms", f"{period_s * 1000:g}",
            "--base-w", f"{base_w:g}", "--disk-w-per-mbps", f"{disk_w_per_mbps:g}",
            "--net-w-per-mbps", f"{net_w_per_mbps:g}", "--cpu-idle-w", f"{terms.cpu_idle_w:g}",
            "--cpu-max-w", f"{terms.cpu_max_w:g}", "--gpus", str(terms.gpus),
            "--mem-share", f"{terms.mem_share:g}", "--parent", str(parent)]
    return argv + (["--cap-w", f"{terms.cap_w:g}"] if terms.cap_w is not None else [])


def start_emulator(period_s: float, base_w: float, disk_w_per_mbps: float,
                   net_w_per_mbps: float, terms: EmulatorTerms) -> EmulatedPmCounters:
    """Start the emulator on a fresh tree and return its reader once it has written; one that
    exits or stays silent for START_TIMEOUT_S is ended and said (SensorUnavailable)."""
    import os

    root = Path(tempfile.mkdtemp(prefix="wattlife-pm-emulator-"))
    log = root / LOG_FILE
    with open(log, "wb") as err:
        proc = subprocess.Popen(emulator_argv(root, period_s, base_w, disk_w_per_mbps,
                                              net_w_per_mbps, terms, os.getpid()),
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                start_new_session=True)
    try:
        _wait_first_update(proc, root, log)
        return EmulatedPmCounters(proc, root, period_s)
    except BaseException:
        stop_process(proc)
        shutil.rmtree(root, ignore_errors=True)
        raise


def _wait_first_update(proc: subprocess.Popen[bytes], root: Path, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ((root / EMULATOR_MARKER).is_file() and _fresh(root) > 0):
        if proc.poll() is not None:
            raise SensorUnavailable(ended(proc, log))
        if time.monotonic() > deadline:
            raise SensorUnavailable(f"pm_counters emulator wrote nothing under {root} within "
                                    f"{START_TIMEOUT_S:g} s")
        time.sleep(0.05)


def ended(proc: subprocess.Popen[bytes], log: Path) -> str:
    """One line: the emulator exited, with its status and the last line it wrote."""
    try:
        why = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        why = []
    return (f"pm_counters emulator exited with {proc.returncode}: "
            f"{why[-1] if why else 'no message'}")


def _fresh(root: Path) -> int:
    try:
        return int((root / "freshness").read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0
