"""`wattlife node-emulator`: an EMULATED whole-node power source for machines without one (the
CPU demo config/node-demo.yaml; `devices.node_emulator`), never a measurement."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_node_emulator(a: argparse.Namespace) -> int:
    """Run the emulator in this process until SIGTERM (or until --parent has ended)."""
    from ..devices.node_emulator import NodeModel, RestModel, run_emulator

    model = NodeModel(RestModel(a.base_w, a.disk_w_per_mbps, a.net_w_per_mbps), a.cpu_idle_w,
                      a.cpu_max_w, a.gpus, a.mem_share, a.cap_w)
    return run_emulator(Path(a.root), model, a.period_ms / 1000.0, a.parent)


def add_parsers(sub: Any) -> None:
    """The `node-emulator` command's parser (defaults: the schema's `sampler` keys the sampler
    would pass it)."""
    from ..config.loading import schema_default
    from .options import positive_ms

    def rest(key: str) -> Any:
        return schema_default("sampler", "node_sources", "pm_counters", "emulator", key)

    def sampler(*key: str) -> Any:
        return schema_default("sampler", *key)

    ne = sub.add_parser("node-emulator", help="EMULATE a whole-node power source (a pm_counters "
                                              "tree written at 10 Hz): no hardware, readings "
                                              "labelled pm_counters_emulated",
                        description="Writes an HPE/Cray pm_counters tree (power, energy, "
                                    "cpu_*, accel<i>_*, freshness, generation, startup and a "
                                    "wattlife_emulator marker) every --period-ms until SIGTERM. "
                                    "node = CPU estimate + simulated GPUs of the process tree "
                                    "whose pid is in ROOT/watch_pid + a rest from the host's "
                                    "disk and network bytes (docs/FORMULAS.md).")
    ne.add_argument("kind", choices=["pm-counters"], help="the source to emulate")
    ne.add_argument("--root", required=True, help="the tree's folder (created)")
    ne.add_argument("--period-ms", type=positive_ms,
                    default=sampler("node_sources", "pm_counters", "period_ms"),
                    help="update period (default: %(default)g, pm_counters' 10 Hz)")
    ne.add_argument("--base-w", type=float, default=rest("base_w"),
                    help="the rest's constant part, W (default: %(default)g)")
    ne.add_argument("--disk-w-per-mbps", type=float, default=rest("disk_w_per_mbps"),
                    help="W per MB/s of the host's block devices (default: %(default)g)")
    ne.add_argument("--net-w-per-mbps", type=float, default=rest("net_w_per_mbps"),
                    help="W per MB/s of the host's network interfaces, loopback included "
                         "(default: %(default)g)")
    ne.add_argument("--cpu-idle-w", type=float, default=sampler("cpu_estimate", "idle_w"),
                    help="the CPU estimate's idle power, W (default: %(default)g)")
    ne.add_argument("--cpu-max-w", type=float, default=sampler("cpu_estimate", "max_w"),
                    help="the CPU estimate's power at full load, W (default: %(default)g)")
    ne.add_argument("--gpus", type=int, default=sampler("sim_gpu", "n_gpus"),
                    help="simulated GPUs in the node (0: the node excludes the GPUs) "
                         "(default: %(default)s)")
    ne.add_argument("--mem-share", type=float, default=sampler("sim_gpu", "mem_share"),
                    help="the simulated GPUs' memory-bound share (default: %(default)g)")
    ne.add_argument("--cap-w", type=float, default=None,
                    help="the simulated GPUs' power cap, W (default: their TDP)")
    ne.add_argument("--parent", type=int, default=None,
                    help="end, removing ROOT, when this process (the emulator's parent) has "
                         "ended (default: run until SIGTERM)")
    ne.set_defaults(fn=cmd_node_emulator)
