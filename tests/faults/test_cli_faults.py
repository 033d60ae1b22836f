"""Every command under bad input or a fault: one line naming the file/option, a non-zero exit,
no traceback (unless --debug / WATTLIFE_DEBUG=1), nothing partial at the final path, no input
overwritten."""

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from synth import T0, events_frame, trace_frame
from wattlife import cli
from wattlife.cli import main
from wattlife.config import ConfigError, load_config
from wattlife.contracts import atomic_path, write_csv
from wattlife.errors import (
    EXIT_BUG,
    EXIT_USER,
    ContractError,
    InputError,
    SensorError,
    SetupError,
)

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000


def _one_line(capsys, rc_expected=2, rc=None) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def files(tmp_path):
    """A small, valid set of inputs: trace, events, curves, pfi, phases, a record, a config."""
    t = T0 + np.arange(101) * 10 * MS
    trace_frame(t, np.full(101, 100.0)).to_csv(tmp_path / "trace.csv", index=False)
    events_frame([("forward", T0, T0 + 500 * MS)]).to_csv(tmp_path / "events.csv", index=False)
    rows = [{"job": f"j{j}", "gpu_model": "H200", "n_gpus": 8, "cap_w": c,
             "throughput": 100 * (c / 700) ** (0.3 + 0.2 * j), "throughput_unit": "tokens/s",
             "power_w": 7.6 * c, "source": "sim"} for j in range(3) for c in (200, 400, 700)]
    pd.DataFrame(rows).to_csv(tmp_path / "curves.csv", index=False)
    pd.DataFrame({"job": ["j0", "j1", "j2"], "pfi": [1.2, 1.4, 1.6]}).to_csv(tmp_path / "pfi.csv",
                                                                           index=False)
    return tmp_path


OVERWRITE_CASES = {
    "pfi": lambda d: ["pfi", f"{d}/curves.csv", "-o", f"{d}/curves.csv"],
    "allocate": lambda d: ["allocate", f"{d}/curves.csv", "-o", f"{d}/curves.csv"],
    "predict": lambda d: ["predict", f"{d}/curves.csv", "--pfi", f"{d}/pfi.csv", "-o",
                          f"{d}/pfi.csv"],
    "calibrate-sim": lambda d: ["calibrate-sim", f"{d}/curves.csv", "--tdp", "700", "-o",
                                f"{d}/curves.csv"],
    "aggregate-curves": lambda d: ["aggregate-curves", f"{d}/curves.csv", f"{d}/pfi.csv", "-o",
                                   f"{d}/pfi.csv"],
    "attribute": lambda d: ["attribute", "--trace", f"{d}/trace.csv", "--events", f"{d}/events.csv",
                            "-o", f"{d}/events.csv"],
    "merge-nodes": lambda d: ["merge-nodes", "--traces", f"{d}/trace.csv", "--events",
                              f"{d}/events.csv", "--trace", f"{d}/trace.csv", "--events-out",
                              f"{d}/m.csv"],
    "fetch": lambda d: ["fetch", "--path", f"{d}/curves.csv", "-o", f"{d}/curves.csv"],
    "sweep": lambda d: ["sweep", "--config", f"{d}/curves.csv", "-o", f"{d}/curves.csv"],
}


@pytest.mark.parametrize("cmd", sorted(OVERWRITE_CASES))
def test_an_output_equal_to_an_input_is_refused(files, capsys, cmd):
    """Before: -o equal to an input silently overwrote raw data."""
    before = {p.name: p.read_bytes() for p in files.iterdir()}
    assert main(OVERWRITE_CASES[cmd](files)) == 2
    assert "also an input" in _one_line(capsys)
    assert {p.name: p.read_bytes() for p in files.iterdir()} == before


MISSING_CASES = [
    ["attribute", "--trace", "{d}/no.csv", "--events", "{d}/events.csv", "-o", "{d}/o.csv"],
    ["pfi", "{d}/no.csv", "-o", "{d}/o.csv"],
    ["allocate", "{d}/no.csv", "-o", "{d}/o.csv"],
    ["predict", "{d}/curves.csv", "--pfi", "{d}/no.csv", "-o", "{d}/o.csv"],
    ["calibrate-sim", "{d}/no.csv", "--tdp", "700"],
    ["sweep", "--config", "{d}/no.csv", "-o", "{d}/o.csv"],
    ["pfi-sweep", "--config", "{d}/no.csv", "--cell", "x", "--cap", "500", "-o", "{d}/o.csv"],
    ["aggregate", "{d}/no.csv", "-o", "{d}/tables"],
    ["aggregate-curves", "{d}/no.csv", "-o", "{d}/o.csv"],
    ["figures", "{d}/no", "-o", "{d}/figs"],
    ["gen-catalogue", "{d}/no.csv", "-o", "{d}/cat"],
    ["prepare-tables", "--config", "{d}/no.csv", "--records", "{d}/r.json", "-o", "{d}/t"],
    ["merge-nodes", "--traces", "{d}/no.csv", "--events", "{d}/events.csv", "--trace", "{d}/t.csv",
     "--events-out", "{d}/e.csv"],
    ["fetch", "--path", "{d}/no.csv", "-o", "{d}/o.csv"],
    ["upload", "{d}/no.csv", "--copy", "{d}/o.csv"],
    ["train", "--config", "{d}/no.csv", "--workload", "w", "--workdir", "{d}/w"],
]


