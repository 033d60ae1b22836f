"""An EMULATED HPE/Cray pm_counters tree (issue 45): a whole-node power source for machines
that have none (the CPU demo `config/node-demo.yaml`), never a measurement.

`wattlife node-emulator pm-counters --root DIR` runs as a process of its own and rewrites, every
`--period-ms` (100: pm_counters' 10 Hz), the files `devices.node_sources.PmCountersReader` reads:
`power` ("<W> W <us> us"), `energy` ("<J> J <us> us"), `cpu_power`/`cpu_energy`,
`accel<i>_power`/`accel<i>_energy` (its model's terms), then bumps `freshness`; `generation`
and `startup` are written once. It writes `EMULATOR_MARKER` first, from which the reader labels
every reading `pm_counters_emulated` (class simulated in `contracts.sources`).

The node's power (docs/FORMULAS.md, "Emulated node power"), each term over the last period:
- CPU: the suite's CPU estimate (`devices.cpu_estimate`) of the watched process tree;
- GPU: the simulated GPU (`devices.simgpu`) driven by that tree, as the sampler's is (none with
  `--gpus 0`: the node then excludes the GPUs);
- rest: `--base-w` + `--disk-w-per-mbps` x the host's block-device MB/s (read + written) +
  `--net-w-per-mbps` x its network MB/s (sent + received, loopback included: the demo's
  downloads are loopback transfers), from /proc/diskstats and /proc/net/dev (psutil).
The power written is the period's mean (its energy over its length); the energy counter is their
sum. The watched tree is the pid in `<root>/watch_pid` once it exists (`wattlife run` writes
CMD's pid there), else none (the CPU term idles, the GPU is idle). The emulator ends at SIGTERM
and when the process that started it (`--parent`) has ended, removing its tree then, so a killed
run leaves neither behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psutil

from ..contracts.clock import now_ns
from .cpu_estimate import CpuEstimateBackend
from .node_emulator_launch import WATCH_FILE
from .node_sources import EMULATOR_MARKER
from .simgpu import SimGpuBackend

MB = 1e6


@dataclass(frozen=True)
class RestModel:
    """The rest of the node: a base and watts per MB/s of disk and network traffic."""

    base_w: float = 30.0
    disk_w_per_mbps: float = 0.01
    net_w_per_mbps: float = 0.02


@dataclass(frozen=True)
class Terms:
    """One period's mean power (W) of each term of the emulated node."""

    cpu_w: float
    gpu_w: tuple[float, ...]
    rest_w: float

    @property
    def node_w(self) -> float:
        return self.cpu_w + sum(self.gpu_w) + self.rest_w


def io_bytes() -> tuple[float, float]:
    """The host's block-device bytes (read + written) and network bytes (sent + received)."""
    d, n = psutil.disk_io_counters(), psutil.net_io_counters()
    disk = float(d.read_bytes + d.write_bytes) if d is not None else 0.0
    return disk, float(n.bytes_sent + n.bytes_recv)


class NodeModel:
    """The emulated node: the CPU estimate and the simulated GPUs of a watched tree, and a rest
    from the host's disk and network traffic."""

    def __init__(self, rest: RestModel, cpu_idle_w: float, cpu_max_w: float, gpus: int,
                 mem_share: float, cap_w: float | None) -> None:
        self.rest = rest
        self.cpu = CpuEstimateBackend(cpu_idle_w, cpu_max_w)
        self.gpu = SimGpuBackend(n_gpus=gpus, mem_share=mem_share, cap_w=cap_w) if gpus else None
        self._io = io_bytes()
        self._t = time.monotonic()

    def watch(self, pid: int | None) -> None:
        """Drive the CPU and GPU terms by `pid`'s process tree."""
        self.cpu.watch_pid = pid
        if self.gpu is not None:
            self.gpu.watch_pid = pid

    def step(self, t_ns: int) -> Terms:
        """Each term's mean power since the previous step."""
        now, io = time.monotonic(), io_bytes()
        dt = max(now - self._t, 1e-6)
        disk_mbps = max(io[0] - self._io[0], 0.0) / MB / dt
        net_mbps = max(io[1] - self._io[1], 0.0) / MB / dt
        self._t, self._io = now, io
        cpu = _power(self.cpu.poll(t_ns))
        gpus = _power(self.gpu.poll(t_ns)) if self.gpu is not None else ()
        rest = (self.rest.base_w + self.rest.disk_w_per_mbps * disk_mbps
                + self.rest.net_w_per_mbps * net_mbps)
        return Terms(sum(cpu), gpus, rest)


