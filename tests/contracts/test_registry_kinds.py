"""The device-kind registry (`contracts.kinds`, issue 44): a fake kind declared in the registry
alone flows to attribution, `wattlife check`, the aggregation tables, the suite's energy beside
Slurm's and the figures' colours; without the declaration its device is left out and warned
about; and no list of kinds is written anywhere in src/ outside the registry."""

import ast
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import wattlife_sim_run
from wattlife.check import check_run
from wattlife.cli import main
from wattlife.contracts import (
    KINDS,
    ContractError,
    DeviceKind,
    attributed_kinds,
    device_forms,
    device_kind,
    device_pattern,
    kind_of,
    node_part_kinds,
)
from wattlife.figures import lifecycle
from wattlife.slurm_energy import run_energy

SRC = Path(__file__).resolve().parents[2] / "src" / "wattlife"
FPGA = DeviceKind("fpga", "FPGA", "#3a9a4a", 1_000.0)
WORK = ("import time\nfrom wattlife.markers import phase, step\n"
        "with phase('model_load'):\n    time.sleep(0.3)\n"
        "for i in range(4):\n"
        "    with step(items=4):\n"
        "        with phase('forward'):\n            time.sleep(0.1)\n")


@pytest.fixture
def fpga(monkeypatch: pytest.MonkeyPatch) -> DeviceKind:
    """The fake kind, declared in the registry for one test (monkeypatch restores it)."""
    monkeypatch.setitem(KINDS, "fpga", FPGA)
    return FPGA


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `wattlife run` (simulated GPU, estimated CPU) whose trace also holds an `fpga0`:
    the CPU's power readings again, under that name (so its energy is known: the CPU's)."""
    run = tmp_path_factory.mktemp("kinds") / "run"
    run.mkdir()
    wattlife_sim_run(run, WORK)
    tr = pd.read_csv(run / "trace.csv", dtype={"value": str})
    cpu = tr[(tr["device"] == "cpu0") & tr["metric"].isin(["power_w", "energy_j"])]
    assert len(cpu) >= 2
    with (run / "trace.csv").open("a") as fh:
        cpu.assign(device="fpga0").to_csv(fh, header=False, index=False)
    meta = json.loads((run / "meta.json").read_text())
    meta["slurm"] = {"job_id": "42"}  # for the suite's energy beside Slurm's
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def _attribute(run: Path) -> pd.DataFrame:
    args = ["attribute", "--trace", str(run / "trace.csv"), "--events", str(run / "events.csv"),
            "-o", str(run / "phases.csv")]
    assert main(args) == 0
    return pd.read_csv(run / "phases.csv", keep_default_na=False, na_values=[""])


def test_a_declared_kind_is_attributed_with_the_same_machinery_and_intervals(
        sim_run: Path, tmp_path: Path, fpga: DeviceKind) -> None:
    ph = _attribute(_copy(sim_run, tmp_path / "run"))
    cpu = ph[ph["device"] == "cpu0"].set_index("phase").sort_index()
    fp = ph[ph["device"] == "fpga0"].set_index("phase").sort_index()
    assert set(fp["device_kind"]) == {"fpga"}
    assert list(fp.index) == list(cpu.index) and len(fp) >= 3  # the same phases
    for col in ("energy_j", "energy_lo_j", "energy_hi_j", "time_s", "count", "mean_power_w"):
        assert fp[col].to_numpy() == pytest.approx(cpu[col].to_numpy(), nan_ok=True), col
    assert list(fp["method"]) == list(cpu["method"]) and list(fp["source"]) == list(cpu["source"])


def test_an_undeclared_kind_is_left_out_and_warned_about(sim_run: Path, tmp_path: Path) -> None:
    run = _copy(sim_run, tmp_path / "run")
    assert "fpga0" not in set(_attribute(run)["device"])
    found = [f for f in check_run(run) if f.code == "trace.device-name"]
    assert [f.message for f in found] == ["device 'fpga0' is not gpuN, cpuN, dramN or node"]
    with pytest.raises(ContractError, match="'fpga0' is not gpuN, cpuN, dramN or node"):
        device_kind("fpga0")


def test_check_accepts_a_declared_kind_and_names_an_undeclared_one(
        sim_run: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", str(sim_run)])  # its exit code also says the sampler's gaps on a busy machine
    assert "device 'fpga0' is not gpuN, cpuN, dramN or node [trace.device-name]" in (
        capsys.readouterr().out)
    monkeypatch.setitem(KINDS, "fpga", FPGA)
    assert [f for f in check_run(sim_run) if f.code == "trace.device-name"] == []
    main(["check", str(sim_run)])
    assert "fpga" not in capsys.readouterr().out


def test_a_declared_kind_reaches_the_tables_and_slurms_comparison(
        sim_run: Path, tmp_path: Path, fpga: DeviceKind) -> None:
    run = _copy(sim_run, tmp_path / "run")
    ph = _attribute(run)
    tables = tmp_path / "tables"
    assert main(["aggregate", str(run / "phases.csv"), "-o", str(tables)]) == 0
    share = pd.read_csv(tables / "device_share.csv").set_index("device_kind")
    assert set(share.index) == {"gpu", "cpu", "fpga"}
    assert share.loc["fpga", "energy_j"] == pytest.approx(share.loc["cpu", "energy_j"])
    assert share["share"].sum() == pytest.approx(1.0)
    summary = pd.read_csv(tables / "phase_summary.csv")
    assert set(summary.loc[summary["device_kind"] == "fpga", "phase"]) == set(
        ph.loc[ph["device"] == "fpga0", "phase"]) - {"deconvolution_residual"}
    row = run_energy(run, run.parent)
    assert row is not None and "(gpu+cpu+fpga, phases.csv)" in str(row["suite_source"])
    assert row["suite_energy_j"] == pytest.approx(ph["energy_j"].sum())


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the lifecycle module draws, kept instead of saved."""
    figs: list = []
    monkeypatch.setattr(lifecycle, "save_figure", lambda fig, out: figs.append(fig) or [])
    return figs


