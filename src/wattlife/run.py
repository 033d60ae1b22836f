"""`wattlife run -- CMD`: the sampler around a command.

Starts the sampler, records an idle baseline, runs CMD with the events path in its environment
(`WATTLIFE_EVENTS`), forwards SIGINT/SIGTERM to it, stops the sampler when it ends, writes
meta.json, and returns CMD's exit code.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from .markers import ENV_EVENTS, ENV_RUN_ID
from .sampler import Sampler, build_backends

LIBRARIES = ["wattlife", "torch", "torchvision", "transformers", "nvidia-ml-py", "numpy", "pandas",
             "snakemake", "psutil"]


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_under_sampler(cmd: list[str], trace: str | Path, events: str | Path,
                      meta: str | Path | None = None, sampler_cfg: dict[str, Any] | None = None,
                      run_id: str | None = None, cell: dict[str, Any] | None = None) -> int:
    """Run `cmd` under the sampler; return its exit code. See the module docstring."""
    sampler_cfg = sampler_cfg or {}
    trace, events = Path(trace), Path(events)
    meta = Path(meta) if meta else trace.with_name("meta.json")
    run_id = run_id or trace.parent.name
    events.parent.mkdir(parents=True, exist_ok=True)
    if events.exists():
        events.unlink()  # a rerun of the cell starts a fresh events file
    for old in events.parent.glob(f"{events.stem}.rank*{events.suffix}"):
        old.unlink()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)

    backends, notes = build_backends(sampler_cfg, log=log)
    sampler = Sampler(backends, trace)
    sampler.start()
    idle_s = float(sampler_cfg.get("idle_baseline_s", 0.0))
    if idle_s > 0:
        time.sleep(idle_s)
    idle_end = time.time_ns()

    env = dict(os.environ, **{ENV_EVENTS: str(events.resolve()), ENV_RUN_ID: run_id})
    t_start = time.time_ns()
    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        sampler.stop()
        raise RuntimeError(f"cannot start {cmd[0]!r}: {exc}") from exc
    for b in backends:
        if hasattr(b, "watch_pid"):
            b.watch_pid = proc.pid

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        t_end = time.time_ns()
        sampler.stop()
        info = [b.info() for b in backends]
        gpu_info = next((i for i in info if "gpu_model" in i), {})
        doc = {
            "run_id": run_id, "host": socket.gethostname(), "cmd": cmd,
            "cell": cell or {}, "start_ns": sampler.start_ns, "end_ns": sampler.end_ns,
            "workload_start_ns": t_start, "workload_end_ns": t_end,
            "idle_baseline": {"start_ns": sampler.start_ns, "end_ns": idle_end},
            "exit_code": proc.returncode,
            "gpu_model": gpu_info.get("gpu_model"), "driver": gpu_info.get("driver"),
            "sampler": {"settings": sampler_cfg, "backends": info, "sensors": sampler.sensors(),
                        "rows": sampler.rows_written, "cpu_time_s": sampler.cpu_time_s,
                        "errors": sampler.errors},
            "sensor_notes": notes, "platform": platform.platform(),
            "python": sys.version.split()[0], "libraries": library_versions(),
        }
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(doc, indent=2, default=str))
    return rc
