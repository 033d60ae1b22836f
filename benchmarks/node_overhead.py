"""The sampler's cost with a whole-node power backend active (issue 45), CPU only.

    PYTHONPATH=src python3 benchmarks/node_overhead.py [--seconds 10]

Runs the real sampler for N seconds over the simulated GPU (20 ms) and the CPU estimate (50 ms),
three ways: no node source; pm_counters (a tree another process rewrites at 10 Hz, read every
100 ms); and a Redfish BMC on loopback that takes 5 s to answer each request (read every 200 ms,
time-out 8 s). Prints, per way: the sampler thread's CPU seconds per second, the node thread's,
the GPU rows per second and the longest spacing of the GPU's rows: a slow BMC must leave the GPU's
rows as they are without it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from wattlife.contracts import read_trace
from wattlife.devices.base import SensorBackend
from wattlife.devices.cpu_estimate import CpuEstimateBackend
from wattlife.devices.node import NodePoller
from wattlife.devices.node_redfish import Credentials, RedfishReader
from wattlife.devices.node_sources import PmCountersReader
from wattlife.devices.simgpu import SimGpuBackend
from wattlife.sampler import Sampler

WRITER = """
import os, sys, time
_, root = sys.argv
def put(name, text):
    tmp = os.path.join(root, "." + name)
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(root, name))
n = 0
while True:
    n += 1
    put("power", f"{300 + n % 7} W {n} us\\n")
    put("energy", f"{30 * n} J {n} us\\n")
    put("freshness", f"{n}\\n")
    time.sleep(0.1)
"""


class SlowBmc(BaseHTTPRequestHandler):
    """A Redfish Power resource that takes 5 s per request."""

    def log_message(self, *a: Any) -> None:
        pass

    def do_GET(self) -> None:
        time.sleep(5.0)
        body = b'{"PowerControl": [{"PowerConsumedWatts": 321}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def measure(label: str, node: SensorBackend | None, seconds: float, folder: Path) -> None:
    """One sampler run; prints its line."""
    backends: list[SensorBackend] = [SimGpuBackend(interval_s=0.02), CpuEstimateBackend(
        interval_s=0.05)]
    if node is not None:
        backends.append(node)
    trace = folder / f"{label}.csv"
    s = Sampler(backends, trace, host="bench")
    s.start()
    time.sleep(seconds)
    s.stop()
    tr = read_trace(trace)
    gpu = np.sort(tr.loc[(tr["device"] == "gpu0") & (tr["metric"] == "power_w"),
                         "t_ns"].to_numpy())
    span = (s.end_ns - s.start_ns) / 1e9
    node_cpu = node.cpu_time_s if isinstance(node, NodePoller) else 0.0
    rows = int((tr["device"] == "node").sum())
    print(f"{label:<22} sampler {s.cpu_time_s / span * 1e3:6.2f} ms CPU/s   node thread "
          f"{node_cpu / span * 1e3:6.2f} ms CPU/s   gpu rows {len(gpu) / span:5.1f}/s   "
          f"longest gpu spacing {np.diff(gpu).max() / 1e6:7.1f} ms   node rows {rows}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="node-overhead-") as tmp:
        folder = Path(tmp)
        measure("no node source", None, args.seconds, folder)
        pm = folder / "pm"
        pm.mkdir()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(pm)])
        try:
            while not (pm / "freshness").exists():
                time.sleep(0.05)
            measure("pm_counters 100 ms", NodePoller(PmCountersReader(pm, 0.1), 0.05),
                    args.seconds, folder)
        finally:
            writer.terminate()
            writer.wait()
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), SlowBmc)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{httpd.server_address[1]}"
            reader = RedfishReader(url, "1", Credentials(None, None), 0.2, 8.0)
            reader.resource = "/redfish/v1/Chassis/1/Power"
            measure("redfish, 5 s a request", NodePoller(reader, 0.05), args.seconds, folder)
        finally:
            httpd.shutdown()
            httpd.server_close()


if __name__ == "__main__":
    main()