def _share_rows() -> pd.DataFrame:
    return pd.DataFrame({"workload": "w", "storage": "shared", "checkpoint": "off",
                         "device_kind": ["gpu", "cpu", "fpga"], "n": 1,
                         "energy_j": [60.0, 30.0, 10.0], "share": [0.6, 0.3, 0.1],
                         "source": ["sim", "estimate", "estimate"]})


def test_the_figures_colour_a_declared_kind_and_hide_an_undeclared_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    figs = _drawn(monkeypatch)
    lifecycle.fig_device_share(_share_rows(), tmp_path / "f")
    legend = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    assert legend == ["GPU", "CPU"]  # fpga undeclared: not drawn
    monkeypatch.setitem(KINDS, "fpga", FPGA)
    lifecycle.fig_device_share(_share_rows(), tmp_path / "g")
    ax = figs[1].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["GPU", "CPU", "FPGA"]
    colors = {p.get_label(): p.patches[0].get_facecolor() for p in ax.containers}
    from matplotlib.colors import to_rgba

    assert colors["FPGA"] == to_rgba(FPGA.color)


def test_kind_of_parses_names_through_the_registry(fpga: DeviceKind) -> None:
    assert [device_kind(d) for d in ("gpu0", "cpu12", "dram1", "node", "fpga3")] == [
        "gpu", "cpu", "dram", "node", "fpga"]
    assert kind_of("fpga") is None and kind_of("gpu") is None and kind_of("xgpu0") is None
    assert list(KINDS) == ["gpu", "cpu", "dram", "node", "fpga"]  # declaration order: tables'
    assert kind_of("node0") is None  # `node` is not numbered: one per host


@given(st.text(alphabet="gpucdramnoe0123456789x_", max_size=8),
       st.sampled_from(list(KINDS)), st.integers(0, 10**6))
