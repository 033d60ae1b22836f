"""Emulated node power sources for tests/test_node_*.py, each a real process the test starts:

- `pm_counters ROOT T0_NS`: an HPE/Cray /sys/cray/pm_counters tree rewritten at 10 Hz (power,
  energy, freshness bumped after each update, generation, startup);
- `redfish MOCKUP T0_NS`: a Redfish mockup (for `sushy-static`) whose Chassis/1/Power and
  Chassis/2/EnvironmentMetrics resources are rewritten at 5 Hz;
- `sstat T0_NS STEP_PERIOD_S ARGS...`: answers as `sstat -P -n --format=JobID,ConsumedEnergyRaw
  -j STEP` does, the step's energy updated every STEP_PERIOD_S (an acct_gather_energy plugin).

All follow one known power schedule (`power_at`, `energy_between`): SEGMENT_S-long segments
alternating LOW_W and HIGH_W from T0 (the one clock, `wattlife.contracts.clock.now_ns`), so the
tests know each interval's true energy. Each writer keeps the longest gap between its updates in
`<dir>/maxgap_s` (a loaded machine can delay it: the tests widen their bound by it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

LOW_W, HIGH_W, SEGMENT_S = 150.0, 350.0, 1.0
BASE_J = 1_000_000.0  # the counters do not start at 0


def power_at(t_ns: float, t0_ns: int) -> float:
    """The schedule's power (W) at `t_ns` (LOW before T0)."""
    k = np.floor((t_ns - t0_ns) / 1e9 / SEGMENT_S)
    return HIGH_W if k >= 0 and k % 2 == 1 else LOW_W


