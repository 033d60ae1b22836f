"""The IPMI DCMI and Slurm sstat node backends.

IPMI: OpenIPMI's `ipmi_sim` (Debian openipmi) answers IPMI over lanplus on loopback, but not DCMI:
`ipmitool dcmi power reading` gets completion code 0xC1 (Invalid command) from it. So the IPMI
backend is tested against ipmi_sim for the link and its clear refusal, and on recorded ipmitool
output for the reading; Slurm's sstat is the second source with known answers: recorded-format
answers of a process that plays an acct_gather_energy plugin (tests/node_emulators.py).
"""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import node_emulators as emu
from node_checks import build_node, hanging_client, run_sampler, timed_out_poller, wait_for
from wattlife.config import SamplerSettings
from wattlife.contracts.clock import now_ns
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.node_sources import (
    IpmiReader,
    SstatReader,
    parse_dcmi_power,
    parse_sstat_energy,
)
from wattlife.errors import SensorError

EMU = str(Path(emu.__file__))

# `ipmitool dcmi power reading` on a BMC with DCMI (its output format, ipmitool 1.8.19)
DCMI_OUTPUT = """
    Instantaneous power reading:                   412 Watts
    Minimum during sampling period:                 98 Watts
    Maximum during sampling period:                530 Watts
    Average power reading over sample period:      377 Watts
    IPMI timestamp:                           Sat Dec  5 18:50:00 2026
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated
"""
# `sstat -P -n --format=JobID,ConsumedEnergyRaw -j 4242.0` and of a batch step
SSTAT_OUTPUT = "4242.0|183950|\n"
SSTAT_TWO = "4242.batch|20|\n4242.0|0|\n"


def test_dcmi_reading_parsed_and_bad_output_named():
    assert parse_dcmi_power(DCMI_OUTPUT) == 412.0
    with pytest.raises(SensorError, match="no 'Instantaneous power reading: <W> Watts' line"):
        parse_dcmi_power("Power reading state is: deactivated\n")


@given(st.floats(min_value=0, max_value=1e5, allow_nan=False).map(lambda w: round(w, 1)))
def test_dcmi_reading_round_trips(watts):
    assert parse_dcmi_power(f"    Instantaneous power reading:   {watts} Watts\n") == watts


def test_sstat_recorded_output():
    assert parse_sstat_energy(SSTAT_OUTPUT, "4242.0") == 183950.0
    assert parse_sstat_energy(SSTAT_TWO, "4242.batch") == 20.0
    assert parse_sstat_energy(SSTAT_TWO, "4242.0") is None  # no plugin reading yet
    assert parse_sstat_energy("", "4242.0") is None
    with pytest.raises(SensorError, match=r"sstat: '4242\.0' is not 'JobID\|ConsumedEnergyRaw'"):
        parse_sstat_energy("4242.0\n", "4242.0")
    with pytest.raises(SensorError, match=r"ConsumedEnergyRaw '1\.2K' of 4242\.0 is not a number"):
        parse_sstat_energy("4242.0|1.2K|\n", "4242.0")


@given(st.integers(min_value=1, max_value=10**15), st.sampled_from(["0", "batch", "12"]))
def test_sstat_energy_round_trips(joules, step):
    text = f"77.extern|5|\n77.{step}|{joules}|\n"
    assert parse_sstat_energy(text, f"77.{step}") == float(joules)


