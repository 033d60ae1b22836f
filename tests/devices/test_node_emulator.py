"""The package's pm_counters EMULATOR (`wattlife node-emulator`, devices/node_emulator*.py) as the
sampler starts it (`sampler.node_sources.pm_counters.emulator`): a real process writing a real
pm_counters tree at 10 Hz, read by the real pm_counters reader. Its readings are labelled
`pm_counters_emulated` (class simulated), its power follows its documented model, and no
emulator outlives the run that started it (closed, killed, or dead itself)."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from node_checks import run_sampler, wait_for
from wattlife.config import SamplerSettings
from wattlife.contracts.clock import now_ns
from wattlife.contracts.sources import SIMULATED, source_basis, source_spec
from wattlife.devices.node import NodePoller
from wattlife.devices.node_emulator_launch import EmulatorTerms, start_emulator
from wattlife.devices.node_sources import EMULATED_SOURCE, EMULATOR_MARKER, PmCountersReader
from wattlife.errors import SensorError
from wattlife.sampler import build_backends
from wattlife.simgpu_model import SimGpuModel

BASE_W, IDLE_W = 25.0, 40.0


def _settings(gpu: str = "none", **rest: float) -> SamplerSettings:
    emulator = {"base_w": BASE_W, "disk_w_per_mbps": 0.0, "net_w_per_mbps": 0.0, **rest}
    return SamplerSettings.from_dict({
        "gpu": gpu, "cpu": "estimate", "cpu_estimate": {"idle_w": IDLE_W, "max_w": 150},
        "sim_gpu": {"n_gpus": 1}, "node": "pm_counters",
        "node_sources": {"pm_counters": {"emulator": emulator}}})


def _node(s: SamplerSettings) -> tuple[NodePoller, list, list[str]]:
    backends, notes = build_backends(s, log=lambda *a: None)
    (node,) = [b for b in backends if isinstance(b, NodePoller)]
    return node, backends, notes


@pytest.mark.parametrize("gpu", ["none", "sim"])
def test_the_emulated_node_is_labelled_simulated_and_follows_its_model(tmp_path, gpu):
    """No watched tree: node = the CPU estimate's idle + the simulated GPU's idle (with a sim
    GPU) + the base; every node row says pm_counters_emulated, a simulated source; the energy
    counter grows at that power; closing the sampler ends the emulator and removes its tree."""
    node, backends, notes = _node(_settings(gpu))
    proc, root = node.reader.proc, node.reader.root
    assert (root / EMULATOR_MARKER).is_file() and node.source == EMULATED_SOURCE
    assert source_spec(EMULATED_SOURCE).cls == SIMULATED
    assert source_basis(EMULATED_SOURCE) == SIMULATED
    assert notes[-1].startswith("node power is EMULATED (pm_counters emulator), NOT MEASURED "
                                "(source=pm_counters_emulated)")
    tr, _ = run_sampler(tmp_path, backends, now_ns() + int(2.0e9))
    rows = tr[tr["device"] == "node"]
    assert set(rows["source"]) == {EMULATED_SOURCE}
    expect = IDLE_W + BASE_W + (SimGpuModel().idle_w if gpu == "sim" else 0.0)
    power = rows.loc[rows["metric"] == "power_w", "value"].to_numpy()
    assert len(power) >= 5 and np.all(np.abs(power - expect) <= 0.5)  # written as whole W
    e = rows[rows["metric"] == "energy_j"].sort_values("t_ns")
    span = (e["t_ns"].iloc[-1] - e["t_ns"].iloc[0]) / 1e9
    # the counter (whole J) over the readings' span, each stamped within a period of its update
    assert abs(e["value"].iloc[-1] - e["value"].iloc[0] - expect * span) <= expect * 0.25 + 2
    assert node.info()["emulator"].startswith("EMULATED by wattlife node-emulator")
    assert proc.poll() is not None and not root.exists()  # Sampler.stop closed the reader


def test_the_rest_follows_the_hosts_network_bytes(tmp_path):
    """Bytes through loopback while the emulator runs: its node power rises above the base by at
    least net_w_per_mbps x the test's own MB/s (others' traffic only adds)."""
    node, backends, _ = _node(_settings(net_w_per_mbps=1.0))
    srv = socket.create_server(("127.0.0.1", 0))
    sent = [0]

    def sink() -> None:
        conn, _ = srv.accept()
        with conn:
            while conn.recv(1 << 20):
                pass

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    chunk = b"\0" * (1 << 20)
    with socket.create_connection(srv.getsockname()) as c:
        run_start = now_ns()
        from wattlife.sampler import Sampler

        s = Sampler(backends, tmp_path / "trace.csv", host="h")
        s.start()
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.0:
                c.sendall(chunk)
                sent[0] += len(chunk)
        finally:
            elapsed = time.monotonic() - t0
            s.stop()
    t.join(10)
    srv.close()
    import pandas as pd

    tr = pd.read_csv(tmp_path / "trace.csv")
    e = tr[(tr["device"] == "node") & (tr["metric"] == "energy_j")].sort_values("t_ns")
    joules = e["value"].iloc[-1] - e["value"].iloc[0]
    span = (e["t_ns"].iloc[-1] - e["t_ns"].iloc[0]) / 1e9
    assert span > 1.0 and e["t_ns"].iloc[0] >= run_start
    mbps = 2 * sent[0] / 1e6 / elapsed  # sent and received on lo
    # the traffic's energy, less one period at each end the counter may not cover
    assert joules >= (IDLE_W + BASE_W) * span + mbps * (span - 0.4) * 0.8


def test_a_dead_emulator_is_an_error_never_its_last_values(tmp_path):
    reader = start_emulator(0.1, BASE_W, 0.0, 0.0, EmulatorTerms())
    try:
        assert reader.read() is not None
        reader.proc.send_signal(signal.SIGKILL)
        reader.proc.wait(10)
        with pytest.raises(SensorError, match=r"^pm_counters emulator exited with -9"):
            reader.read()
    finally:
        reader.close()
    assert not reader.root.exists()


def test_the_reader_labels_a_tree_by_its_marker_only(tmp_path):
    """A tree without the marker is `pm_counters` (measured); with it, `pm_counters_emulated`."""
    for name, text in (("power", "300 W 1 us"), ("energy", "5 J 1 us"), ("freshness", "1")):
        (tmp_path / name).write_text(text + "\n")
    assert PmCountersReader(tmp_path).source == "pm_counters"
    (tmp_path / EMULATOR_MARKER).write_text("EMULATED by a test\n")
    r = PmCountersReader(tmp_path)
    assert r.source == EMULATED_SOURCE and r.describe()["emulator"] == "EMULATED by a test"


PARENT = """
import sys, time
from wattlife.devices.node_emulator_launch import EmulatorTerms, start_emulator
r = start_emulator(0.1, 25.0, 0.0, 0.0, EmulatorTerms())
print(r.proc.pid, r.root, flush=True)
time.sleep(600)
"""


def test_an_emulator_ends_when_the_run_that_started_it_is_killed(tmp_path, children):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = children.spawn([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                            env=env)
    pid_text, root = parent.stdout.readline().split()
    pid = int(pid_text)
    try:
        assert Path(root, "freshness").is_file()
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: not _alive(pid), "the emulator ending after its parent", timeout=30)
        assert not Path(root).exists()  # it removed its tree: the killed run could not
    finally:
        if _alive(pid):  # by its id, never by a name
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
