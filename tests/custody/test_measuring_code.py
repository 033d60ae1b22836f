"""The sealed measuring code (custody.seal.MEASURING_CODE) covers every module that runs inside a
measurement: the `wattlife` commands a measured command line runs (built by wattlife.launch for a
cell or a PFI cap, on one node and on several; and the PFI cap's and the transfers' rules), each
command's handler, and every wattlife module they import, transitively. A module there is either
hashed or named, with its reason, in custody.seal.OUTSIDE_MEASURING (issue 39)."""

from __future__ import annotations

import ast
import inspect
import re
import shlex
from pathlib import Path

import pytest

from wattlife.cli import build_parser
from wattlife.custody.seal import MEASURING_CODE, OUTSIDE_MEASURING, code_version
from wattlife.launch import LaunchSpec, build_command

PKG = Path(__file__).resolve().parents[2] / "src" / "wattlife"
REPO = PKG.parents[1]


def measured_commands() -> set[str]:
    """The wattlife subcommands of a measured command line: a cell's on one and on two nodes,
    capped or not (launch.build_command), and those the measuring rules run under `wattlife
    attempt`."""
    words: list[str] = []
    for spec in (LaunchSpec(), LaunchSpec(nodes=2, gpus_per_node=2, launcher="torchrun"),
                 LaunchSpec(per_node=True, cap_w=300.0)):
        cmd = build_command(spec, config="c.json", run_dir="d", run_id="r", cell={},
                            inner=["train", "--config", "c.json"])
        words += shlex.split(cmd.replace(";", " ; ").replace("&&", " && "))
    subs = {b for a, b in zip(words, words[1:], strict=False) if a.endswith("wattlife")}
    subs |= {b for a, b in zip(words, words[1:], strict=False) if a == "wattlife.cli"}
    for block in measuring_rules():  # what their `wattlife attempt` runs (its link: relink)
        subs |= set(re.findall(r"\bwattlife ([a-z][a-z-]*)", block)) - {"attempt", "relink"}
    return subs - {"-m"}


def measuring_rules() -> list[str]:
    """The text of the PFI cap's and the transfers' measuring rules (and their link rules)."""
    cap = (REPO / "rules/powercap.smk").read_text()
    prep = (REPO / "rules/prepare.smk").read_text()
    blocks = [cap[cap.index("if PFI_CELLS:"):cap.index("rule pfi_curve:")]]
    for name in ("download", "upload"):
        start = prep.index(f"\nrule {name}:")
        blocks.append(prep[start:prep.index("\nrule ", start + 1)])
    return blocks


def handler_modules(sub: str) -> set[str]:
    """The wattlife modules the handler of `wattlife <sub>` imports."""
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command" or a.choices)
    fn = action.choices[sub].get_default("fn")
    return imports_of(Path(inspect.getsourcefile(fn)), ast.parse(inspect.getsource(fn)))


def module_of(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path, tree: ast.AST) -> set[str]:
    """wattlife modules (dotted, relative to the package) that `tree` (of file `path`) imports."""
    here = module_of(path).split(".") if module_of(path) else []
    pkg = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("wattlife"):
                mod = node.module.removeprefix("wattlife").lstrip(".")
            else:
                continue
            out.add(mod)
            out |= {f"{mod}.{a.name}".lstrip(".") for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name.removeprefix("wattlife").lstrip(".") for a in node.names
                    if a.name.startswith("wattlife.")}
    return {m for m in out if source(m) is not None}


def source(mod: str) -> Path | None:
    p = PKG.joinpath(*mod.split(".")) if mod else PKG
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    return p / "__init__.py" if (p / "__init__.py").is_file() else None


def closure(start: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = source(mod)
        if path is not None:
            todo += imports_of(path, ast.parse(path.read_text()))
    return seen


def covered(mod: str, parts: tuple[str, ...]) -> bool:
    top = mod.split(".")[0]
    return any(mod == p.removesuffix(".py").replace("/", ".") or top == p.removesuffix(".py")
               for p in parts)


def test_the_measured_command_lines_run_these_commands():
    subs = measured_commands()
    assert {"run", "launch-node", "merge-nodes", "train", "pfi-sweep", "fetch",
            "upload"} <= subs, subs


def test_every_module_that_runs_inside_a_measurement_is_sealed_or_named_outside():
    start = set().union(*(handler_modules(s) for s in measured_commands()))
    mods = closure(start) - {""}
    assert {"run.node", "launch", "sampler"} <= mods, sorted(mods)
    bad = sorted(m for m in mods if not covered(m, MEASURING_CODE)
                 and not covered(m, tuple(OUTSIDE_MEASURING)))
    assert not bad, f"run inside a measurement, neither sealed nor named outside: {bad}"
    both = sorted(p for p in OUTSIDE_MEASURING if p in MEASURING_CODE)
    assert not both, both


@pytest.mark.parametrize("fn", ["run_node", "merge_meta"])
def test_the_node_side_of_a_multi_node_measurement_is_in_the_hash(fn, tmp_path):
    """A change in `run_node` / `merge_meta` changes the measuring code's hash; a change in how
    the command line is built (launch.build_command) does not."""
    import shutil

    copy = tmp_path / "wattlife"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_version(copy)["measuring_sha256"]
    launch = copy / "launch.py"
    launch.write_text(launch.read_text().replace("def build_command(", "def build_command(  "))
    assert code_version(copy)["measuring_sha256"] == before
    node = copy / "run" / "node.py"
    node.write_text(node.read_text().replace(f"def {fn}(", f"def {fn}(  "))
    assert code_version(copy)["measuring_sha256"] != before
