"""Hygiene of the test suite itself (#51, #53): no process is ended by name, signals go only to
ids the test got from its own processes, every skip says why, and the `children` fixture really
ends a child together with the grandchild it started."""

import ast
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Children, gone, group_members

TESTS = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
# spelled in two halves so that this file does not match its own rule
BY_NAME = ("pk" + "ill", "kill" + "all")


def kill_by_name(text: str) -> list[int]:
    """Lines that name a kill-by-pattern tool (they could end other users' processes)."""
    return [i for i, line in enumerate(text.splitlines(), 1) if any(w in line for w in BY_NAME)]


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _said(node: ast.AST | None) -> bool:
    """A reason given in words: a non-empty string, or an f-string with some text in it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.strip() != ""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and str(v.value).strip() for v in node.values)
    return node is not None and not isinstance(node, ast.Constant)  # a name: its value is unknown


def skips_without_reason(tree: ast.AST) -> list[int]:
    """Lines of pytest.skip / pytest.mark.skip / pytest.mark.skipif without a reason in words
    (skipif: `reason=`; skip: its first argument or `reason=`); a bare `@pytest.mark.skip` too."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            kw = {k.arg: k.value for k in node.keywords}
            if name in ("pytest.mark.skipif", "mark.skipif"):
                ok = _said(kw.get("reason"))
            elif name in ("pytest.skip", "pytest.mark.skip", "mark.skip"):
                first = node.args[0] if node.args else None
                ok = _said(kw.get("reason", kw.get("msg", first)))
            else:
                continue
            if not ok:
                bad.append(node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bad += [d.lineno for d in node.decorator_list
                    if _dotted(d) in ("pytest.mark.skip", "pytest.mark.skipif")]
    return sorted(bad)


def signals_to_unknown_ids(tree: ast.AST) -> list[int]:
    """Lines of os.kill / os.killpg whose target is not a process's own id: allowed are `x.pid`
    (a Popen the test started) and a variable holding such an id; a literal (0 is the test
    runner's own group, -1 every process the user owns) or a call (os.getpgrp(), ...) is not."""
    bad = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and _dotted(node.func) in ("os.kill", "os.killpg")
                and node.args):
            target = node.args[0]
            ok = (isinstance(target, ast.Attribute) and target.attr == "pid") or \
                isinstance(target, ast.Name)
            if not ok:
                bad.append(node.lineno)
    return sorted(bad)


def _where(path: Path, lines: list[int]) -> list[str]:
    return [f"{path.relative_to(TESTS.parent)}:{n}" for n in lines]


def test_the_rules_catch_what_they_forbid():
    """Each rule flags a line that breaks it and passes one that keeps it."""
    assert kill_by_name(f"subprocess.run(['{BY_NAME[0]}', '-f', 'x'])\nok = 1\n") == [1]
    assert kill_by_name(f"ok = 1\nos.system('{BY_NAME[1]} python')\n") == [2]
    bad = ast.parse("import os, pytest\n"
                    "@pytest.mark.skipif(True)\ndef a(): pass\n"
                    "@pytest.mark.skipif(True, reason='')\ndef b(): pass\n"
                    "@pytest.mark.skip\ndef c(): pass\n"
                    "def d():\n    pytest.skip()\n"
                    "def e():\n    pytest.skip(' ')\n"
                    "os.killpg(0, 9)\nos.kill(-1, 9)\nos.killpg(os.getpgrp(), 9)\n")
    assert skips_without_reason(bad) == [2, 4, 6, 9, 11]
    assert signals_to_unknown_ids(bad) == [12, 13, 14]
    good = ast.parse("import os, pytest\n"
                     "@pytest.mark.skipif(True, reason='no GPU here')\ndef a(): pass\n"
                     "def d(exc):\n    pytest.skip(f'cannot serve ({exc})')\n"
                     "def e(why):\n    pytest.skip(reason=why)\n"
                     "def f(p, g):\n    os.killpg(p.pid, 15)\n    os.killpg(g, 9)\n")
    assert skips_without_reason(good) == [] and signals_to_unknown_ids(good) == []


def test_no_test_ends_processes_by_name():
    bad = [w for p in TESTS.rglob("*") if p.is_file() and "__pycache__" not in p.parts
           and p.suffix in (".py", ".sh", ".cfg", ".ini", ".toml", ".txt", "")
           for w in _where(p, kill_by_name(p.read_text(errors="replace")))]
    assert bad == [], f"kill by name (use the `children` fixture): {bad}"


def test_signals_go_only_to_the_tests_own_processes():
    bad = [w for p in SOURCES for w in _where(p, signals_to_unknown_ids(ast.parse(p.read_text())))]
    assert bad == [], f"signal sent to an id not taken from a started process: {bad}"


def test_every_skip_says_why():
    bad = [w for p in SOURCES for w in _where(p, skips_without_reason(ast.parse(p.read_text())))]
    assert bad == [], f"skip without a reason: {bad}"


GRANDPARENT = ("import subprocess, sys, time\nfrom pathlib import Path\n"
               "g = subprocess.Popen([sys.executable, '-c', {grand!r}])\n"
               "Path({out!r}).write_text(str(g.pid))\n"
               "time.sleep(600)\n")


@pytest.mark.parametrize("stubborn", [False, True])
def test_children_ends_a_child_and_the_grandchild_in_its_group(tmp_path, children, stubborn):
    """A child that starts a grandchild in its own process group: the fixture's cleanup
    (`Children.end_all`, called here directly; the fixture's teardown would call it too) leaves
    neither alive; a grandchild that ignores SIGTERM is ended by the SIGKILL that follows."""
    assert isinstance(children, Children)  # the class every test's children go through
    grand = "import time\ntime.sleep(600)\n"
    if stubborn:
        grand = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + grand
        children.grace_s = 1.0  # SIGTERM's wait before SIGKILL (the fixture's default is 5 s)
    out = tmp_path / "grandchild.pid"
    p = children.spawn([sys.executable, "-c", GRANDPARENT.format(grand=grand, out=str(out))],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out.exists() and out.read_text()):
        assert p.poll() is None and time.monotonic() < deadline, "the child did not start"
        time.sleep(0.05)
    gpid = int(out.read_text())
    assert sorted(group_members(p.pid)) == sorted([p.pid, gpid])  # one group, both alive
    if stubborn:  # SIGTERM ignored for real before cleanup starts (not raced by the handler)
        deadline = time.monotonic() + 120
        while "SigIgn" not in _ignored(gpid, signal.SIGTERM):
            assert time.monotonic() < deadline, "the grandchild never ignored SIGTERM"
            time.sleep(0.05)
    children.end_all()
    assert p.returncode is not None  # the child was reaped
    assert gone(p.pid, timeout=60) and gone(gpid, timeout=60)
    assert group_members(p.pid) == []
    assert children.procs == []


def _ignored(pid: int, sig: int) -> str:
    """"SigIgn" when process `pid` ignores `sig` (from /proc/<pid>/status), else ""."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return "SigIgn" if int(line.split()[1], 16) >> (sig - 1) & 1 else ""
    return ""