def test_sstat_outside_a_job_says_so(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(SensorUnavailable, match="not inside a Slurm job"):
        SstatReader(None)
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    monkeypatch.setenv("SLURM_STEP_ID", "2")
    assert SstatReader(None).step == "31.2"


@pytest.mark.slow
def test_sstat_known_energy_per_interval(tmp_path):
    t0 = now_ns() + int(0.5e9)
    plugin_s = 0.5
    sstat = tmp_path / "sstat"
    sstat.write_text(f"#!/bin/sh\nexec {sys.executable} {EMU} sstat {t0} {plugin_s} \"$@\"\n")
    sstat.chmod(0o755)
    st_ = SamplerSettings.from_dict({"node": "slurm", "node_sources": {"slurm": {
        "step": "4242.0", "command": str(sstat), "period_ms": 250, "timeout_ms": 20000}}})
    (poller,), notes = build_node(st_)
    assert notes == ["node power is MEASURED by sstat (source=sstat), read every 0.25 s in its "
                     "own thread"]
    tr, _ = run_sampler(tmp_path, [poller], t0 + int(4.2e9))
    node = tr[tr["device"] == "node"].sort_values("t_ns")
    assert set(node["metric"]) == {"energy_j"} and set(node["source"]) == {"sstat"}
    t, e = node["t_ns"].to_numpy(), node["value"].to_numpy()
    assert np.all(np.diff(e) >= 0)
    # a reading shows the plugin's value of up to one plugin period (plus the command's own
    # run time, bounded by the spacing of readings) before it: at each end of an interval
    lag = plugin_s + float(np.diff(t).max()) / 1e9 + 0.05
    a, b = t0 + 1e9, t0 + 3e9
    assert t[0] < a and t[-1] > b
    got = emu.counter_between(t, e, a, b)
    assert abs(got - emu.energy_between(a, b, t0)) <= 2 * emu.HIGH_W * lag
    info = poller.info()
    assert info["step"] == "4242.0" and "whole job step" in info["scope"]


def _listening_udp(port: int) -> bool:
    """A socket bound to 127.0.0.1:`port` (UDP) in /proc/net/udp."""
    return f"0100007F:{port:04X} " in Path("/proc/net/udp").read_text()


@pytest.mark.skipif(not (shutil.which("ipmi_sim") and shutil.which("ipmitool")),
                    reason="ipmi_sim and ipmitool (Debian openipmi, ipmitool; .ci/run installs "
                           "them) are not installed")
def test_ipmi_against_ipmi_sim_links_and_says_it_has_no_dcmi(tmp_path, children, monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emu.start_ipmi_sim(tmp_path, children, port)
    wait_for(lambda: _listening_udp(port), "ipmi_sim's LAN port")
    monkeypatch.setenv("T_IPMI_USER", "ipmiusr")
    monkeypatch.setenv("T_IPMI_PASS", "sim-pass-9")
    reader = IpmiReader("127.0.0.1", port, "ipmiusr", "sim-pass-9", timeout_s=20)
    assert "sim-pass-9" not in " ".join(reader.argv)  # the password goes by -E, not argv
    link = subprocess.run([*reader.argv[:-3], "mc", "info"], env=reader.env, capture_output=True,
                          text=True, timeout=60)
    assert link.returncode == 0 and "IPMI Version              : 2.0" in link.stdout
    st_ = SamplerSettings.from_dict({"node": "ipmi", "node_sources": {"ipmi": {
        "host": "127.0.0.1", "port": port, "timeout_ms": 20000,
        "username_env": "T_IPMI_USER", "password_env": "T_IPMI_PASS"}}})
    with pytest.raises(SensorUnavailable, match=r"^ipmi: SensorError: ipmitool exited with 1: "
                                                r".*Invalid command") as err:
        build_node(st_)
    assert "sim-pass-9" not in str(err.value)


def test_ipmi_in_band_and_time_out(tmp_path):
    assert IpmiReader(None, 623, None, None).argv == ["ipmitool", "-I", "open", "dcmi", "power",
                                                      "reading"]
    hang = hanging_client(tmp_path, "ipmitool")
    poller = timed_out_poller(IpmiReader("127.0.0.1", 623, "u", "p", timeout_s=0.3,
                                         command=str(hang)), hang, 0.3)
    assert os.environ.get("IPMI_PASSWORD") is None  # only the child's environment holds it
    poller.final_poll(now_ns())
    (note,) = poller.end_notes()
    assert note.startswith("node power (ipmi): no reading during the whole run (TimeoutError: ")
    assert note.endswith("the trace has no node rows")
