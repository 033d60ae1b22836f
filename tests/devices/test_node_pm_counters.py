"""The pm_counters node backend against a /sys/cray/pm_counters tree a real process rewrites at
10 Hz (tests/node_emulators.py), through the real sampler: known energies per schedule segment,
consistent reads only (freshness, generation), counter restarts."""

import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import node_emulators as emu
from node_checks import check_segments, maxgap, run_sampler, wait_for
from wattlife.contracts.clock import now_ns
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.node import EnergyCounter, NodePoller, NodeReading
from wattlife.devices.node_sources import PmCountersReader
from wattlife.errors import SensorError

EMU = str(Path(emu.__file__))


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
    with pytest.raises(SensorError, match=r"pm_counters power: '412 kW 17 us' is not '<value> W"):
        PmCountersReader(root).read()


@given(st.lists(st.tuples(st.floats(0, 1e12, allow_nan=False), st.booleans()), min_size=1,
                max_size=50))
def test_energy_since_the_first_reading_is_monotone_and_counts_restarts(readings):
    c = EnergyCounter()
    totals = [c.add(raw, restarted) for raw, restarted in readings]
    assert totals[0] == 0.0 and all(b >= a for a, b in pairwise(totals))
    # it adds exactly the rises between readings that neither restarted nor went down
    want = sum(b - a for (a, _), (b, r) in pairwise(readings) if not r and b >= a)
    assert totals[-1] == pytest.approx(want)
    assert c.resets == sum(1 for (a, _), (b, r) in pairwise(readings) if r or b < a)


@given(st.floats(0, 1e7, allow_nan=False).map(lambda w: round(w, 2)),
       st.integers(0, 10**18), st.integers(0, 10**16))
def test_pm_counters_values_round_trip(watts, joules, us):
    assert PmCountersReader._value(f"{watts} W {us} us", "W", "power") == watts
    assert PmCountersReader._value(f"{joules} J {us} us", "J", "energy") == float(joules)
