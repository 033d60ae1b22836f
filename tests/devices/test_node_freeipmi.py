"""The FreeIPMI DCMI node backend (`devices.node_freeipmi`, `sampler.node: freeipmi`).

Against the real `ipmi-dcmi` (Debian freeipmi-tools) where installed: (1) a BMC that answers
DCMI, pyghmi's IPMI 2.0 server with a Get Power Reading handler (tests/dcmi_bmc.py; pyghmi is in the
dev lock), whose power follows node_emulators' schedule, so the node
rows are checked against known energies; (2) OpenIPMI's ipmi_sim, which answers IPMI but not
DCMI: ipmi-dcmi's refusal is said at start. The parser is checked on FreeIPMI's documented output
format, recorded, and with hypothesis.
"""

import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import node_emulators as emu
from node_checks import (
    build_node,
    check_segments,
    hanging_client,
    run_sampler,
    timed_out_poller,
    wait_for,
)
from wattlife.config import SamplerSettings, load_section
from wattlife.contracts import SOURCES_MEASURED
from wattlife.contracts.clock import now_ns
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.node_freeipmi import FreeIpmiReader, parse_freeipmi_power
from wattlife.devices.registry import choices
from wattlife.errors import InputError, SensorError

HERE = Path(__file__).resolve().parents[1]
IPMI_DCMI = shutil.which("ipmi-dcmi")
needs_ipmi_dcmi = pytest.mark.skipif(IPMI_DCMI is None,
                                     reason="ipmi-dcmi (Debian freeipmi-tools) is not installed")

# `ipmi-dcmi --get-system-power-statistics` (FreeIPMI 1.6.10), as its documentation shows it
FREEIPMI_OUTPUT = """\
Current Power                        : 412 Watts
Minimum Power over sampling duration : 98 watts
Maximum Power over sampling duration : 530 watts
Average Power over sampling duration : 377 watts
Time Stamp                           : 12/05/2026 - 22:04:03
Statistics reporting time period     : 1000 milliseconds
Power Measurement                    : Active
"""
NOT_ACTIVE = FREEIPMI_OUTPUT.replace(": Active", ": Not Available").replace("412", "0")


def test_freeipmi_output_parsed_inactive_is_no_reading_and_bad_output_named():
    assert parse_freeipmi_power(FREEIPMI_OUTPUT) == 412.0
    assert parse_freeipmi_power(NOT_ACTIVE) is None  # never 0 W
    with pytest.raises(SensorError, match=r"no 'Current Power : <W> Watts' line"):
        parse_freeipmi_power("ipmi-dcmi: connection timeout\n")


@given(st.integers(min_value=0, max_value=65535), st.sampled_from(["Watts", "watts"]))
def test_freeipmi_current_power_round_trips(watts, unit):
    text = FREEIPMI_OUTPUT.replace("412 Watts", f"{watts} {unit}")
    assert parse_freeipmi_power(text) == watts


def test_freeipmi_is_a_node_choice_and_its_block_takes_the_schema_defaults(tmp_path):
    assert "freeipmi" in choices("node") and "freeipmi" in SOURCES_MEASURED
    cfg = tmp_path / "s.yaml"
    cfg.write_text(yaml.safe_dump({"sampler": {"node": "freeipmi", "node_sources": {
        "freeipmi": {"host": "bmc-{host}", "username_env": "U"}}}}))
    s = SamplerSettings.from_dict(load_section(cfg, "sampler"))
    assert s.node_sources.block("freeipmi") == {
        "host": "bmc-{host}", "port": 623, "driver": "LAN_2_0", "command": "ipmi-dcmi",
        "credentials_file": None, "username_env": "U", "password_env": None,
        "timeout_ms": 2000, "period_ms": 1000}
    recorded = s.as_dict()["node_sources"]["freeipmi"]
    assert recorded["host"] == "bmc-{host}" and "password_env" not in recorded
    # a config without the block records what it recorded before (meta.json's settings)
    assert "freeipmi" not in SamplerSettings.from_dict({}).as_dict()["node_sources"]


def test_the_password_goes_in_a_private_file_removed_at_close():
    r = FreeIpmiReader("10.0.0.9", 6230, "admin", "s3cret pass", command="ipmi-dcmi")
    assert "s3cret" not in " ".join(r.argv)
    conf = Path(r.argv[r.argv.index("--config-file") + 1])
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert conf.read_text() == 'username "admin"\npassword "s3cret pass"\n'
    assert r.argv[:5] == ["ipmi-dcmi", "-h", "10.0.0.9:6230", "-D", "LAN_2_0"]
    r.close()
    assert not conf.exists() and not conf.parent.exists()
    with pytest.raises(InputError, match=r"^sampler.node_sources.freeipmi: a user or password "
                                         "holding a double quote"):
        FreeIpmiReader("h", 623, "admin", 'a"b')
    in_band = FreeIpmiReader(None, 623, None, None, timeout_s=2)
    assert in_band.argv == ["ipmi-dcmi", "--session-timeout=2000",
                            "--get-system-power-statistics"]


