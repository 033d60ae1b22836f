"""The source and sensor-backend registries (`contracts.sources`, `devices.registry`): a fake
backend writing a fake source, declared through the registries alone, flows to config
validation, the CLI's choices, the sampler, `wattlife check`, the waiting basis and the figures'
words; the schema's enums are the registry's; no module elsewhere lists source or backend ids."""

from __future__ import annotations

import ast
import dataclasses
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from wattlife.analysis.waiting import basis
from wattlife.check import check_run
from wattlife.cli import build_parser
from wattlife.config import ConfigError, SamplerSettings, schema, validate_config
from wattlife.config.loading import REGISTRY_KEYS
from wattlife.contracts import (
    SOURCE_WORDS,
    SOURCES_MEASURED,
    SOURCES_NOT_MEASURED,
    SourceSpec,
    device_kind,
    register_source,
    sensor_source_ids,
    source_specs,
    unregister_source,
)
from wattlife.devices.base import Row, SensorBackend
from wattlife.devices.powercap import CAP_BACKENDS
from wattlife.devices.registry import (
    SensorBackendSpec,
    backend_specs,
    choices,
    register_backend,
    roles,
    schema_enums,
    unregister_backend,
)
from wattlife.figures.common import source_note
from wattlife.sampler import Sampler, build_backends

PKG = Path(__file__).resolve().parents[2] / "src" / "wattlife"
#: the modules that declare sources and backends; every other module derives from them
DECLARING = {PKG / "contracts" / "sources.py", PKG / "devices" / "registry.py",
             PKG / "config" / "loading.py"}


class FakeMeter(SensorBackend):
    """A GPU meter that exists only in this test: 100 W on gpu0, source `fake-meter`."""

    name = "fake-meter"

    def poll(self, now_ns: int) -> list[Row]:
        return [(now_ns, "gpu0", "power_w", 100.0, "fake-meter")]


def _fake_factory(s: object, interval_s: float) -> tuple[list[SensorBackend], list[str]]:
    b = FakeMeter()
    b.interval_s = interval_s
    return [b], ["GPU power from the fake meter"]


@pytest.fixture(params=["measured", "estimated"])
def fake(request: pytest.FixtureRequest) -> Iterator[SourceSpec]:
    """The fake source (of the class the test is parametrised with) and its backend `fakegpu`,
    registered for one test and removed after it."""
    spec = register_source(SourceSpec("fake-meter", request.param, f"{request.param} (fake)"))
    try:
        register_backend(SensorBackendSpec("fakegpu", "gpu", (), ("fake-meter",), ("gpu",),
                                           _fake_factory, about="a test's fake meter"))
    except BaseException:
        unregister_source(spec.id)
        raise
    try:
        yield spec
    finally:
        unregister_backend("fakegpu")
        unregister_source(spec.id)


def _enum_lists(node: object, ids: set[str], where: str = "") -> list[str]:
    """Every `enum` of the schema file holding two or more of `ids` ("dotted.key: ids")."""
    hits: list[str] = []
    if isinstance(node, dict):
        named = sorted(set(node.get("enum") or []) & ids)
        if len(named) >= 2:
            hits.append(f"{where}: {named}")
        for key, sub in node.items():
            nested = where if key in ("properties", "additionalProperties") else f"{where}.{key}"
            hits += _enum_lists(sub, ids, nested.lstrip("."))
    return hits


def test_the_schema_file_lists_no_backend_and_the_loaded_schema_has_the_registry_s() -> None:
    shipped = yaml.safe_load((PKG / "resources" / "schema.yaml").read_text())
    ids = ({s.id for s in source_specs()} | {b.id for b in backend_specs()}
           | set(CAP_BACKENDS) | {"auto", "none"})
    hits = _enum_lists(shipped, ids)
    assert hits == [], ("resources/schema.yaml lists backend ids (the registries fill these "
                        "enums: config.loading.REGISTRY_KEYS): " + "; ".join(hits))
    props = schema()["properties"]["sampler"]["properties"]
    assert {k: props[k]["enum"] for k in schema_enums()} == schema_enums()
    assert set(REGISTRY_KEYS) == {("sampler", k) for k in schema_enums()} | {
        ("powercap", "backend")}
    assert choices("gpu") == ["auto", "nvml", "sim", "none"]
    assert choices("cpu") == ["auto", "rapl", "estimate", "none"]
    assert choices("node") == ["auto", "pm_counters", "redfish", "ipmi", "freeipmi", "slurm",
                               "none"]


