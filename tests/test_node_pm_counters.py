"""The pm_counters node backend against a /sys/cray/pm_counters tree a real process rewrites at
10 Hz (tests/node_emulators.py), through the real sampler: known energies per schedule segment,
consistent reads only (freshness, generation), counter restarts."""

import sys
import time
from pathlib import Path

import numpy as np
import pytest

import node_emulators as emu
from wattlife.contracts import read_trace
from wattlife.contracts.clock import now_ns
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.node import NodePoller, NodeReading
from wattlife.devices.node_sources import PmCountersReader
from wattlife.sampler import Sampler

EMU = str(Path(emu.__file__))


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


@pytest.mark.slow
def test_pm_counters_known_energy_per_segment(tmp_path, children):
    root = tmp_path / "pm_counters"
    t0 = now_ns() + int(1e9)
    children.spawn([sys.executable, EMU, "pm_counters", str(root), str(t0)])
    wait_for(lambda: (root / "maxgap_s").exists(), "the pm_counters writer")
    poller = NodePoller(PmCountersReader(root, period_s=0.1), interval_s=0.05)
    tr, sampler = run_sampler(tmp_path, [poller], t0 + int(3.3e9))
    node = tr[tr["device"] == "node"]
    assert set(node["source"]) == {"pm_counters"}
    assert set(node["metric"]) == {"power_w", "energy_j"}
    assert set(node.loc[node["metric"] == "power_w", "value"]) <= {emu.LOW_W, emu.HIGH_W}
    e = node.loc[node["metric"] == "energy_j"].sort_values("t_ns")["value"].to_numpy()
    assert e[0] == 0.0 and np.all(np.diff(e) >= 0)  # J since the first reading, monotone
    spacing = np.diff(np.sort(node.loc[node["metric"] == "power_w", "t_ns"].to_numpy())) / 1e9
    lag = maxgap(root) + float(spacing.max()) + 0.05
    assert check_segments(node, t0, lag) >= 2
    info = poller.info()
    assert info["source"] == "pm_counters" and info["metrics"] == ["power_w", "energy_j"]
    assert info["reading_period_s"] > 0 and info["readings"] >= 20
    sensors = {(s["device"], s["metric"]): s for s in sampler.sensors()}
    assert sensors[("node", "power_w")]["source"] == "pm_counters"
    assert sensors[("node", "energy_j")]["reading_period_s"] > 0


def _tree(root: Path, fresh: int = 1, gen: int = 7, startup: int = 1) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("freshness", str(fresh)), ("generation", str(gen)),
                       ("startup", str(startup)), ("power", "412 W 17 us"),
                       ("energy", "90000 J 17 us")):
        (root / name).write_text(text + "\n")
    return root


class Straddling(PmCountersReader):
    """The real reader whose tree is updated (freshness or generation bumped) between its first
    and second look at it, in the first `straddles` attempts."""

    def __init__(self, root, straddles: int, counter: str = "freshness") -> None:
        super().__init__(root)
        self.straddles, self.counter, self.looks = straddles, counter, 0

    def _text(self, name):
        text = super()._text(name)
        if name == self.counter:
            self.looks += 1
            if self.looks <= 2 * self.straddles and self.looks % 2 == 0:
                (self.root / name).write_text(f"{int(text) + 1}\n")
                return str(int(text) + 1)
        return text

    def _optional(self, name):
        return self._text(name) if name == self.counter else super()._optional(name)


@pytest.mark.parametrize("counter", ["freshness", "generation"])
def test_a_read_that_straddles_an_update_is_retried_then_skipped(tmp_path, counter):
    once = Straddling(_tree(tmp_path / "a"), straddles=1, counter=counter)
    assert once.read() == NodeReading(power_w=412.0, energy_j=90000.0)  # the retry is consistent
    twice = Straddling(_tree(tmp_path / "b"), straddles=2, counter=counter)
    assert twice.read() is None  # both attempts straddled: no reading rather than a torn one
    poller = NodePoller(Straddling(_tree(tmp_path / "c"), straddles=2, counter=counter))
    poller.read_once()
    assert poller.inconsistent == 1 and poller.readings == 0 and poller.take() == []


def test_a_restarted_counter_adds_nothing_for_its_interval(tmp_path):
    root = _tree(tmp_path / "pm")
    poller = NodePoller(PmCountersReader(root))
    poller.read_once()
    (root / "energy").write_text("90500 J 18 us\n")
    poller.read_once()
    (root / "startup").write_text("2\n")  # the node restarted its counters
    (root / "energy").write_text("30 J 19 us\n")
    poller.read_once()
    (root / "energy").write_text("130 J 20 us\n")
    poller.read_once()
    energies = [r[3] for r in poller.take() if r[2] == "energy_j"]
    assert energies == [0.0, 500.0, 500.0, 600.0]
    assert poller.info()["counter_resets"] == 1


def test_absent_or_malformed_tree_says_why(tmp_path):
    with pytest.raises(SensorUnavailable, match="not an HPE/Cray node"):
        PmCountersReader(tmp_path / "none")
    root = _tree(tmp_path / "pm")
    (root / "power").write_text("412 kW 17 us\n")
    with pytest.raises(ValueError, match=r"pm_counters power: '412 kW 17 us' is not '<value> W"):
        PmCountersReader(root).read()
