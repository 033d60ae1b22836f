"""Checks shared by tests/test_node_*.py: waiting on files and the clock, a real sampler run, and
the known-answer comparison of node rows with the emulators' power schedule (node_emulators)."""

import time
from pathlib import Path

import node_emulators as emu
from wattlife.contracts import read_trace
from wattlife.contracts.clock import now_ns
from wattlife.devices.node import NodePoller, NodeReader
from wattlife.devices.registry import build_role, roles
from wattlife.sampler import Sampler


def build_node(s, interval_s: float = 0.05):
    """The node role of the sensor-backend registry built from sampler settings `s` (what
    `sampler.build_backends` does for `sampler.node`): (backends, notes)."""
    (node,) = [r for r in roles() if r.role == "node"]
    return build_role(node, s, interval_s, log=lambda *a: None)


def wait_for(pred, what: str, timeout: float = 60.0) -> None:
    """Poll `pred` until true (readiness read from files, never assumed after a sleep)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.05)


def run_sampler(tmp_path: Path, backends, until_ns: int):
    """The real sampler over `backends` until the one clock passes `until_ns`; the trace."""
    s = Sampler(backends, tmp_path / "trace.csv", host="h")
    s.start()
    try:
        wait_for(lambda: now_ns() > until_ns, "the schedule's end", timeout=120)
    finally:
        s.stop()
    assert not s.errors, s.errors
    return read_trace(tmp_path / "trace.csv"), s


def maxgap(folder: Path) -> float:
    return float((folder / "maxgap_s").read_text())


def check_segments(node, t0: int, lag_s: float, n_segments: int = 3) -> int:
    """Each full schedule segment inside the trace: the power rows integrated, and the energy
    counter's difference, against the schedule's true energy, within the lag's bound."""
    pw = node[node["metric"] == "power_w"].sort_values("t_ns")
    ej = node[node["metric"] == "energy_j"].sort_values("t_ns")
    checked = 0
    for k in range(n_segments):
        a, b = t0 + k * emu.SEGMENT_S * 1e9, t0 + (k + 1) * emu.SEGMENT_S * 1e9
        if a < pw["t_ns"].min() or b > pw["t_ns"].max():
            continue
        true = emu.energy_between(a, b, t0)
        got_p = emu.integrate_power(pw["t_ns"].to_numpy(), pw["value"].to_numpy(), a, b)
        # each segment edge is seen at most `lag_s` late: (HIGH-LOW) x lag at each of two edges
        assert abs(got_p - true) <= 2 * (emu.HIGH_W - emu.LOW_W) * lag_s + 1e-6, (k, got_p, true)
        if len(ej):
            got_e = emu.counter_between(ej["t_ns"].to_numpy(), ej["value"].to_numpy(), a, b)
            assert abs(got_e - true) <= 2 * emu.HIGH_W * lag_s + 1.0, (k, got_e, true)
        checked += 1
    return checked


def hanging_client(folder: Path, name: str) -> Path:
    """A stand-in for a BMC client `name` that never answers (a script that sleeps 30 s)."""
    hang = folder / name
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    return hang


def timed_out_poller(reader: NodeReader, command: Path, timeout_s: float) -> NodePoller:
    """A poller of `reader` (whose client is `command`, never answering) after one read: that
    read failed as a time-out naming the client and the bound."""
    poller = NodePoller(reader)
    poller.read_once()
    assert poller.failures == 1 and poller.errors == [
        f"TimeoutError: {command} gave no answer within {timeout_s} s"]
    return poller