def test_check_and_attribution_parse_device_names_alike(text: str, kind: str, n: int) -> None:
    """What `check` accepts is what attribution parses, and each kind's `<name><N>` (or, not
    numbered, `<name>`) is its."""
    own = f"{kind}{n}" if KINDS[kind].numbered else kind
    for name in (text, own, f"{kind}{n}"):
        assert (re.match(device_pattern(), name) is not None) == (kind_of(name) is not None)
    assert device_kind(own) == kind


def test_the_node_kind_gives_one_device_per_host() -> None:
    """The declared `node` kind (issue 45): check's pattern and words are again those it had
    before the registry; its energy is not summed with the parts'."""
    assert KINDS["node"] == DeviceKind("node", "node", "#8c564b", 200_000.0, numbered=False,
                                       part_of_node=False)
    assert device_pattern() == r"^(?:gpu|cpu|dram)\d+$|^node$"
    assert device_forms() == "gpuN, cpuN, dramN or node"
    assert device_kind("node") == "node" and kind_of("node0") is None
    assert node_part_kinds() == ("gpu", "cpu", "dram") and "node" in attributed_kinds()


# ----------------------------------------------------------------------------- no other lists
#: the kind names a list elsewhere must not hold two of: the registry's, and `node` (issue 45)
KIND_NAMES = {*KINDS, "node"}
#: collections of those names that are not device kinds (what they are instead)
NOT_KINDS = {
    ("workloads/gpu_decode.py", "gpu,cpu"): "decode paths: images decoded on the GPU or the CPU",
}


def _kind_lists(path: Path) -> list[tuple[int, list[str]]]:
    """(line, names) of every outermost tuple / list / set / dict literal holding two or more
    kind names as string constants anywhere inside it (`(("gpu", c1), ("cpu", c2))` too)."""
    out = []
    inner: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or id(node) in inner:
            continue
        below = list(ast.walk(node))
        inner |= {id(n) for n in below[1:]}
        names = [e.value for e in below
                 if isinstance(e, ast.Constant) and e.value in KIND_NAMES]
        if len(set(names)) >= 2:
            out.append((node.lineno, names))
    return out + _kind_texts(path)


def _kind_texts(path: Path) -> list[tuple[int, list[str]]]:
    """(line, names) of every string constant naming two or more kinds as a regular expression's
    alternatives (`gpu|cpu`) or as device-name forms (`gpuN, cpuN`)."""
    alt = "|".join(sorted(KIND_NAMES))
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = re.findall(rf"(?<![a-z_])({alt})(?=\||N\b)", node.value)
            names += re.findall(rf"(?<=\|)({alt})(?![a-z_])", node.value)
            if len(set(names)) >= 2:
                out.append((node.lineno, sorted(set(names))))
    return out


def test_no_list_of_kinds_is_written_outside_the_registry() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "contracts/kinds.py":
            continue
        for line, names in _kind_lists(path):
            if (rel, ",".join(names)) not in NOT_KINDS:
                found.append(f"src/wattlife/{rel}:{line}: {names}")
    assert found == [], "derive these from contracts.kinds.KINDS:\n" + "\n".join(found)