def _power(rows: list[tuple[int, str, str, float, str]]) -> tuple[float, ...]:
    return tuple(float(v) for _, _, metric, v, _ in rows if metric == "power_w")


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a reader never sees half a value)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class TreeWriter:
    """The pm_counters tree: its counters' state and the files it writes."""

    def __init__(self, root: Path, describe: str) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        replace_text(root / EMULATOR_MARKER, describe + "\n")
        for name, text in (("generation", "1"), ("startup", str(time.time_ns() // 1000)),
                           ("version", "wattlife-node-emulator"), ("freshness", "0")):
            replace_text(root / name, text + "\n")
        self.energy: dict[str, float] = {}
        self.freshness = 0

    def write(self, t_ns: int, dt_s: float, terms: Terms) -> None:
        """The period's power and the energy counters of every term, then `freshness` bumped."""
        us = t_ns // 1000
        values = {"": terms.node_w, "cpu_": terms.cpu_w}
        values.update({f"accel{i}_": w for i, w in enumerate(terms.gpu_w)})
        for prefix, w in values.items():
            e = self.energy[prefix] = self.energy.get(prefix, 0.0) + w * dt_s
            replace_text(self.root / f"{prefix}power", f"{w:.0f} W {us} us\n")
            replace_text(self.root / f"{prefix}energy", f"{e:.0f} J {us} us\n")
        self.freshness += 1
        replace_text(self.root / "freshness", f"{self.freshness}\n")


def _read_watch(root: Path) -> int | None:
    try:
        return int((root / WATCH_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive(parent: int | None) -> bool:
    """The process that started the emulator is still its parent (it was not killed)."""
    return parent is None or os.getppid() == parent


def run_emulator(root: Path, model: NodeModel, period_s: float, parent: int | None) -> int:
    """Rewrite the tree every `period_s` until SIGTERM/SIGINT, or until `parent` has ended (then
    the tree is removed too: the killed run cannot); 0."""
    stop = [False]

    def _end(signum: int, frame: FrameType | None) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, _end)
    signal.signal(signal.SIGINT, _end)
    writer = TreeWriter(root, describe(model, period_s))
    last, watched = time.monotonic(), None
    writer.write(now_ns(), 0.0, model.step(now_ns()))
    while not stop[0] and _alive(parent):
        time.sleep(max(period_s - (time.monotonic() - last), 0.0))
        pid = _read_watch(root)
        if pid != watched:
            model.watch(pid)
            watched = pid
        now = time.monotonic()
        writer.write(now_ns(), now - last, model.step(now_ns()))
        last = now
    if not _alive(parent):  # the run that started it was killed: nobody else removes the tree
        shutil.rmtree(root, ignore_errors=True)
    return 0


def describe(model: NodeModel, period_s: float) -> str:
    """The marker's text: what wrote the tree and its model (meta.json shows it)."""
    r = model.rest
    gpus = (f"{model.gpu.n_gpus} simulated GPU(s) (mem_share {model.gpu.mem_share:g})"
            if model.gpu is not None else "no GPU (the node excludes the GPUs)")
    return (f"EMULATED by wattlife node-emulator every {period_s:g} s: node = CPU estimate "
            f"(idle {model.cpu.idle_w:g} W, max {model.cpu.max_w:g} W) + {gpus} + rest "
            f"({r.base_w:g} W + {r.disk_w_per_mbps:g} W per disk MB/s + {r.net_w_per_mbps:g} W "
            "per network MB/s)")