def test_the_enum_finder_finds_a_hand_kept_list() -> None:
    doc = {"properties": {"sampler": {"properties": {
        "gpu": {"type": "string", "enum": ["auto", "nvml", "sim", "none"]},
        "unit": {"enum": ["W", "J"]}}}}}
    assert _enum_lists(doc, {"auto", "nvml", "sim", "none"}) == [
        "sampler.gpu: ['auto', 'none', 'nvml', 'sim']"]


def test_an_unknown_backend_id_is_one_line_naming_the_key_and_the_known_ids() -> None:
    with pytest.raises(ConfigError) as err:
        validate_config({"slice": "t", "sampler": {"gpu": "no-such-gpu"}})
    assert str(err.value) == ("invalid config: sampler.gpu: expected one of "
                              "['auto', 'nvml', 'sim', 'none'], got 'no-such-gpu'")
    with pytest.raises(ConfigError) as err:
        validate_config({"slice": "t", "powercap": {"backend": "rocm"}})
    assert str(err.value) == ("invalid config: powercap.backend: expected one of "
                              "['simulated', 'nvml', 'nvidia-smi'], got 'rocm'")


def test_every_backend_writes_declared_sources_and_reads_existing_sampler_keys() -> None:
    # a backend reads typed keys, or its own block (`SamplerSettings.block`: no class needed)
    keys = {f.name for f in dataclasses.fields(SamplerSettings)}
    for b in backend_specs():
        assert set(b.settings) <= keys | {b.id}, b.id
        assert set(b.sources) <= set(sensor_source_ids()), b.id
    assert [r.role for r in roles()][:2] == ["gpu", "cpu"]
    assert {r.role for r in roles()} | {r.fallback_key for r in roles() if r.fallback_key} <= keys


def _zone(root: Path, name: str, label: str, energy: int) -> None:
    """A powercap zone as the kernel shows it (RAPL)."""
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{energy}\n")
    (z / "max_energy_range_uj").write_text("1000000\n")


