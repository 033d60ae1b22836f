"""Size bounds of the package (issue 31): no module in src/wattlife over 400 lines (but the
few that are one cohesive thing, `ONE_CONCEPT`, up to 600: issue 44) and no function
(def / async def, methods and nested functions included) over 60 lines, counted from its `def`
line to its last line with `ast`.

`ALLOWED_OVER` lists what is over a bound, with its length: empty since issue 31 split the last
ones; an entry is a debt to pay (split the module or the function), not a place to park one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "wattlife"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

#: what is over a bound today: "path/relative/to/src/wattlife.py" (a module) or
#: "path.py:Qualified.name" (a function) -> its current length in lines
ALLOWED_OVER: dict[str, int] = {}

#: modules by concept, not by size (issue 44): a module over 400 lines that is one cohesive thing,
#: with why it is one, up to ONE_CONCEPT_MAX lines; its functions keep the 60-line bound
ONE_CONCEPT_MAX = 600
ONE_CONCEPT: dict[str, str] = {
    "analysis/allocation.py": "one allocation: the job library its strategies and oracle share, "
                              "the strategies' cuts, the oracle, the simulation over workloads",
    "analysis/nvml_sensor.py": "one study of the GPU power sensor (issue 46): its readings' "
                               "spacing and window, and the energy it gives phases of each length",
}


def _rel(path: Path) -> str:
    return path.relative_to(PKG).as_posix()


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def _over_bounds(kind: str) -> dict[str, int]:
    over = {}
    for path in sorted(PKG.rglob("*.py")):
        text = path.read_text()
        if kind == "module":
            n = len(text.splitlines())
            if n > MAX_MODULE_LINES:
                over[_rel(path)] = n
            continue
        for name, n in _functions(ast.parse(text)):
            if n > MAX_FUNCTION_LINES:
                over[f"{_rel(path)}:{name}"] = n
    return over


def _unexpected(over: dict[str, int]) -> list[str]:
    return [f"{k}: {n} lines" for k, n in over.items()
            if (k not in ALLOWED_OVER or n > ALLOWED_OVER[k])
            and not (k in ONE_CONCEPT and n <= ONE_CONCEPT_MAX)]


def test_one_concept_modules_exist_and_need_it():
    """Each ONE_CONCEPT entry is a module over 400 lines (else the entry is stale: drop it)."""
    over = _over_bounds("module")
    assert sorted(ONE_CONCEPT) == sorted(k for k in ONE_CONCEPT if k in over), (
        f"ONE_CONCEPT entries not over {MAX_MODULE_LINES} lines: "
        f"{sorted(set(ONE_CONCEPT) - set(over))}")


def test_the_bounds_are_measured():
    assert any(name == "check_run" for name, _ in _functions(ast.parse(
        (PKG / "check" / "run_dir.py").read_text())))
    nested = "def f():\n    class C:\n        def g(self):\n            pass\n"
    assert dict(_functions(ast.parse(nested))) == {"f": 4, "f.C.g": 2}


def test_no_module_over_400_lines():
    bad = _unexpected(_over_bounds("module"))
    assert not bad, f"modules over {MAX_MODULE_LINES} lines (split them): {bad}"


def test_no_function_over_60_lines():
    bad = _unexpected(_over_bounds("function"))
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines (split them): {bad}"


# No module imports another module's `_private` names (issue 44): a name other modules need is
# public in its module. Read with `ast` over the package, benchmarks/ and scripts/; tests/ may
# import the privates of the code they test (a white-box test of a helper is no caller).
CALLERS = [PKG, PKG.parents[1] / "benchmarks", PKG.parents[1] / "scripts"]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _wattlife_modules(tree: ast.AST) -> set[str]:
    """The names a file binds to wattlife modules (`import wattlife.x as m`, `from . import m`)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in node.names
                    if a.name.split(".")[0] == "wattlife"}
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                "wattlife")):
            out |= {a.asname or a.name for a in node.names if (a.asname or a.name).islower()}
    return out


def private_imports(text: str, where: str = "<text>") -> list[str]:
    """Each `_private` name of a wattlife module that the source `text` imports or reaches as an
    attribute of a module it imported: 'where:line: what'."""
    tree = ast.parse(text)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0]
                                                 == "wattlife"):
            parts = (node.module or "").split(".")
            found += [f"{where}:{node.lineno}: from {'.' * node.level}{node.module or ''} "
                      f"import {a.name}" for a in node.names if _private(a.name)]
            if any(_private(p) for p in parts):
                found.append(f"{where}:{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "wattlife"
                      and any(_private(p) for p in a.name.split("."))]
    modules = _wattlife_modules(tree)
    found += [f"{where}:{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
              and n.value.id in modules and _private(n.attr)]
    return found


def test_the_private_import_check_finds_each_form():
    text = ("from .findings import _capped, capped\nfrom wattlife.x import __version__\n"
            "import wattlife.run.process as proc\nfrom wattlife.figures import common\n"
            "import os\nproc._die()\ncommon._save()\nos._exit(0)\nself._x = 1\n"
            "import wattlife._hidden\n")
    assert private_imports(text) == ["<text>:1: from .findings import _capped",
                                     "<text>:10: import wattlife._hidden",
                                     "<text>:6: proc._die", "<text>:7: common._save"]


def test_no_module_imports_another_modules_private_names():
    found = [hit for root in CALLERS for p in sorted(root.rglob("*.py"))
             for hit in private_imports(p.read_text(), str(p.relative_to(PKG.parents[1])))]
    assert not found, f"imports of another module's _private names (make the name public): {found}"


#: test folders that are not a subpackage of wattlife: the workflow (Snakefile, rules), the
#: repository's own rules, the committed results, the fault sweep, test data
NOT_PACKAGES = {"workflow", "project", "results", "faults", "data"}


def test_the_tests_mirror_the_package() -> None:
    """A test of `wattlife.<pkg>.<module>` lives in tests/<pkg>/, of a top-level module in tests/
    itself; every other folder is one of NOT_PACKAGES."""
    tests = PKG.parents[1] / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert folders - packages - NOT_PACKAGES == set(), "test folders that mirror no package"
