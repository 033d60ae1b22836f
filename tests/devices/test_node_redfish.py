"""The Redfish node backend against sushy-tools' `sushy-static` serving a mockup whose power a
real process rewrites (tests/node_emulators.py): known energies, basic auth whose credentials never
reach meta.json or the logs, a BMC that stops answering (SIGSTOP) is a flagged gap, and a BMC that
takes 5 s per request never delays the other backends' rows."""

import base64
import json
import logging
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml

import node_emulators as emu
from node_checks import build_node, check_segments, maxgap, run_sampler, wait_for
from wattlife.config import SamplerSettings
from wattlife.contracts import read_trace
from wattlife.contracts.clock import now_ns
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.cpu_estimate import CpuEstimateBackend
from wattlife.devices.node import NodePoller
from wattlife.devices.node_redfish import Credentials, RedfishReader, load_credentials
from wattlife.errors import InputError

EMU = str(Path(emu.__file__))
SUSHY = shutil.which("sushy-static") or str(Path(sys.executable).parent / "sushy-static")
pytestmark = pytest.mark.skipif(not Path(SUSHY).exists(),
                                reason="sushy-static (PyPI sushy-tools, the dev extra) is not "
                                       "installed")
USER, PASSWORD = "bmc-user-q7", "pw-Zx81-never-logged"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture
def bmc(tmp_path, children):
    """sushy-static on loopback serving the mockup the emulator rewrites: (url, t0, mockup,
    server process, its log)."""
    mock = tmp_path / "mockup"
    t0 = now_ns() + int(1e9)
    children.spawn([sys.executable, EMU, "redfish", str(mock), str(t0)])
    wait_for(lambda: (mock / "maxgap_s").exists(), "the Redfish mockup writer")
    port = free_port()
    log = tmp_path / "sushy.log"
    with log.open("w") as out:
        server = children.spawn([SUSHY, "-i", "127.0.0.1", "-p", str(port), "-m", str(mock)],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: get_ok(url + "/redfish/v1/Chassis/1/Power"), "sushy-static")
    return url, t0, mock, server, log


@pytest.mark.slow
def test_redfish_known_energy_per_segment(tmp_path, bmc):
    url, t0, mock, _, _ = bmc
    power_only = RedfishReader(url, "1", Credentials(None, None), period_s=0.2, timeout_s=2)
    assert power_only.read().power_w in (emu.LOW_W, emu.HIGH_W)
    assert power_only.resource == "/redfish/v1/Chassis/1/Power"  # no EnvironmentMetrics there
    first = RedfishReader(url, None, Credentials(None, None), period_s=0.2, timeout_s=2)
    first.read()
    assert first.chassis == "1"  # the first chassis the service lists
    reader = RedfishReader(url, "2", Credentials(None, None), period_s=0.2, timeout_s=2)
    poller = NodePoller(reader, interval_s=0.05)
    tr, _ = run_sampler(tmp_path, [poller], t0 + int(3.3e9))
    node = tr[tr["device"] == "node"]
    assert set(node["source"]) == {"redfish"} and set(node["metric"]) == {"power_w", "energy_j"}
    assert reader.resource == "/redfish/v1/Chassis/2/EnvironmentMetrics"
    spacing = np.diff(np.sort(node.loc[node["metric"] == "power_w", "t_ns"].to_numpy())) / 1e9
    lag = maxgap(mock) + float(spacing.max()) + 0.05
    assert check_segments(node, t0, lag) >= 2
    info = poller.info()
    assert info["endpoint"] == url and info["auth"] == "none" and info["reading_period_s"] > 0


