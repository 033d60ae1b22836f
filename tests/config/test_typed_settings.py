"""Typed settings all the way down (issue #31): the CLI builds one `SamplerSettings` at the edge
and passes the object down; no module below it receives a raw configuration mapping or converts
one (the scan at the end covers every module but the edges)."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from wattlife.config import SamplerSettings, load_config

PKG = Path(__file__).resolve().parents[2] / "src" / "wattlife"
REPO = PKG.parents[1]


def _entry_points() -> list[tuple[str, typing.Callable[..., typing.Any], str]]:
    from wattlife.run import run_under_sampler
    from wattlife.run.node import run_node
    from wattlife.sampler import build_backends, with_sim_gpu_cap
    from wattlife.sweeps.real import sweep_command

    return [("run_under_sampler", run_under_sampler, "settings"),
            ("build_backends", build_backends, "s"),
            ("with_sim_gpu_cap", with_sim_gpu_cap, "settings"),
            ("run_node", run_node, "settings"),
            ("sweep_command", sweep_command, "sampler_settings")]


@pytest.mark.parametrize("name,fn,param", _entry_points())
def test_the_sampler_settings_travel_typed(name, fn, param):
    """Each function that takes the sampler's settings takes exactly `SamplerSettings` (no
    mapping, no None standing for "the defaults"), and no parameter named like a raw section."""
    hints = typing.get_type_hints(fn)
    assert hints[param] is SamplerSettings, (name, hints[param])
    raw = [p for p in inspect.signature(fn).parameters if p.endswith("_cfg") or p == "cfg"]
    assert raw == [], (name, raw)


@pytest.fixture
def captured(monkeypatch):
    """`wattlife run` / `launch-node` in-process, with what runs under the sampler replaced by a
    recorder of the settings it is given."""
    import wattlife.run
    import wattlife.run.node

    got: dict[str, typing.Any] = {}

    def under_sampler(cmd, trace, events, meta=None, *, settings, run_id=None, cell=None):
        got["settings"] = settings
        return 0

    def node(cmd, *, settings, **kw):
        got["settings"] = settings
        return 0

    monkeypatch.setattr(wattlife.run, "run_under_sampler", under_sampler)
    monkeypatch.setattr(wattlife.run.node, "run_node", node)
    return got


CONFIG = REPO / "config" / "config.yaml"


@pytest.mark.parametrize("options,config,expected", [
    # without --config: the schema's defaults (a 2 s idle baseline among them)
    ([], False, {}),
    (["--cpu", "estimate", "--gpu", "sim"], False, {"cpu": "estimate", "gpu": "sim"}),
    # with --config: the config's section, each option given on top
    ([], True, {}),
    (["--interval-ms", "20", "--idle-s", "0.5", "--gpu", "none", "--cpu", "estimate"], True,
     {"interval_ms": 20.0, "idle_baseline_s": 0.5, "gpu": "none", "cpu": "estimate"}),
])
def test_run_options_reach_the_sampler_settings_as_before(captured, tmp_path, options, config,
                                                          expected):
    """What `run_under_sampler` built from the dict it was given before is what it is given now:
    the config's `sampler` section (or the CLI's default), the options given on top."""
    from wattlife.cli import main

    args = ["run", "--trace", str(tmp_path / "trace.csv"), "--events",
            str(tmp_path / "events.csv"), *options]
    section = dict(load_config(CONFIG)["sampler"]) if config else {}
    if config:
        args += ["--config", str(CONFIG)]
    assert main([*args, "--", "true"]) == 0
    assert captured["settings"] == SamplerSettings.from_dict({**section, **expected})


def test_launch_node_reads_its_config_into_settings(captured, tmp_path):
    from wattlife.cli import main

    assert main(["launch-node", "--config", str(CONFIG), "--trace", str(tmp_path / "t.csv"),
                 "--events", str(tmp_path / "e.csv"), "--", "true"]) == 0
    assert captured["settings"] == SamplerSettings.from_dict(load_config(CONFIG)["sampler"])
    assert main(["launch-node", "--trace", str(tmp_path / "t.csv"), "--events",
                 str(tmp_path / "e.csv"), "--", "true"]) == 0
    assert captured["settings"] == SamplerSettings.from_dict({})


def test_a_sweeps_cap_reaches_the_simulated_gpu_typed():
    from wattlife.sampler import with_sim_gpu_cap

    s = SamplerSettings.from_dict({"gpu": "sim", "sim_gpu": {"mem_share": 0.1}})
    capped = with_sim_gpu_cap(s, 250.0)
    assert capped.sim_gpu.cap_w == 250.0 and capped.sim_gpu.mem_share == 0.1
    assert capped.as_dict()["sim_gpu"]["cap_w"] == 250.0  # what meta.json records
    assert s.sim_gpu.cap_w is None  # frozen: the caller's settings are unchanged


#: the edges that read a configuration: the CLI, the config package itself, and `jobs` (the
#: Snakefile's helper: it cuts each job's slice from the config mapping, serialised as the config
#: has it, so that a changed slice reruns its job; docs/CONFIGURATION.md)
EDGES = ("cli/", "config/", "jobs.py")
#: calls that load or type a configuration
CONFIG_READERS = {"load_config", "load_section", "settings", "workload_spec", "hardware_profile"}


def _config_reads(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        # `RunMeta.from_dict` reads a meta.json, not a configuration
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        if name in CONFIG_READERS or (name == "from_dict" and owner != "RunMeta"):
            out.append(f"{path.relative_to(PKG).as_posix()}:{node.lineno} {name}")
    return out


def test_no_module_below_the_edges_loads_or_types_a_configuration():
    """Every module but the CLI, `config` and `jobs` receives typed settings: none calls
    `load_config`, `load_section`, `settings`, `workload_spec`, `hardware_profile` or a settings
    `from_dict`."""
    reads = [r for p in sorted(PKG.rglob("*.py"))
             if not p.relative_to(PKG).as_posix().startswith(EDGES) for r in _config_reads(p)]
    assert reads == []


def test_the_config_read_scan_finds_a_read():
    probe = PKG / "cli" / "workloads.py"
    assert any(r.endswith(("load_config", "settings")) for r in _config_reads(probe))