def test_a_hanging_ipmi_dcmi_is_a_time_out_and_a_missing_one_is_said(tmp_path):
    hang = hanging_client(tmp_path, "ipmi-dcmi")
    poller = timed_out_poller(FreeIpmiReader("127.0.0.1", 623, "u", "p", timeout_s=0.3,
                                             command=str(hang)), hang, 0.3)
    poller.close()
    s = SamplerSettings.from_dict({"node": "freeipmi", "node_sources": {"freeipmi": {
        "host": "127.0.0.1", "command": str(tmp_path / "absent")}}})
    with pytest.raises(SensorUnavailable, match=r"^freeipmi: .*absent not found "
                                                r"\(Debian: freeipmi-tools\)$"):
        build_node(s)
    auto = SamplerSettings.from_dict({"node": "auto", "node_sources": {"freeipmi": {
        "host": "127.0.0.1", "command": str(tmp_path / "absent")}}})
    _, notes = build_node(auto)
    assert notes and not any("freeipmi" in n for n in notes)  # auto does not try it


def _udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dcmi_bmc(tmp_path, children):
    """The DCMI-answering BMC on loopback: (port, T0), user `ipmiusr`, password `sim pass 9`."""
    port, t0 = _udp_port(), now_ns() + int(0.5e9)
    ready = tmp_path / "bmc-ready"
    children.spawn([sys.executable, str(HERE / "dcmi_bmc.py"), str(port), "ipmiusr",
                    "sim pass 9", str(t0), str(ready)], env={**os.environ},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(ready.exists, "the DCMI BMC")
    return port, t0


@needs_ipmi_dcmi
@pytest.mark.slow
def test_ipmi_dcmi_against_a_dcmi_bmc_known_power_per_segment(tmp_path, dcmi_bmc, monkeypatch):
    port, t0 = dcmi_bmc
    monkeypatch.setenv("T_FREEIPMI_USER", "ipmiusr")
    monkeypatch.setenv("T_FREEIPMI_PASS", "sim pass 9")
    s = SamplerSettings.from_dict({"node": "freeipmi", "node_sources": {"freeipmi": {
        "host": "127.0.0.1", "port": port, "period_ms": 200, "timeout_ms": 10000,
        "username_env": "T_FREEIPMI_USER", "password_env": "T_FREEIPMI_PASS"}}})
    (poller,), notes = build_node(s)
    assert notes == ["node power is MEASURED by freeipmi (source=freeipmi), read every 0.2 s "
                     "in its own thread"]
    tr, _ = run_sampler(tmp_path, [poller], t0 + int(3.3e9))
    node = tr[tr["device"] == "node"]
    assert set(node["source"]) == {"freeipmi"} and set(node["metric"]) == {"power_w"}
    assert set(node["value"]) <= {emu.LOW_W, emu.HIGH_W}
    t = np.sort(node["t_ns"].to_numpy())
    lag = float(np.diff(t).max()) / 1e9 + 0.05  # a reading is at most one spacing old
    assert check_segments(node, t0, lag) >= 2
    info = poller.info()
    assert info["endpoint"] == f"LAN_2_0 127.0.0.1:{port}"
    assert "sim pass 9" not in repr(info) and "ipmiusr" not in repr(info)
    poller.close()


@needs_ipmi_dcmi
def test_ipmi_dcmi_against_a_bmc_whose_measurement_is_off_gives_no_reading(tmp_path, children):
    port, ready = _udp_port(), tmp_path / "ready"
    children.spawn([sys.executable, str(HERE / "dcmi_bmc.py"), str(port), "u", "p",
                    str(now_ns()), str(ready), "--inactive"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(ready.exists, "the DCMI BMC")
    reader = FreeIpmiReader("127.0.0.1", port, "u", "p", timeout_s=10)
    try:
        assert reader.read() is None
    finally:
        reader.close()


@needs_ipmi_dcmi
@pytest.mark.skipif(shutil.which("ipmi_sim") is None, reason="ipmi_sim (Debian openipmi) is not "
                                                            "installed")
def test_ipmi_dcmi_against_ipmi_sim_says_it_has_no_dcmi(tmp_path, children):
    port = _udp_port()
    emu.start_ipmi_sim(tmp_path, children, port)
    wait_for(lambda: f"0100007F:{port:04X} " in Path("/proc/net/udp").read_text(),
             "ipmi_sim's LAN port")
    (tmp_path / "creds").write_text("ipmiusr:sim-pass-9\n")
    s = SamplerSettings.from_dict({"node": "freeipmi", "node_sources": {"freeipmi": {
        "host": "127.0.0.1", "port": port, "driver": "LAN", "timeout_ms": 20000,
        "credentials_file": str(tmp_path / "creds")}}})
    with pytest.raises(SensorUnavailable, match=r"^freeipmi: SensorError: ipmi-dcmi exited with "
                                                r"1: .*invalid or unsupported") as err:
        build_node(s)
    assert "sim-pass-9" not in str(err.value)
