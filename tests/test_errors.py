"""One error hierarchy and logging: every error the user can act on is a `WattlifeError` of its
kind (the CLI says it in one line, anything else is a bug report), and diagnostics go through the
`wattlife` logger with the text the `print(..., file=sys.stderr)` lines wrote."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from wattlife import errors
from wattlife.diagnostics import LOGGER_NAME, StderrHandler, install

SRC = Path(__file__).resolve().parents[1] / "src" / "wattlife"
BARE = {"ValueError", "RuntimeError", "KeyError"}

#: (file under src/wattlife, innermost function) where a bare builtin is raised on purpose:
#: a programming error (no user input reaches it), or caught a few lines below and reworded
ALLOWED_BARE_RAISES = {
    # method and response come from code (the CLI's --method has argparse choices): misuse
    ("attribution/energy.py", "attribute_energy"),
    # caught by `except (ValueError, OverflowError)` below: find every bad cell on the strings
    ("check/reading.py", "_parse_typed"),
    # caught by `except (KeyError, TypeError, ValueError, AttributeError)` below, reworded
    ("devices/powercap.py", "read_state"),
    # the MILP solver failing on a library the code built: a bug to report, not the user's
    ("analysis/allocation.py", "_oracle_milp"),
    # a registry declaration breaking the registry's rules: the extension's developer's mistake,
    # raised when the package is imported (a bug report, never a user's input)
    ("contracts/sources.py", "__post_init__"), ("contracts/sources.py", "register_source"),
    ("contracts/sources.py", "declare_backend"), ("contracts/kinds.py", "__post_init__"),
    ("devices/registry.py", "register_backend"), ("devices/registry.py", "_check"),
    # rows handed to the tree windows by code, not read from a user's file (`start_ordered`'s
    # blocks): rows out of start order are the caller's bug
    ("attribution/tree_windows.py", "_in_start_order"),
    # windows not as `tree_windows` gives them, or a count of columns not the one summed: the
    # calling code's bug (no user input reaches either)
    ("attribution/exclusive_windows.py", "feed"), ("attribution/exact_sum.py", "add"),
}
#: (file, innermost class or function) writing to stderr without the logger on purpose
ALLOWED_STDERR_WRITES = {
    # argparse's own exit protocol (usage errors before a command runs), one line
    ("cli/options.py", "exit"),
}


def _scopes(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node's innermost enclosing function (or "<module>")."""
    out: dict[ast.AST, str] = {}

    def walk(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else scope
            out[child] = inner
            walk(child, inner)

    walk(tree, "<module>")
    return out


def _is_stderr(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "stderr"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def offences(root: Path) -> tuple[set[tuple[str, str, int]], set[tuple[str, str, int]]]:
    """(bare builtin raises, stderr prints/writes) under `root`: (file, function, line)."""
    raises, prints = set(), set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        scope = _scopes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                    and isinstance(node.exc.func, ast.Name) and node.exc.func.id in BARE:
                raises.add((rel, scope[node], node.lineno))
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            to_stderr = (isinstance(f, ast.Name) and f.id == "print"
                         and any(k.arg == "file" and _is_stderr(k.value) for k in node.keywords))
            writes = isinstance(f, ast.Attribute) and f.attr == "write" and _is_stderr(f.value)
            if to_stderr or writes:
                prints.add((rel, scope[node], node.lineno))
    return raises, prints


def test_no_bare_builtin_raise_nor_stderr_print_outside_the_allowlist():
    """A user's mistake raised as a bare ValueError would read as a bug; a print to stderr
    would bypass the logger (its level, its one destination)."""
    raises, prints = offences(SRC)
    assert {(f, fn) for f, fn, _ in raises} - ALLOWED_BARE_RAISES == set(), sorted(raises)
    assert {(f, fn) for f, fn, _ in prints} - ALLOWED_STDERR_WRITES == set(), sorted(prints)
    # the allowlist holds no entry that no longer exists (it shrinks with the code)
    assert ALLOWED_BARE_RAISES <= {(f, fn) for f, fn, _ in raises}
    assert ALLOWED_STDERR_WRITES <= {(f, fn) for f, fn, _ in prints}


def test_the_scanner_finds_what_it_forbids(tmp_path):
    (tmp_path / "m.py").write_text(
        "import sys\n"
        "def f(x):\n    if x:\n        raise ValueError('bad')\n    raise RuntimeError('no')\n"
        "def g():\n    print('note', file=sys.stderr)\n    sys.stderr.write('x')\n"
        "    print('table')\n    raise errors.InputError('fine')\n")
    raises, prints = offences(tmp_path)
    assert raises == {("m.py", "f", 4), ("m.py", "f", 5)}
    assert prints == {("m.py", "g", 7), ("m.py", "g", 8)}


@pytest.mark.parametrize(("name", "kind", "builtin"), [
    ("wattlife.config.loading.ConfigError", errors.InputError, ValueError),
    ("wattlife.config.ConfigError", errors.InputError, ValueError),
    ("wattlife.figures.common.NothingToDraw", errors.InputError, ValueError),
    ("wattlife.simgpu_model.CapRefused", errors.InputError, ValueError),
    ("wattlife.contracts.ContractError", errors.ContractError, ValueError),
    ("wattlife.pathlock.PathBusy", errors.SetupError, RuntimeError),
    ("wattlife.prepare.fetch.FetchError", errors.SetupError, RuntimeError),
    ("wattlife.sweeps.failures.InfrastructureFailure", errors.SetupError, RuntimeError),
    ("wattlife.devices.base.SensorUnavailable", errors.SensorError, RuntimeError),
    ("wattlife.devices.powercap.PowerCapError", errors.SensorError, RuntimeError),
])
def test_each_error_class_keeps_its_name_and_builtin_base_under_its_kind(name, kind, builtin):
    import importlib

    module, _, cls_name = name.rpartition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    assert issubclass(cls, kind) and issubclass(cls, errors.WattlifeError)
    assert issubclass(cls, builtin)  # `except ValueError` / `except RuntimeError` still catch it


def test_the_stream_signal_is_no_user_error():
    """`StreamUnreadable` tells a reader to fall back to `read_trace`, and is always caught: one
    reaching the CLI is a bug, reported as one."""
    from wattlife.contracts import StreamUnreadable

    assert not issubclass(StreamUnreadable, errors.WattlifeError)


def test_a_logged_diagnostic_is_the_printed_line_on_the_current_stderr(capsys):
    """Byte-identical to `print(text, file=sys.stderr)`, on the stderr of the moment (a test's
    capture, `script_log`'s file), once, and not passed to the root logger's handlers."""
    install()
    root = logging.getLogger()
    seen: list[logging.LogRecord] = []
    spy = logging.Handler()
    spy.emit = seen.append  # type: ignore[method-assign]
    root.addHandler(spy)
    try:
        logging.getLogger("wattlife.safewrite").warning("wattlife trace: cannot append x: full")
        logging.getLogger("wattlife.slurm_site").info("wattlife: slurm step {\"a\": 1}")
        logging.getLogger("elsewhere").warning("not ours")
    finally:
        root.removeHandler(spy)
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("wattlife trace: cannot append x: full\n"
                              "wattlife: slurm step {\"a\": 1}\n")
    assert [r.name for r in seen] == ["elsewhere"]
    handlers = logging.getLogger(LOGGER_NAME).handlers
    assert sum(isinstance(h, StderrHandler) for h in handlers) == 1


def test_debug_shows_debug_records_and_the_default_hides_them(capsys, tmp_path):
    from wattlife.cli import main

    log = logging.getLogger("wattlife.analysis.aggregate")
    assert main(["--debug", "check", str(tmp_path), "--kind", "none"]) == 1  # nothing to check
    capsys.readouterr()
    log.debug("a debug note")
    assert capsys.readouterr().err == "a debug note\n"
    assert main(["check", str(tmp_path), "--kind", "none"]) == 1
    capsys.readouterr()
    log.debug("hidden")
    assert capsys.readouterr().err == ""