@pytest.mark.slow
def test_credentials_reach_the_bmc_but_never_meta_json_or_the_logs(tmp_path, bmc, env_path,
                                                                    children):
    url, _, _, _, log = bmc
    cfg = tmp_path / "sampler.yaml"
    cfg.write_text(yaml.safe_dump({"sampler": {
        "gpu": "sim", "cpu": "estimate", "node": "redfish",
        "node_sources": {"redfish": {"endpoint": url, "chassis": "2", "period_ms": 200,
                                     "username_env": "T_BMC_USER",
                                     "password_env": "T_BMC_PASS"}}}}))
    env = dict(env_path, T_BMC_USER=USER, T_BMC_PASS=PASSWORD)
    out = children.run([sys.executable, "-m", "wattlife.cli", "run", "-o", str(tmp_path / "run"),
                        "--config", str(cfg), "--idle-s", "0.2", "--", sys.executable, "-c",
                        "import time; time.sleep(1.5)"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    run = tmp_path / "run"
    meta = json.loads((run / "meta.json").read_text())
    node = [b for b in meta["sampler"]["backends"] if b.get("source") == "redfish"]
    assert node and node[0]["auth"] == "basic" and node[0]["readings"] >= 2
    assert meta["sampler"]["settings"]["node"] == "redfish"
    assert any("MEASURED by redfish" in n for n in meta["sensor_notes"])
    tr = read_trace(run / "trace.csv")
    assert set(tr.loc[tr["device"] == "node", "source"]) == {"redfish"}
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert f"Authorization: Basic {token}" in log.read_text()  # the BMC got them
    for text in (out.stdout, out.stderr, *(p.read_text() for p in run.iterdir() if p.is_file())):
        for secret in (USER, PASSWORD, token):
            assert secret not in text


def test_credentials_from_a_file_or_named_variables_and_errors_name_the_key(tmp_path,
                                                                           monkeypatch):
    f = tmp_path / "bmc.cred"
    f.write_text(f"{USER}:{PASSWORD}\n")
    c = load_credentials(str(f), None, None, "sampler.node_sources.redfish")
    assert (c.user, c.password) == (USER, PASSWORD)
    assert PASSWORD not in repr(c) and USER not in repr(c)
    f.write_text("no separator\n")
    with pytest.raises(InputError, match=r"redfish\.credentials_file .*USER:PASSWORD"):
        load_credentials(str(f), None, None, "sampler.node_sources.redfish")
    with pytest.raises(InputError, match=r"redfish\.credentials_file .*cannot read it"):
        load_credentials(str(tmp_path / "absent"), None, None, "sampler.node_sources.redfish")
    monkeypatch.delenv("T_UNSET_PASS", raising=False)
    with pytest.raises(InputError, match=r"ipmi\.password_env: the environment variable "
                                         r"T_UNSET_PASS is not set"):
        load_credentials(None, None, "T_UNSET_PASS", "sampler.node_sources.ipmi")
    assert load_credentials(None, None, None, "k") == Credentials(None, None)


@pytest.mark.slow
def test_a_bmc_that_stops_answering_is_a_flagged_gap(tmp_path, bmc, caplog):
    url, t0, _, server, _ = bmc
    cpu = CpuEstimateBackend(interval_s=0.05)
    poller = NodePoller(RedfishReader(url, "1", Credentials(None, None), period_s=0.2,
                                      timeout_s=0.3), interval_s=0.05)
    trace = tmp_path / "trace.csv"
    from wattlife.sampler import Sampler

    s = Sampler([cpu, poller], trace, host="h")
    caplog.set_level(logging.WARNING, logger="wattlife.devices.node")
    s.start()
    try:
        wait_for(lambda: poller.readings >= 3, "first Redfish readings")
        server.send_signal(signal.SIGSTOP)  # the BMC hangs: connections queue, nothing answers
        stop_ns = now_ns()
        wait_for(lambda: now_ns() - stop_ns > 2.5e9, "the hang")
        cont_ns = now_ns()
        server.send_signal(signal.SIGCONT)
        wait_for(lambda: poller.last_ok_ns > cont_ns, "Redfish readings after the hang")
    finally:
        server.send_signal(signal.SIGCONT)
        s.stop()
    tr = read_trace(trace)
    node_t = tr.loc[tr["device"] == "node", "t_ns"].to_numpy()
    # no node row from one time-out after the hang to its end
    assert not ((node_t > stop_ns + 0.5e9) & (node_t < cont_ns)).any()
    gaps = poller.info()["gaps"]
    assert any(a <= stop_ns + 0.5e9 and b >= cont_ns for a, b in gaps), gaps
    assert poller.info()["errors"] and poller.failures >= 2
    assert any("sensor gap" in r.getMessage() for r in caplog.records)
    assert "1 sensor gap(s)" in poller.end_notes()[0]
    cpu_t = np.sort(tr.loc[(tr["device"] == "cpu0") & (tr["metric"] == "power_w"),
                           "t_ns"].to_numpy())
    during = cpu_t[(cpu_t > stop_ns) & (cpu_t < cont_ns)]
    assert len(during) >= 10  # the CPU kept being read while the BMC hung


class SlowBmc:
    """A Redfish service on loopback (http.server, one thread per request) serving the mockup;
    once `slow` is set every request first sleeps `delay_s`."""

    def __init__(self, mock: Path, delay_s: float = 5.0) -> None:
        self.slow = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if outer.slow.is_set():
                    time.sleep(delay_s)
                rel = self.path.rstrip("/").removeprefix("/redfish/v1").lstrip("/")
                f = mock / rel / "index.json"
                if not f.exists():
                    self.send_error(404)
                    return
                body = f.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_a_bmc_taking_5_s_per_request_never_delays_the_other_rows(tmp_path, children):
    mock = tmp_path / "mockup"
    children.spawn([sys.executable, EMU, "redfish", str(mock), str(now_ns())])
    wait_for(lambda: (mock / "maxgap_s").exists(), "the Redfish mockup writer")
    with SlowBmc(mock) as bmc:
        settings = SamplerSettings.from_dict({"node": "redfish", "node_sources": {"redfish": {
            "endpoint": bmc.url, "chassis": "1", "period_ms": 200, "timeout_ms": 8000}}})
        (poller,), _ = build_node(settings)
        cpu = CpuEstimateBackend(interval_s=0.05)
        from wattlife.sampler import Sampler

        s = Sampler([cpu, poller], tmp_path / "trace.csv", host="h")
        s.start()
        try:
            wait_for(lambda: poller.readings >= 3, "first Redfish readings")
            bmc.slow.set()
            slow_ns = now_ns()
            wait_for(lambda: now_ns() - slow_ns > 3e9, "3 s of a slow BMC")
            end_ns = now_ns()
        finally:
            s.stop()
    tr = read_trace(tmp_path / "trace.csv")
    cpu_t = np.sort(tr.loc[(tr["device"] == "cpu0") & (tr["metric"] == "power_w"),
                           "t_ns"].to_numpy())
    during = cpu_t[(cpu_t >= slow_ns) & (cpu_t <= end_ns)]
    # a sampler waiting on the BMC would leave a >= 5 s hole in the CPU's rows
    assert len(during) >= 10 and np.diff(during).max() < 2.5e9
    # nor did the last polls wait on it: the CPU's rows reach the end of the sampler's span
    assert s.end_ns - cpu_t[-1] < 2.5e9
    node_t = tr.loc[tr["device"] == "node", "t_ns"].to_numpy()
    assert not ((node_t > slow_ns + 0.3e9) & (node_t < end_ns)).any()
    assert any(b - a > 2.5e9 for a, b in poller.info()["gaps"])  # flagged as a gap


def test_explicit_redfish_that_does_not_answer_says_so_at_start():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    st = SamplerSettings.from_dict({"node": "redfish", "node_sources": {"redfish": {
        "endpoint": f"http://127.0.0.1:{port}", "timeout_ms": 500}}})
    with pytest.raises(SensorUnavailable, match=r"^redfish: URLError: .*refused"):
        build_node(st)
    auto = SamplerSettings.from_dict({"node": "auto", "node_sources": {
        "pm_counters": {"root": "/nonexistent"},
        "redfish": {"endpoint": f"http://127.0.0.1:{port}", "timeout_ms": 500}}})
    backends, notes = build_node(auto)
    # one note per source auto tried, in the registry's order (ipmi: no host configured)
    said = "no node power source (sampler.node: auto): "
    assert backends == [] and all(n.startswith(said) for n in notes)
    assert [n[len(said):].split(":")[0] for n in notes] == ["pm_counters", "redfish", "ipmi"]
    assert notes[0].startswith(said + "pm_counters: no power")
    assert notes[1].startswith(said + "redfish: URLError")
    assert notes[2] == said + "ipmi: sampler.node_sources.ipmi.host is not set"


def test_redfish_resources_parsed():
    parse = RedfishReader.parse
    assert parse({"PowerControl": [{"PowerConsumedWatts": 512.5}]}).power_w == 512.5
    assert parse({"PowerControl": [{"PowerConsumedWatts": None}]}) is None  # no reading now
    kwh = parse({"PowerWatts": {"Reading": 300}, "EnergykWh": {"Reading": 2.5}})
    assert (kwh.power_w, kwh.energy_j) == (300.0, 2.5 * 3.6e6)
    assert parse({"EnergyJoules": {"Reading": 7}}).energy_j == 7.0
    assert parse({"Temperature": {}}) is None
    reader = RedfishReader("https://u:p@bmc.example:8443/", "1", Credentials("u", "p"))
    assert reader.base == "https://bmc.example:8443"  # what meta.json shows: no user:password@
    assert "p@" not in json.dumps(reader.describe())
