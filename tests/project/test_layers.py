"""The import layering of docs/ARCHITECTURE.md ("Layers"), asserted on the code itself.

Static: the import-linter contracts of pyproject.toml (`[tool.importlinter]`, also run by
`make lint`) hold on the package, and each contract fails on a deliberately bad import in a copy
of it. Dynamic: importing the analysis layer in a fresh interpreter loads no torch, no NVML binding
and no device module (a laptop regenerates every figure from cached tables).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "src" / "wattlife"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
IDS = [c["id"] for c in CONTRACTS["contracts"]]

#: contract id -> (module file, an import appended to it inside a function) that breaks it
BAD_IMPORTS = {
    "no-cycles": ("check/findings.py", "from . import trace"),
    "analysis-no-devices": ("analysis/pfi.py", "from wattlife import sampler"),
    "figures-from-tables": ("figures/common.py", "import wattlife.attribution"),
    "workloads-no-sampler": ("markers.py", "import wattlife.devices"),
    "contracts-alone": ("contracts/names.py", "import wattlife.config"),
    "devices-below": ("devices/base.py", "from wattlife.config import load_config"),
    "leaves": ("errors.py", "import wattlife.contracts"),
}


def _lint_imports(cwd: Path, src: Path, *contract: str) -> subprocess.CompletedProcess[str]:
    """`lint-imports` (no cache written) with `src` first on the path, in `cwd` (its pyproject)."""
    args = [a for c in contract for a in ("--contract", c)]
    code = ("import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())")
    return subprocess.run([sys.executable, "-c", code, "--no-cache", "--no-logo", *args],
                          cwd=cwd, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_every_contract_holds_on_the_package():
    out = _lint_imports(ROOT, ROOT / "src")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Contracts: {len(IDS)} kept, 0 broken." in out.stdout


def test_make_lint_runs_the_contracts_and_checks_benchmarks_and_scripts():
    lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "lint-imports" in lint and "ruff check src tests benchmarks scripts" in lint
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["strict"] is True
    assert set(mypy["files"]) == {"src/wattlife", "benchmarks", "scripts"}


def test_every_contract_has_a_bad_import_below():
    assert sorted(BAD_IMPORTS) == sorted(IDS)


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's Python files and pyproject.toml, copied (the fixture edits the copy)."""
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(PKG, root / "src" / "wattlife",
                    ignore=lambda d, names: [n for n in names if not n.endswith(".py")
                                             and not (Path(d) / n).is_dir()])
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


@pytest.mark.parametrize("contract", IDS)
def test_a_bad_import_breaks_its_contract(package_copy: Path, contract: str):
    file, statement = BAD_IMPORTS[contract]
    path = package_copy / "src" / "wattlife" / file
    original = path.read_text()
    assert _lint_imports(package_copy, package_copy / "src", contract).returncode == 0
    path.write_text(original + f"\n\ndef _deliberately_bad() -> None:\n    {statement}\n")
    try:
        out = _lint_imports(package_copy, package_copy / "src", contract)
    finally:
        path.write_text(original)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Contracts: 0 kept, 1 broken." in out.stdout


def _modules(layer: str) -> list[str]:
    """The modules of package `layer` (e.g. "wattlife.analysis"), the package included."""
    base = PKG.parent / layer.replace(".", "/")
    rel = [p.relative_to(PKG.parent).with_suffix("") for p in base.rglob("*.py")]
    return sorted(".".join(r.parts[:-1] if r.name == "__init__" else r.parts) for r in rel)


@pytest.mark.parametrize("layer", ["wattlife.analysis", "wattlife.attribution", "wattlife.figures",
                                   "wattlife.check"])
def test_importing_analysis_loads_no_torch_nvml_or_device_module(layer):
    mods = _modules(layer)
    assert layer in mods
    code = ("import importlib, json, sys\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'pynvml', 'transformers') or m.startswith('wattlife.devices'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