@pytest.mark.parametrize("args", MISSING_CASES, ids=[a[0] for a in MISSING_CASES])
def test_a_missing_input_is_one_line_naming_it(files, capsys, args):
    assert main([a.format(d=files) for a in args]) == 2
    line = _one_line(capsys)
    assert f"wattlife {args[0]}: error:" in line and ("no.csv" in line or "/no" in line)
    assert not (files / "o.csv").exists()


@pytest.mark.parametrize("cmd", ["pfi", "attribute", "aggregate-curves", "calibrate-sim"])
def test_an_output_onto_a_directory_is_one_line(files, capsys, cmd):
    (files / "out").mkdir()
    args = {"pfi": ["pfi", f"{files}/curves.csv", "-o", f"{files}/out"],
            "attribute": ["attribute", "--trace", f"{files}/trace.csv", "--events",
                          f"{files}/events.csv", "-o", f"{files}/out"],
            "aggregate-curves": ["aggregate-curves", f"{files}/curves.csv", "-o", f"{files}/out"],
            "calibrate-sim": ["calibrate-sim", f"{files}/curves.csv", "--tdp", "700", "-o",
                              f"{files}/out"]}[cmd]
    assert main(args) == 2
    assert "out: is a directory" in _one_line(capsys)
    assert list((files / "out").iterdir()) == []


@pytest.mark.parametrize("target", ["/proc/wattlife-faults/o.csv", "{d}/curves.csv/o.csv"],
                         ids=["unwritable-filesystem", "parent-is-a-file"])
def test_an_unwritable_output_is_one_line(files, capsys, target):
    out = target.format(d=files)
    assert main(["pfi", f"{files}/curves.csv", "-o", out]) == 2
    line = _one_line(capsys)
    assert out.rsplit("/", 1)[0] in line
    assert ".tmp" not in line  # the path named is the user's, not the temporary one


def test_nothing_partial_is_left_at_the_final_path(tmp_path):
    """A writer that fails half way: the old file stays whole and no temporary file remains."""
    final = tmp_path / "table.csv"
    final.write_text("old,complete\n1,2\n")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with atomic_path(final) as tmp:
            tmp.write_text("half a ta")
            raise Boom()
    assert final.read_text() == "old,complete\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    write_csv(pd.DataFrame({"a": [1]}), final)
    assert final.read_text() == "a\n1\n"


def test_figures_from_a_missing_or_empty_folder_fail(tmp_path, capsys):
    """Before: exit 0 having drawn nothing."""
    assert main(["figures", str(tmp_path / "nothere"), "-o", str(tmp_path / "figs")]) == 2
    assert "nothere: no such folder of tables" in _one_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main(["figures", str(tmp_path / "empty"), "-o", str(tmp_path / "figs")]) == 2
    assert "no table to draw from" in _one_line(capsys)


def test_a_matrix_naming_an_undefined_workload_names_the_key(tmp_path, capsys):
    """Before: a KeyError traceback."""
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["execution"]["workloads"] = ["resnet", "bert"]
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError,
                       match=r"execution.workloads\[1\]: workload 'bert' is not defined"):
        load_config(p)
    assert main(["gen-catalogue", str(p), "-o", str(tmp_path / "cat")]) == 2
    assert "execution.workloads[1]" in _one_line(capsys)


def test_malformed_json_is_named(files, capsys):
    (files / "meta.json").write_text('{"run_id": "r",\n "cell": }')
    assert main(["attribute", "--trace", f"{files}/trace.csv", "--events", f"{files}/events.csv",
                 "-o", f"{files}/ph.csv"]) == 2
    assert "meta.json:2:" in _one_line(capsys)
    (files / "rec.json").write_text("{not json")
    assert main(["prepare-tables", "--config", str(REPO / "config/config.yaml"), "--records",
                 f"{files}/rec.json", "-o", f"{files}/t"]) == 2
    assert "rec.json:1:" in _one_line(capsys)


