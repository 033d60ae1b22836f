"""The import layering of docs/ARCHITECTURE.md ("Layers"), asserted on the code itself.

Static: every `wattlife` import (absolute or relative, at any depth of a module) is read from the
source with `ast`. Dynamic: importing the analysis layer in a fresh interpreter loads no torch, no
NVML binding and no device module (a laptop regenerates every figure from cached tables).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "wattlife"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The wattlife modules a source file imports (resolved relative imports, any scope)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("wattlife")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("wattlife"):
                continue
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}  # `from . import x` imports module x
    return out


GRAPH = {_module_name(p): _imports(p) for p in PKG.rglob("*.py")}


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
    assert _hits(("wattlife.contracts", "wattlife.simgpu_model"), ("wattlife",)) == {}


def test_workloads_and_markers_never_import_the_sampler_or_devices():
    forbidden = ("wattlife.sampler", "wattlife.devices", "wattlife.run", "wattlife.analysis",
                 "wattlife.attribution")
    assert _hits(("wattlife.workloads", "wattlife.markers", "wattlife.instrument"), forbidden) == {}


def test_devices_import_only_devices_contracts_and_the_simulated_gpu_model():
    allowed = ("wattlife.devices", "wattlife.contracts", "wattlife.simgpu_model",
               "wattlife.safewrite")
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
