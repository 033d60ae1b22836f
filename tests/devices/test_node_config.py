"""`sampler.node` and `sampler.node_sources`: defaults (no node source unless asked), `auto`'s
order and its note, explicit sources that cannot be read, and no key that holds a credential."""

import pytest
import yaml

from node_checks import build_node
from wattlife.config import ConfigError, SamplerSettings, load_section, settings
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.node import NodePoller
from wattlife.errors import InputError
from wattlife.sampler import build_backends


def _section(tmp_path, sampler: dict) -> dict:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"sampler": sampler}))
    return load_section(p, "sampler")


def test_default_is_no_node_source(tmp_path):
    s = SamplerSettings.from_dict(_section(tmp_path, {"gpu": "none", "cpu": "estimate"}))
    assert s.node is None  # no schema default: a config without it keeps its job slices
    assert "node" not in s.as_dict()
    assert s.node_sources.pm_counters.root == "/sys/cray/pm_counters"
    assert s.node_sources.redfish.timeout_ms == 2000 and s.node_sources.ipmi.port == 623
    backends, notes = build_backends(s, log=lambda *a: None)
    assert not any(isinstance(b, NodePoller) for b in backends)
    assert not any("node" in n for n in notes)


@pytest.mark.parametrize("key", ["password", "username", "user"])
def test_no_credential_in_the_config(tmp_path, key):
    with pytest.raises(ConfigError, match=rf"unknown key sampler\.node_sources\.redfish\.{key}"):
        _section(tmp_path, {"node": "redfish", "node_sources": {
            "redfish": {"endpoint": "https://bmc", key: "x"}}})


def test_unknown_node_source_named(tmp_path):
    with pytest.raises(ConfigError, match=r"sampler\.node: expected one of \['auto', "
                                          r"'pm_counters', 'redfish', 'ipmi', 'freeipmi', 'slurm', "
                                          r"'none'\]"):
        _section(tmp_path, {"node": "bmc"})


def test_auto_takes_pm_counters_first_and_explicit_missing_raises(tmp_path):
    root = tmp_path / "pm"
    root.mkdir()
    for name, text in (("power", "300 W 1 us"), ("energy", "5 J 1 us"), ("freshness", "1")):
        (root / name).write_text(text + "\n")
    s = SamplerSettings.from_dict({"node": "auto", "node_sources": {
        "pm_counters": {"root": str(root)}, "redfish": {"endpoint": "http://127.0.0.1:9"}}})
    (b,), notes = build_node(s)
    assert b.source == "pm_counters" and b.reader.period_s == 0.1
    assert notes == ["node power is MEASURED by pm_counters (source=pm_counters), read every "
                     "0.1 s in its own thread"]
    gone = SamplerSettings.from_dict({"node": "pm_counters", "node_sources": {
        "pm_counters": {"root": str(tmp_path / "none")}}})
    with pytest.raises(SensorUnavailable, match="pm_counters: no power, energy, freshness under"):
        build_node(gone)


def test_auto_with_nothing_says_so(tmp_path):
    s = SamplerSettings.from_dict({"node": "auto", "node_sources": {
        "pm_counters": {"root": str(tmp_path / "none")}}})
    said = "no node power source (sampler.node: auto): "
    assert build_node(s) == (
        [], [f"{said}pm_counters: no power, energy, freshness under {tmp_path / 'none'} (not an "
             "HPE/Cray node)", f"{said}redfish: sampler.node_sources.redfish.endpoint is not set",
             f"{said}ipmi: sampler.node_sources.ipmi.host is not set"])


def test_configs_without_node_keys_keep_their_job_slices():
    """No schema default for `sampler.node` / `node_sources`: a config that does not name them
    fills neither, so every job slice (Snakemake params) stays as it was and reruns nothing."""
    from conftest import REPO
    from wattlife.config import load_config
    from wattlife.jobs import canonical, cell_slice

    cfg = load_config(REPO / "config" / "config.yaml")
    assert "node" not in cfg["sampler"] and "node_sources" not in cfg["sampler"]
    s = settings(cfg)
    cell = s.cells()[0]
    sliced = canonical(cell_slice(cfg, cell.workload, cell.storage, cell.checkpoint, cell.repeat))
    assert '"node":' not in sliced and '"node_sources"' not in sliced


def test_per_host_bmc_names():
    import socket

    from wattlife.devices.node_select import per_host

    short = socket.gethostname().split(".")[0]
    assert per_host("https://{host}-bmc:8443") == f"https://{short}-bmc:8443"
    assert per_host("10.0.0.7") == "10.0.0.7"


def test_credentials_in_the_endpoint_are_refused_without_echoing_them():
    s = SamplerSettings.from_dict({"node": "redfish", "node_sources": {"redfish": {
        "endpoint": "https://root:calvin-77@bmc.example"}}})
    with pytest.raises(InputError, match=r"^sampler\.node_sources\.redfish\.endpoint holds a "
                                         r"user or password") as err:
        build_node(s)
    assert "calvin-77" not in str(err.value) and "root" not in str(err.value)


def test_the_sampler_builds_the_node_role_through_the_registry(tmp_path):
    """`sampler.build_backends` builds `sampler.node` as the registry's `node` role: its
    backends declare the `node` kind and their sources; the sstat source is `sstat`."""
    from wattlife.devices.registry import backend_specs

    assert {b.id: (b.kinds, b.sources, b.auto) for b in backend_specs("node")} == {
        "pm_counters": (("node",), ("pm_counters", "pm_counters_emulated"), True),
        "redfish": (("node",), ("redfish",), True), "ipmi": (("node",), ("ipmi",), True),
        "freeipmi": (("node",), ("freeipmi",), False), "slurm": (("node",), ("sstat",), False)}
    root = tmp_path / "pm"
    root.mkdir()
    for name, text in (("power", "300 W 1 us"), ("energy", "5 J 1 us"), ("freshness", "1")):
        (root / name).write_text(text + "\n")
    s = SamplerSettings.from_dict({"gpu": "none", "cpu": "estimate", "node": "pm_counters",
                                   "node_sources": {"pm_counters": {"root": str(root)}}})
    backends, notes = build_backends(s, log=lambda *a: None)
    (node,) = [b for b in backends if isinstance(b, NodePoller)]
    assert node.source == "pm_counters" and notes[-1].startswith("node power is MEASURED by "
                                                                 "pm_counters")


def test_explicit_ipmi_without_a_host_reads_in_band_auto_does_not(tmp_path):
    ipmi = {"command": str(tmp_path / "no-ipmitool")}
    explicit = SamplerSettings.from_dict({"node": "ipmi", "node_sources": {"ipmi": ipmi}})
    with pytest.raises(SensorUnavailable, match=r"^ipmi: FileNotFoundError"):
        build_node(explicit)  # it ran the (absent) in-band ipmitool
    auto = SamplerSettings.from_dict({"node": "auto", "node_sources": {
        "pm_counters": {"root": str(tmp_path / "none")}, "ipmi": ipmi}})
    assert build_node(auto)[1][-1].endswith("ipmi: sampler.node_sources.ipmi.host is not set")
