"""Size bounds of the package (issue 31): no module in src/wattlife over 400 lines and no function
(def / async def, methods and nested functions included) over 60 lines, counted from its `def`
line to its last line with `ast`.

`ALLOWED_OVER` lists what is over a bound, with its length: empty since issue 31 split the last
ones; an entry is a debt to pay (split the module or the function), not a place to park one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "wattlife"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

#: what is over a bound today: "path/relative/to/src/wattlife.py" (a module) or
#: "path.py:Qualified.name" (a function) -> its current length in lines
ALLOWED_OVER: dict[str, int] = {}


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
            if k not in ALLOWED_OVER or n > ALLOWED_OVER[k]]


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