def energy_to(t_ns: float, t0_ns: int) -> float:
    """Joules from T0 to `t_ns` (negative before T0: LOW_W back in time)."""
    s = (t_ns - t0_ns) / 1e9
    if s <= 0:
        return LOW_W * s
    full = int(s // SEGMENT_S)
    pairs, odd = divmod(full, 2)
    e = pairs * SEGMENT_S * (LOW_W + HIGH_W) + odd * SEGMENT_S * LOW_W
    return e + (s - full * SEGMENT_S) * (HIGH_W if full % 2 == 1 else LOW_W)


def energy_between(a_ns: float, b_ns: float, t0_ns: int) -> float:
    """The schedule's true energy (J) over [a, b]."""
    return energy_to(b_ns, t0_ns) - energy_to(a_ns, t0_ns)


def integrate_power(t_ns: np.ndarray, p_w: np.ndarray, a_ns: float, b_ns: float) -> float:
    """Energy of power readings over [a, b], each reading held until the next (zero-order hold)."""
    t = np.asarray(t_ns, float)
    edges = np.clip(np.append(t, np.inf), a_ns, b_ns)
    return float(np.sum(np.asarray(p_w, float) * np.diff(edges)) / 1e9)


def counter_between(t_ns: np.ndarray, e_j: np.ndarray, a_ns: float, b_ns: float) -> float:
    """Energy of cumulative counter readings over [a, b] (linear between readings)."""
    return float(np.interp(b_ns, t_ns, e_j) - np.interp(a_ns, t_ns, e_j))


def _now() -> int:
    from wattlife.contracts.clock import now_ns

    return now_ns()


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _loop(folder: Path, period_s: float, update) -> None:
    maxgap, last = 0.0, time.monotonic()
    while True:
        now = time.monotonic()
        maxgap = max(maxgap, now - last)
        last = now
        update(_now())
        _replace(folder / "maxgap_s", f"{maxgap}\n")
        time.sleep(period_s)


def pm_counters(root: Path, t0: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("generation", "7"), ("startup", "1700000000"), ("freshness", "0"),
                       ("power", f"{LOW_W:.0f} W 0 us"), ("energy", f"{BASE_J:.0f} J 0 us")):
        _replace(root / name, text + "\n")
    fresh = [0]

    def update(t: int) -> None:
        us = t // 1000
        _replace(root / "power", f"{power_at(t, t0):.0f} W {us} us\n")
        _replace(root / "energy", f"{BASE_J + energy_to(t, t0):.0f} J {us} us\n")
        fresh[0] += 1
        _replace(root / "freshness", f"{fresh[0]}\n")

    _loop(root, 0.1, update)


def redfish_mockup(root: Path) -> None:
    """The mockup's static resources (the service root, the chassis collection, two chassis)."""
    def put(rel: str, doc: dict) -> None:
        p = root / rel / "index.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        _replace(p, json.dumps(doc))

    v1 = "/redfish/v1"
    put("", {"@odata.id": v1 + "/", "Id": "RootService", "RedfishVersion": "1.15.0",
             "Chassis": {"@odata.id": v1 + "/Chassis"}})
    members = [{"@odata.id": v1 + "/Chassis/1"}, {"@odata.id": v1 + "/Chassis/2"}]
    put("Chassis", {"@odata.id": v1 + "/Chassis", "Members@odata.count": 2, "Members": members})
    put("Chassis/1", {"@odata.id": v1 + "/Chassis/1", "Id": "1",
                      "Power": {"@odata.id": v1 + "/Chassis/1/Power"}})
    put("Chassis/2", {"@odata.id": v1 + "/Chassis/2", "Id": "2",
                      "EnvironmentMetrics": {"@odata.id": v1 + "/Chassis/2/EnvironmentMetrics"}})


def redfish(root: Path, t0: int) -> None:
    redfish_mockup(root)

    def update(t: int) -> None:
        p = power_at(t, t0)
        _replace(root / "Chassis/1/Power/index.json", json.dumps(
            {"@odata.id": "/redfish/v1/Chassis/1/Power", "Id": "Power",
             "PowerControl": [{"MemberId": "0", "PowerConsumedWatts": p}]}))
        (root / "Chassis/2/EnvironmentMetrics").mkdir(parents=True, exist_ok=True)
        _replace(root / "Chassis/2/EnvironmentMetrics/index.json", json.dumps(
            {"@odata.id": "/redfish/v1/Chassis/2/EnvironmentMetrics",
             "PowerWatts": {"Reading": p},
             "EnergyJoules": {"Reading": BASE_J + energy_to(t, t0)}}))

    (root / "Chassis/1/Power").mkdir(parents=True, exist_ok=True)
    _loop(root, 0.2, update)


def sstat(t0: int, plugin_period_s: float, argv: list[str]) -> None:
    """One `sstat -P -n --format=JobID,ConsumedEnergyRaw -j STEP` answer."""
    step = argv[argv.index("-j") + 1]
    t = _now()
    # the plugin's last update: a multiple of its period since T0 (none before T0)
    k = np.floor((t - t0) / 1e9 / plugin_period_s)
    energy = "" if k < 1 else f"{energy_to(t0 + k * plugin_period_s * 1e9, t0):.0f}"
    print(f"{step}|{energy}|")


def start_ipmi_sim(tmp_path: Path, children, port: int):
    """OpenIPMI's ipmi_sim on loopback UDP `port` (a BMC with no DCMI), user `ipmiusr`, password
    `sim-pass-9`, as a child of the `children` fixture; the caller waits for its port."""
    conf = tmp_path / "lan.conf"
    conf.write_text(f"""name "sim"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  user 2 true  "ipmiusr" "sim-pass-9" admin    10       none md2 md5 straight
""")
    emu_file = tmp_path / "sim.emu"
    emu_file.write_text("mc_setbmc 0x20\n"
                        "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
                        "mc_enable 0x20\n")
    state = tmp_path / "state"
    state.mkdir()
    return children.spawn(["ipmi_sim", "-c", str(conf), "-f", str(emu_file), "-s", str(state),
                           "-n"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    kind = sys.argv[1]
    if kind == "pm_counters":
        pm_counters(Path(sys.argv[2]), int(sys.argv[3]))
    elif kind == "redfish":
        redfish(Path(sys.argv[2]), int(sys.argv[3]))
    elif kind == "sstat":
        sstat(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
    else:
        raise SystemExit(f"node_emulators: unknown kind {kind!r}")


if __name__ == "__main__":
    main()