@pytest.mark.parametrize(("gpu", "cpu"), [("nvml", "rapl"), ("sim", "estimate")])
def test_each_built_in_backend_writes_only_the_sources_and_kinds_it_declares(
        gpu: str, cpu: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built through the registry (NVML over the FAKE pynvml of tests/fake_nvml.py, RAPL over a
    powercap tree in tmp_path): the rows' sources and device kinds are the spec's."""
    from fake_nvml import FakeNvml

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(n=2))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _zone(tmp_path, "intel-rapl:0", "package-0", 900)
    _zone(tmp_path, "intel-rapl:0:0", "dram", 10)
    settings = SamplerSettings.from_dict({"gpu": gpu, "cpu": cpu, "rapl_root": str(tmp_path)})
    backends, _ = build_backends(settings, log=lambda m: None)
    specs = {b.id: b for b in backend_specs()}
    assert len(backends) == 2
    for backend, chosen in zip(backends, (gpu, cpu), strict=True):
        rows = [r for t in (1, 2, 3) for r in backend.poll(time.time_ns() + t)]
        backend.close()
        assert rows, chosen
        assert {r[4] for r in rows} <= set(specs[chosen].sources), chosen
        assert {device_kind(r[1]) for r in rows} <= set(specs[chosen].kinds), chosen


def test_registering_a_backend_with_an_undeclared_source_is_refused() -> None:
    with pytest.raises(ValueError, match="not declared in the source registry"):
        register_backend(SensorBackendSpec("ghost", "gpu", (), ("ghost-src",), ("gpu",),
                                           _fake_factory))
    with pytest.raises(ValueError, match="already registered"):
        register_source(SourceSpec("rapl", "measured", "x"))


def test_a_fake_backend_flows_through_config_cli_sampler_check_and_labels(
        fake: SourceSpec, tmp_path: Path) -> None:
    # config: the schema's enum is the registry's, nothing else to write
    section = {"gpu": "fakegpu", "cpu": "none"}
    validate_config({"slice": "t", "sampler": section})
    settings = SamplerSettings.from_dict(section)
    # CLI: `wattlife run --gpu fakegpu` parses
    args = build_parser().parse_args(["run", "--gpu", "fakegpu", "--", "true"])
    assert args.gpu == "fakegpu"
    # sampler: built from the registry, its trace written
    backends, notes = build_backends(settings, log=lambda m: None)
    assert [type(b) for b in backends] == [FakeMeter]
    assert notes == ["GPU power from the fake meter"]
    run = tmp_path / "run"
    run.mkdir()
    sampler = Sampler(backends, run / "trace.csv", host="h")
    sampler.start()
    sampler.stop()
    trace = pd.read_csv(run / "trace.csv")
    assert set(trace["source"]) == {"fake-meter"}
    # check: a known source; unknown once the registry forgets it
    codes = {f.code for f in check_run(run) if f.code.startswith("trace.source")}
    assert codes == set()
    # labels: the class the source declares
    assert basis("fake-meter") == fake.cls
    assert basis("fake-meter,nvml-samples") == fake.cls
    assert ("fake-meter" in SOURCES_MEASURED) == (fake.cls == "measured")
    assert ("fake-meter" in SOURCES_NOT_MEASURED) == (fake.cls != "measured")
    assert SOURCE_WORDS["fake-meter"] == fake.words
    note = source_note(pd.DataFrame({"device_kind": ["gpu"], "source": ["fake-meter"]}))
    assert note == f"GPU: {fake.words} (fake-meter)"


def test_without_the_registration_the_fake_is_unknown_everywhere(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trace.csv").write_text("t_ns,host,device,metric,value,source\n"
                                   "1700000000000000000,h,gpu0,power_w,100.0,fake-meter\n")
    codes = {f.code for f in check_run(run)}
    assert "trace.source-unknown" in codes
    assert basis("fake-meter") == "estimated"  # never passed off as measured
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--gpu", "fakegpu", "--", "true"])
    with pytest.raises(ConfigError, match="sampler.gpu: expected one of"):
        validate_config({"slice": "t", "sampler": {"gpu": "fakegpu"}})


def test_the_basis_follows_the_old_rules_for_the_built_in_sources() -> None:
    assert basis("nvml-samples") == "measured"
    assert basis("nvml-counter,rapl") == "measured"
    assert basis("rapl,estimate") == "estimated"
    assert basis("estimate,sim") == "simulated"
    assert basis("sim-variant") == "simulated"
    assert basis("simulated/calibrated") == "simulated"
    assert basis("") == "estimated"
    assert basis("pm_counters,sstat") == "measured" and basis("redfish,estimate") == "estimated"
    assert sorted(SOURCES_MEASURED) == ["freeipmi", "ipmi", "nvml-counter", "nvml-poll",
                                        "nvml-samples", "pm_counters", "rapl", "redfish", "sstat"]
    assert sorted(SOURCES_NOT_MEASURED) == ["estimate", "pm_counters_emulated", "sim"]
    # the emulated node (issue 45) is never measured, nor is a node_rest derived from it
    assert basis("pm_counters_emulated") == "simulated"
    assert basis("pm_counters_emulated-minus-estimate,sim") == "simulated"


def _id_lists(path: Path, ids: set[str], root: Path = PKG) -> list[str]:
    """Collection literals (list, tuple, set, dict keys) in `path` holding two or more of
    `ids`: a hand-kept list of sources or backends ("file:line: ids", file relative to root)."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        elts: list[ast.expr | None]
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            elts = list(node.elts)
        elif isinstance(node, ast.Dict):
            elts = list(node.keys)
        else:
            continue
        named = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in ids}
        if len(named) >= 2:
            hits.append(f"{path.relative_to(root)}:{node.lineno}: {sorted(named)}")
    return hits


def test_no_module_outside_the_registries_lists_source_or_backend_ids() -> None:
    ids = {s.id for s in source_specs()} | {b.id for b in backend_specs()}
    hits = [h for p in sorted(PKG.rglob("*.py")) if p not in DECLARING
            for h in _id_lists(p, ids)]
    assert hits == [], "source / backend ids listed outside the registries: " + "; ".join(hits)


def test_the_id_list_finder_finds_a_hand_kept_list(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text('A = {"rapl", "estimate"}\nB = ("boxcar", "estimate")\n'
                   'C = {"nvml": 1, "sim": 2}\n')
    hits = _id_lists(src, {"rapl", "estimate", "nvml", "sim"}, root=tmp_path)
    assert hits == ["m.py:1: ['estimate', 'rapl']", "m.py:3: ['nvml', 'sim']"]


def _constants(path: Path, ids: set[str]) -> list[str]:
    """Every string constant of `path` that is one of `ids` ("file:line: id")."""
    return [f"{path.relative_to(PKG)}:{n.lineno}: {n.value}"
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in ids]


def test_readers_name_no_sensor_source_and_the_sampler_no_backend() -> None:
    """The readers of tables (analysis, check, figures) ask the source registry, never compare
    with a sensor source's id; the sampler asks the backend registry, never names a backend."""
    sensor = set(sensor_source_ids())
    readers = [p for d in ("analysis", "check", "figures") for p in sorted((PKG / d).rglob("*.py"))]
    hits = [h for p in readers for h in _constants(p, sensor)]
    hits += _constants(PKG / "sampler.py", {b.id for b in backend_specs()})
    assert hits == [], "ids named outside the registries: " + "; ".join(hits)
