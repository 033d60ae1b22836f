"""Every pointer the docs keep exists (issue 44, "docs that lead").

The pages `docs/*.md` and `CONTRIBUTING.md` name code as `wattlife.x.y` or, inside backticks, as
`x.y` where `x` is a module or package of `src/wattlife/` (`attribution.integrate`,
`sampler.Sampler`); they name files as `src/...`, `rules/...`, `tests/...`, `benchmarks/...`,
`scripts/...`, `config/...`, `docs/...`, `results/reference/...`; and they link pages and their
sections (`[...](FORMULAS.md#mfu-workloadslm_model)`). Each is checked here, statically (no
import: the docs name torch-heavy modules too): a dotted name resolves to a module of the source
tree, then to a name that module defines, imports or re-exports, then (one level) to a name in that
class's body; a backticked `x.y` that is not code may be a key of the configuration schema
(`sampler.idle_baseline_s`), a key of meta.json (`sampler.rows`) or a dotted string the code uses
(a finding code such as `custody.damaged`). A file path must exist (a glob must match). A link's
page must exist and its `#anchor` must be one of that page's headings as GitHub spells them.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO

SRC = REPO / "src" / "wattlife"
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "CONTRIBUTING.md"]

#: a dotted word ending so is a file name (`wattlife.json`, `check.txt`), not code; `x.py` is
#: checked as the file src/wattlife/x.py
FILE_EXTS = {"json", "def", "sif", "txt", "yaml", "log", "csv", "lock", "md", "py"}
#: names the pages use for registries other branches of issue 44 are building; each must exist
#: once those are merged (then `test_planned_pointers_are_still_planned` fails: drop it here)
PLANNED: set[str] = set()
PATH_ROOTS = ("src/", "rules/", "tests/", "benchmarks/", "scripts/", "config/", "docs/",
              "results/reference/", ".ci/")

DOTTED = re.compile(r"\bwattlife(?:\.[A-Za-z_]\w*)+")
BACKTICKED = re.compile(r"`([^`\n]+)`")
SHORT = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?$")
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(re.escape(r) for r in PATH_ROOTS)
                  + r")[\w./*-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def top_level_names() -> set[str]:
    """Modules and packages directly under src/wattlife/."""
    return {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir()
                                                 if (p / "__init__.py").is_file()}


@functools.cache
def _defined(path: Path) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Top-level names a module defines, imports or lists in `__all__`, and each class's body."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    classes: dict[str, frozenset[str]] = {}
    for node in tree.body:
        names |= _bound(node)
        if isinstance(node, ast.ClassDef):
            body: set[str] = set()
            for sub in node.body:
                body |= _bound(sub)
            classes[node.name] = frozenset(body)
        if isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks, optional imports
            for inner in ast.walk(node):
                if isinstance(inner, ast.stmt):
                    names |= _bound(inner)
    return frozenset(names), classes


def _bound(node: ast.stmt) -> set[str]:
    """The names one top-level statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    out = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if "__all__" in out and isinstance(node, ast.Assign):
        out |= {c.value for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return out


def planned(pointer: str) -> bool:
    """A name in (or under) a registry module that another branch of issue 44 is adding."""
    return any(pointer == p or pointer.startswith(p + ".") for p in PLANNED)


def _module_file(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def code_pointer_exists(pointer: str) -> bool:
    """`wattlife.a.b.C.d`: the longest module prefix, then a name it binds, then (one level) a
    name of that class's body; deeper attributes are not followed."""
    parts = pointer.split(".")[1:]
    if not parts:
        return True
    for cut in range(len(parts), 0, -1):
        f = _module_file(parts[:cut])
        if f is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        names, classes = _defined(f)
        if rest[0] not in names:
            return False
        return len(rest) == 1 or rest[0] not in classes or rest[1] in classes[rest[0]]
    return False


@functools.cache
def _literals() -> frozenset[str]:
    """Every dotted string literal of the source tree: finding codes (`custody.damaged`), the
    dotted keys messages name (`sampler.rows`)."""
    out: set[str] = set()
    for f in SRC.rglob("*.py"):
        out |= set(re.findall(r"[\"'`]([a-z_]+(?:\.[a-z_]+)+)[\"'`]", f.read_text()))
    return frozenset(out)


@functools.cache
def _meta_keys() -> frozenset[str]:
    """meta.json's top-level keys, as `contracts/meta.py`'s `META_KEY_TYPES` lists them."""
    tree = ast.parse((SRC / "contracts" / "meta.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "META_KEY_TYPES" \
                and isinstance(node.value, ast.Dict):
            return frozenset(k.value for k in node.value.keys
                             if isinstance(k, ast.Constant) and isinstance(k.value, str))
    raise AssertionError("contracts/meta.py has no META_KEY_TYPES dict")


def meta_key_exists(dotted: str) -> bool:
    """`sampler.rows`: a meta.json key and a key of its value, a string the source tree writes."""
    top, _, sub = dotted.partition(".")
    return top in _meta_keys() and "." not in sub and any(
        f'"{sub}"' in f.read_text() for f in SRC.rglob("*.py"))


@functools.cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load((SRC / "resources" / "schema.yaml").read_text())
    return schema


def schema_key_exists(dotted: str) -> bool:
    """`sampler.idle_baseline_s`: a path of keys of the configuration schema (a mapping of
    user-named entries, such as `workloads`, takes any name at its level)."""
    node = _schema()
    for key in dotted.split("."):
        props = node.get("properties", {})
        if key in props:
            node = props[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
    return True


def pointers(text: str) -> tuple[set[str], set[str]]:
    """(code pointers as `wattlife.x.y`, backticked short names that may be schema keys)."""
    code = {m.group(0) for m in DOTTED.finditer(text)
            if m.group(0).rsplit(".", 1)[1] not in FILE_EXTS}
    short: set[str] = set()
    tops = top_level_names()
    for m in BACKTICKED.finditer(text):
        s = SHORT.match(m.group(1).strip())
        if s and s.group(1).split(".")[0] in tops:
            short.add(s.group(1))
    return code, short


def path_pointers(text: str) -> set[str]:
    """`src/...`-style paths, without placeholders (`<cell>`, `{a,b}`), trailing punctuation,
    the files a recipe says to create (`` `src/wattlife/devices/amdsmi.py` (new) ``) or paths in
    git history (`git show REV:results/...`)."""
    out = set()
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,;:")
        after = text[m.end(1):m.end(1) + 8]
        in_history = text[m.start(1) - 1:m.start(1)] == ":"  # `git show REV:path`
        if not re.match(r"[<{]|`? \(new", after) and p not in PATH_ROOTS and not in_history:
            out.add(p)
    return out


def path_exists(p: str) -> bool:
    """A path of the repository (a glob: one match at least); a module's path may be given
    under `src/wattlife/` (`config/sections.py`)."""
    if "*" in p:
        return any(REPO.glob(p.rstrip("/")))
    return (REPO / p).exists() or p.endswith(".py") and (SRC / p).is_file()


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken(page: Path) -> list[str]:
    """Every pointer of one page that does not exist, as `page: pointer (what)`."""
    text = page.read_text()
    bad = []
    code, short = pointers(text)
    for p in sorted(code):
        if not code_pointer_exists(p) and not planned(p):
            bad.append(f"{page.name}: {p} (no such module or name)")
    for s in sorted(short):
        head, ext = s.rsplit(".", 1)
        if ext == "py":
            if not (SRC / (head.replace(".", "/") + ".py")).is_file():
                bad.append(f"{page.name}: {s} (no such file in src/wattlife/)")
        elif ext not in FILE_EXTS and not code_pointer_exists("wattlife." + s) \
                and not schema_key_exists(s) and s not in _literals() and not meta_key_exists(s) \
                and not planned("wattlife." + s):
            bad.append(f"{page.name}: {s} (neither wattlife.{s} nor a schema key)")
    for p in sorted(path_pointers(text)):
        coming = p.startswith("src/") and planned(
            p.removeprefix("src/").removesuffix(".py").replace("/", "."))
        if not path_exists(p) and not coming:
            bad.append(f"{page.name}: {p} (no such file)")
    for target in LINK.findall(text):
        if re.match(r"\w+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{page.name}: link {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.name}: link {target} (no such section)")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_pointer_of_the_page_exists(page: Path) -> None:
    assert page.is_file(), f"{page} is missing"
    assert broken(page) == []


#: the README and the result folders' pages (what was measured, and which test recomputes it)
RESULT_PAGES = [REPO / "README.md"] + sorted((REPO / "results").rglob("*.md"))
#: scripts a result page names as they were called when it was measured (renamed since; the page
#: gives the name of today)
RENAMED = {"benchmarks/h200_workflow.sh"}


@pytest.mark.parametrize("page", RESULT_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_a_result_page_names_exists(page: Path) -> None:
    """A test, script or file a result page points to (`tests/results/test_h100_reference.py`
    recomputes ...) exists: a reader who follows it finds it."""
    missing = sorted(p for p in path_pointers(page.read_text())
                     if not path_exists(p) and p not in RENAMED)
    assert missing == [], f"{page.relative_to(REPO)} names files that do not exist: {missing}"


def test_a_made_up_pointer_fails(tmp_path: Path) -> None:
    """The checks find a made-up module, name, class member, schema key, file and section."""
    page = tmp_path / "PAGE.md"
    (tmp_path / "OTHER.md").write_text("# Other\n\n## A section\n")
    page.write_text(
        "`wattlife.attribution.nonexistent`, wattlife.contracts.NO_SUCH_NAME,\n"
        "`sampler.Sampler.no_such_method`, `sampler.no_such_key`, `src/wattlife/nope.py`,\n"
        "[x](OTHER.md#no-section), [y](MISSING.md)\n"
        "and the real ones: `wattlife.attribution.integrate`, `sampler.Sampler`,\n"
        "`sampler.idle_baseline_s`, `rules/execute.smk`, [z](OTHER.md#a-section)\n")
    assert [b.split(": ", 1)[1] for b in broken(page)] == [
        "wattlife.attribution.nonexistent (no such module or name)",
        "wattlife.contracts.NO_SUCH_NAME (no such module or name)",
        "sampler.Sampler.no_such_method (neither wattlife.sampler.Sampler.no_such_method nor a "
        "schema key)",
        "sampler.no_such_key (neither wattlife.sampler.no_such_key nor a schema key)",
        "src/wattlife/nope.py (no such file)",
        "link OTHER.md#no-section (no such section)",
        "link MISSING.md (no such file)",
    ]


def test_planned_pointers_are_still_planned() -> None:
    """A planned registry that exists now is checked like any pointer: drop it from PLANNED."""
    arrived = sorted(p for p in PLANNED if code_pointer_exists(p))
    assert arrived == [], f"these exist now; remove them from PLANNED in {__file__}: {arrived}"
