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
DECLARING = {PKG / "contracts" / "sources.py", PKG / "devices" / "registry.py"}


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


def _schema_with(enums: dict[str, list[str]]) -> dict[str, object]:
    """The shipped schema with its `sampler` enums replaced by `enums`."""
    sch = schema()
    props = {**sch["properties"]["sampler"]["properties"]}
    for key, values in enums.items():
        props[key] = {**props[key], "enum": values}
    sampler = {**sch["properties"]["sampler"], "properties": props}
    return {**sch, "properties": {**sch["properties"], "sampler": sampler}}


def _shipped_enums() -> dict[str, list[str]]:
    props = schema()["properties"]["sampler"]["properties"]
    return {k: v["enum"] for k, v in props.items() if "enum" in v}


def test_the_schema_lists_exactly_the_registry_s_sampler_choices() -> None:
    assert _shipped_enums() == schema_enums(), (
        "resources/schema.yaml's sampler enums must be the sensor-backend registry's "
        f"(devices.registry.schema_enums()): {schema_enums()}")
    assert choices("gpu") == ["auto", "nvml", "sim", "none"]
    assert choices("cpu") == ["auto", "rapl", "estimate", "none"]
    assert choices("node") == ["auto", "pm_counters", "redfish", "ipmi", "slurm", "none"]


def test_every_backend_writes_declared_sources_and_reads_existing_sampler_keys() -> None:
    keys = {f.name for f in dataclasses.fields(SamplerSettings)}
    for b in backend_specs():
        assert set(b.settings) <= keys, b.id
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
    # config: the registry's schema accepts it; the shipped one must be told (the test above)
    section = {"gpu": "fakegpu", "cpu": "none"}
    cfg = {"slice": "t", "sampler": section}
    derived = tmp_path / "schema.yaml"
    derived.write_text(yaml.safe_dump(_schema_with(schema_enums())))
    validate_config(cfg, derived)
    with pytest.raises(ConfigError, match="sampler.gpu: expected one of"):
        validate_config(cfg)  # the shipped schema must list it: the test above says so
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
    derived = tmp_path / "schema.yaml"
    derived.write_text(yaml.safe_dump(_schema_with(schema_enums())))
    with pytest.raises(ConfigError, match="sampler.gpu: expected one of"):
        validate_config({"slice": "t", "sampler": {"gpu": "fakegpu"}}, derived)


def test_the_basis_follows_the_old_rules_for_the_built_in_sources() -> None:
    assert basis("nvml-samples") == "measured"
    assert basis("nvml-counter,rapl") == "measured"
    assert basis("rapl,estimate") == "estimated"
    assert basis("estimate,sim") == "simulated"
    assert basis("sim-variant") == "simulated"
    assert basis("simulated/calibrated") == "simulated"
    assert basis("") == "estimated"
    assert basis("pm_counters,sstat") == "measured" and basis("redfish,estimate") == "estimated"
    assert sorted(SOURCES_MEASURED) == ["ipmi", "nvml-counter", "nvml-poll", "nvml-samples",
                                        "pm_counters", "rapl", "redfish", "sstat"]
    assert sorted(SOURCES_NOT_MEASURED) == ["estimate", "sim"]


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