def test_the_scan_finds_a_list_of_kinds(tmp_path: Path) -> None:
    """The scan above can fail: the forms it must catch, and what it leaves alone."""
    f = tmp_path / "m.py"
    f.write_text('A = ("gpu", "cpu", "dram")\nB = {"gpu": 1, "node": 2}\nC = ["cpu", "x"]\n'
                 'D = {"gpu", "dram"}\nE = [("gpu", "#111"), ("cpu", "#222")]\n'
                 'F = r"^(?:gpu|cpu)\\d+$"\nG = "is not gpuN or cpuN"\nH = "gpu_cpu|x"\n')
    assert [line for line, _ in _kind_lists(f)] == [1, 2, 4, 5, 6, 7]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "fpga2"}, "device kind 'fpga2': a name is lower-case letters"),
    ({"reads": ("util_gpu",)}, r"device kind 'fpga': reads \('util_gpu',\), expected some of"),
    ({"reads": ()}, "device kind 'fpga': reads"),
])
def test_a_bad_declaration_is_refused_with_its_rule(kwargs: dict[str, object],
                                                    message: str) -> None:
    spec: dict[str, object] = {"name": "fpga", "label": "FPGA", "color": "#000",
                               "max_plausible_w": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        DeviceKind(**spec)  # type: ignore[arg-type]


# ------------------------------------------------------------------- no kind logic by name
#: tests of a kind's name that are not kind logic (what they test instead)
NOT_KIND_TESTS = {
    ("workloads/image.py", "gpu"): "the decode path a workload asks for (`decode: gpu`)",
    ("workloads/gpu_decode.py", "gpu"): "the decode path a workload asks for",
    ("devices/rapl.py", "dram"): "a RAPL zone's own name in sysfs",
}


def _name_tests(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each place testing or building a device name from a kind's name as a
    literal: `x == "gpu"` / `!=`, `.startswith("gpu")`, `.removeprefix("gpu")`, and
    `f"gpu{i}"` (a device name written by hand instead of `contracts.kinds`' `device(i)`)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq))
                                                 for o in node.ops):
            consts = [c.value for c in (node.left, *node.comparators)
                      if isinstance(c, ast.Constant) and c.value in KIND_NAMES]
            out += [(node.lineno, c) for c in consts]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "removeprefix") and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value in KIND_NAMES):
            out.append((node.lineno, node.args[0].value))
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if (isinstance(first, ast.Constant) and first.value in KIND_NAMES
                    and len(node.values) > 1 and isinstance(node.values[1], ast.FormattedValue)):
                out.append((node.lineno, first.value))
    return out


def test_no_kind_logic_by_a_kind_s_name_outside_the_registry() -> None:
    """Which devices are a rank's, which are GPUs, how a device is named: asked of the registry
    (`is_per_rank`, `per_rank_kinds`, `GPU.forms`, `GPU.device(i)`, `device_index`), never
    by comparing with or writing a kind's name."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "contracts/kinds.py":
            continue
        found += [f"src/wattlife/{rel}:{line}: {name!r}" for line, name in _name_tests(path)
                  if (rel, name) not in NOT_KIND_TESTS]
    assert found == [], "ask contracts.kinds instead:\n" + "\n".join(found)


def test_the_name_test_scan_finds_each_form(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('a = k == "gpu"\nb = d.startswith("cpu")\nc = d.removeprefix("gpu")\n'
                 'e = f"dram{n}"\ng = "gpu" != k\nh = k == "fpga"\ni = f"x{n}gpu"\n')
    assert [line for line, _ in _name_tests(f)] == [1, 2, 3, 4, 5]


#: schema enums of kind names that are not device kinds (what they are instead)
NOT_KIND_ENUMS = {"schema.workloads.decode": "decode paths: images decoded on the GPU or the CPU"}


def test_the_schema_lists_no_kinds_and_device_names_come_from_the_kinds() -> None:
    import yaml

    doc = yaml.safe_load((SRC / "resources" / "schema.yaml").read_text())
    hits = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            named = set(node.get("enum") or []) & KIND_NAMES
            if len(named) >= 2:
                hits.append(f"{where}: {sorted(named)}")
            for k, v in node.items():
                walk(v, where if k in ("properties", "additionalProperties") else f"{where}.{k}")
        elif isinstance(node, list):
            for v in node:
                walk(v, where)

    walk(doc, "schema")
    hits = [h for h in hits if h.split(":")[0] not in NOT_KIND_ENUMS]
    assert hits == [], "kinds listed in resources/schema.yaml: " + "; ".join(hits)
    gpu, node = KINDS["gpu"], KINDS["node"]
    assert (gpu.device(3), gpu.index("gpu3"), gpu.index("gpu"), gpu.index("gpu٣")) == (
        "gpu3", 3, None, None)
    assert (node.device(), node.index("node")) == ("node", None)
