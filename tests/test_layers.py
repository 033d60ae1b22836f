"""The import layering of docs/ARCHITECTURE.md ("Layers"), asserted on the code itself.

Static: every `wattlife` import (absolute or relative, at any depth of a module) is read from the
source with `ast`; on that graph, the layering rules, no import cycle between modules, and figures
importing no analysis code. Dynamic: importing the analysis layer in a fresh interpreter loads no
torch, no NVML binding and no device module (a laptop regenerates every figure from cached tables).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "wattlife"


def _module_name(path: Path, pkg: Path = PKG) -> str:
    rel = path.relative_to(pkg.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _import_statements(path: Path, pkg: Path = PKG) -> list[tuple[str, list[str]]]:
    """(module, names) of every `wattlife` import of a source file, relative ones resolved, at
    any scope (inside functions and under `TYPE_CHECKING` too); names empty for `import m`."""
    name = _module_name(path, pkg)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    root = pkg.name
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.split(".")[0] == root]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] == root:
                out.append((mod, [a.name for a in node.names]))
    return out


def _imports(path: Path) -> set[str]:
    """The wattlife modules a source file imports (resolved relative imports, any scope)."""
    out: set[str] = set()
    for mod, names in _import_statements(path):
        out.add(mod)
        out |= {f"{mod}.{n}" for n in names}  # `from . import x` imports module x
    return out


GRAPH = {_module_name(p): _imports(p) for p in PKG.rglob("*.py")}


def _module_edges(pkg: Path) -> dict[str, set[str]]:
    """The module-level import graph of package `pkg`: `from m import n` is an edge to module
    `m.n` when that is a module (a submodule imported by name), else to `m`. Importing a
    submodule from outside its package also runs the package's `__init__`: an edge to each
    enclosing package the importer is not inside. A package's `__init__` importing its own
    submodules, and those importing their siblings, are therefore no cycle; a module and the
    package `__init__` it imports a name from, that imports it back, are."""
    files = {_module_name(p, pkg): p for p in pkg.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for mod, path in files.items():
        targets: set[str] = set()
        for imported, names in _import_statements(path, pkg):
            subs = {f"{imported}.{n}" for n in names} & files.keys()
            targets |= subs
            if not names or len(subs) < len(names):
                targets.add(imported)
        for t in set(targets):
            parts = t.split(".")
            targets |= {".".join(parts[:i]) for i in range(1, len(parts))
                        if not (mod + ".").startswith(".".join(parts[:i]) + ".")}
        edges[mod] = {t for t in targets if t in files and t != mod}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of modules (Tarjan): modules that import each other,
    directly or through others; each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(groups)


def _modules(*prefixes: str) -> list[str]:
    return sorted(m for m in GRAPH if any(m == p or m.startswith(p + ".") for p in prefixes))


def _hits(importer_prefixes: tuple[str, ...], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = {}
    for mod in _modules(*importer_prefixes):
        hit = sorted(i for i in GRAPH[mod]
                     if any(i == f or i.startswith(f + ".") for f in forbidden))
        if hit:
            bad[mod] = hit
    return bad


def test_the_graph_is_read():
    assert "wattlife.contracts" in GRAPH["wattlife.analysis.pfi"]


def test_analysis_never_imports_devices_sampler_run_or_workloads():
    forbidden = ("wattlife.devices", "wattlife.sampler", "wattlife.run", "wattlife.workloads",
                 "wattlife.sweeps", "wattlife.cli", "wattlife.launch", "wattlife.jobs")
    assert _hits(("wattlife.analysis", "wattlife.attribution", "wattlife.figures",
                  "wattlife.check"), forbidden) == {}


def test_contracts_and_the_simulated_gpu_model_import_nothing_of_the_package():
    """contracts imports only its own modules; simgpu_model nothing of the package."""
    bad = {m: [i for i in GRAPH[m] if i.startswith("wattlife") and not _is_leaf(i)
               and not (i == "wattlife.contracts" or i.startswith("wattlife.contracts."))]
           for m in _modules("wattlife.contracts")}
    assert {m: v for m, v in bad.items() if v} == {}
    assert [i for i in GRAPH["wattlife.simgpu_model"]
            if i.startswith("wattlife") and not _is_leaf(i)] == []


#: modules every layer may import: the error classes and the logging set-up import nothing
LEAVES = ("wattlife.errors", "wattlife.diagnostics")


def _is_leaf(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in LEAVES)


def test_the_error_and_logging_modules_import_nothing_of_the_package():
    assert {m: [i for i in GRAPH[m] if i.startswith("wattlife")] for m in LEAVES} == {
        m: [] for m in LEAVES}


def test_the_cycle_detector_finds_a_hand_made_cycle_and_no_package_reexport(tmp_path):
    pkg = tmp_path / "wattlife"
    (pkg / "p").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .b import B\n")
    (pkg / "b.py").write_text("from .a import A\n")
    # a package re-exporting its submodules, one importing a sibling: no cycle
    (pkg / "p" / "__init__.py").write_text("from . import y\nfrom .z import Z\n")
    (pkg / "p" / "y.py").write_text("from . import z\nfrom .z import Z\n")
    (pkg / "p" / "z.py").write_text("import wattlife.c\n")
    (pkg / "c.py").write_text("def f():\n    from wattlife.p import Z\n")
    edges = _module_edges(pkg)
    assert edges["wattlife.p.y"] == {"wattlife.p.z"}
    assert _cycles(edges) == [["wattlife.a", "wattlife.b"],
                              ["wattlife.c", "wattlife.p", "wattlife.p.y", "wattlife.p.z"]]
    (pkg / "c.py").write_text("")
    assert _cycles(_module_edges(pkg)) == [["wattlife.a", "wattlife.b"]]
    (pkg / "b.py").write_text("")
    assert _cycles(_module_edges(pkg)) == []


def test_no_import_cycle():
    """No two wattlife modules import each other, directly or through others (imports at any
    scope, under `TYPE_CHECKING` too)."""
    edges = _module_edges(PKG)
    found = {" <-> ".join(g): {m: sorted(edges[m] & set(g)) for m in g} for g in _cycles(edges)}
    assert found == {}, f"import cycles (module -> the modules of its cycle it imports): {found}"


def test_figures_never_import_analysis_or_attribution():
    """Figures are drawn only from tables: `wattlife.figures` (module or package) and every
    `wattlife.figures_*` module import no analysis or attribution code."""
    figures = sorted(m for m in GRAPH if m == "wattlife.figures"
                     or m.startswith(("wattlife.figures.", "wattlife.figures_")))
    assert figures
    forbidden = ("wattlife.analysis", "wattlife.attribution")
    bad = {m: sorted(i for i in GRAPH[m] if any(i == f or i.startswith(f + ".")
                                                   for f in forbidden)) for m in figures}
    assert {m: v for m, v in bad.items() if v} == {}


def test_workloads_and_markers_never_import_the_sampler_or_devices():
    forbidden = ("wattlife.sampler", "wattlife.devices", "wattlife.run", "wattlife.analysis",
                 "wattlife.attribution")
    assert _hits(("wattlife.workloads", "wattlife.markers", "wattlife.instrument"), forbidden) == {}


def test_devices_import_only_devices_contracts_and_the_simulated_gpu_model():
    allowed = ("wattlife.devices", "wattlife.contracts", "wattlife.simgpu_model",
               "wattlife.safewrite") + LEAVES
    bad = {m: [i for i in GRAPH[m] if not any(i == a or i.startswith(a + ".") for a in allowed)]
           for m in _modules("wattlife.devices")}
    assert {m: v for m, v in bad.items() if v} == {}


@pytest.mark.parametrize("layer", ["wattlife.analysis", "wattlife.attribution", "wattlife.figures",
                                   "wattlife.check"])
def test_importing_analysis_loads_no_torch_nvml_or_device_module(layer):
    mods = _modules(layer)
    code = ("import importlib, json, sys\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'pynvml', 'transformers') or m.startswith('wattlife.devices'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