def _with_pfi(monkeypatch, fn) -> None:
    """`wattlife pfi` runs `fn` instead of its command."""
    parser = cli.build_parser

    def patched():
        p = parser()
        sub = next(x for x in p._actions if x.dest == "command")
        sub.choices["pfi"].set_defaults(fn=fn)
        return p

    monkeypatch.setattr(cli, "build_parser", patched)


def test_an_internal_error_is_a_bug_report_and_debug_gives_the_traceback(files, capsys,
                                                                         monkeypatch, tmp_path):
    """Before: a bug was one line like a user's mistake (exit 1, a bare ValueError exit 2)."""
    def broken(a):
        return 1 / 0

    _with_pfi(monkeypatch, broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    args = ["pfi", f"{files}/curves.csv", "-o", f"{files}/o.csv"]
    assert main(args) == EXIT_BUG == 70
    err = capsys.readouterr().err
    assert "Traceback" not in err and "wattlife pfi: error:" not in err, err
    lines = err.strip().splitlines()
    assert lines[0] == "wattlife pfi: internal error: ZeroDivisionError: division by zero", err
    assert f"wattlife pfi: command: wattlife pfi {files}/curves.csv -o {files}/o.csv" in lines
    assert "this is a bug in wattlife, please report it" in lines[-1]
    where = next(ln.split("traceback: ", 1)[1] for ln in lines if "traceback: " in ln)
    text = Path(where).read_text()
    assert Path(where).parent == tmp_path and "Traceback" in text and "1 / 0" in text, text
    with pytest.raises(ZeroDivisionError):
        main(["--debug"] + args)
    monkeypatch.setenv("WATTLIFE_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(args)


def test_a_bug_report_without_a_writable_temp_folder_shows_the_traceback(files, capsys,
                                                                         monkeypatch, tmp_path):
    _with_pfi(monkeypatch, lambda a: 1 / 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "absent"))
    assert main(["pfi", f"{files}/curves.csv", "-o", f"{files}/o.csv"]) == EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err, err
    assert "traceback: " not in err and "please report it" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("exc", [ValueError("x"), KeyError("x"), RuntimeError("x")])
def test_a_bare_builtin_error_is_a_bug_not_bad_input(files, capsys, monkeypatch, tmp_path, exc):
    """Before: ValueError, KeyError and RuntimeError read as the user's mistake (exit 2)."""
    def broken(a):
        raise exc

    _with_pfi(monkeypatch, broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["pfi", f"{files}/curves.csv", "-o", f"{files}/o.csv"]) == EXIT_BUG
    err = capsys.readouterr().err
    assert f"internal error: {type(exc).__name__}" in err and "please report it" in err, err


@pytest.mark.parametrize("exc", [InputError("--x 3: expected 1..2"),
                                 ContractError("t.csv, line 2: empty t_ns"),
                                 SetupError("squeue failed: is Slurm reachable from here?"),
                                 SensorError("no GPU answers"), ConfigError("a.yaml: key x")])
def test_a_wattlife_error_is_one_line_and_exit_2(files, capsys, monkeypatch, exc):
    def refused(a):
        raise exc

    _with_pfi(monkeypatch, refused)
    assert main(["pfi", f"{files}/curves.csv", "-o", f"{files}/o.csv"]) == EXIT_USER == 2
    assert capsys.readouterr().err == f"wattlife pfi: error: {exc}\n"


def test_the_installed_entry_point_prints_no_traceback(tmp_path):
    """The real process: one line on stderr, exit 2; --debug shows the traceback."""
    args = [sys.executable, "-m", "wattlife.cli", "pfi", str(tmp_path / "no.csv"), "-o",
            str(tmp_path / "o.csv")]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"wattlife pfi: error: {tmp_path / 'no.csv'}: no such file or directory"]
    out = subprocess.run(args[:3] + ["--debug"] + args[3:], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "Traceback" in out.stderr


def test_a_bad_option_value_names_the_option(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pfi", "c.csv", "-o", "o.csv", "--grid", "200,abc"])
    assert exc.value.code == 2
    assert "--grid" in capsys.readouterr().err


def test_an_undefined_workload_or_cell_names_the_option(tmp_path, capsys):
    assert main(["train", "--config", str(REPO / "config/config.yaml"), "--workload", "bert",
                 "--workdir", str(tmp_path / "w")]) == 2
    assert "--workload bert: not a key of" in _one_line(capsys)
    assert main(["pfi-sweep", "--config", str(REPO / "config/config.yaml"), "--cell", "x", "--cap",
                 "500", "-o", str(tmp_path / "c.csv")]) == 2
    assert "pfi_matrix.cells: missing" in _one_line(capsys)
    assert not (tmp_path / "w").exists()
