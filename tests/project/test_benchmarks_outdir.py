"""Benchmark scripts make their output folder before any GPU work, or refuse at start with one
line (issue 30): before, pfi_uncapped.py and execution_stage.py wrote into --out only after
their first run, and a missing folder lost minutes of device time."""

import re
import subprocess
import sys

import pytest

from conftest import REPO

BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))


def test_out_dir_makes_the_folder_or_exits_with_one_line(tmp_path):
    from outdir import out_dir

    assert out_dir(tmp_path / "a" / "b").is_dir()
    with pytest.raises(SystemExit, match=r"^--out /proc/wl-nope: cannot write there"):
        out_dir("/proc/wl-nope")


def test_every_script_with_an_output_folder_makes_it_first():
    takes_out = [p for p in sorted(BENCH.glob("*.py"))
                 if re.search(r'"--out"|sys\.argv\[1\]', p.read_text())]
    assert {p.name for p in takes_out} >= {"pfi_uncapped.py", "execution_stage.py",
                                           "attribution_checks.py", "peers_zeus.py", "gpu_smoke.py"}
    for p in takes_out:
        assert "out_dir(" in p.read_text(), p.name


def test_the_pfi_script_refuses_an_unwritable_folder_before_any_work():
    r = subprocess.run([sys.executable, str(BENCH / "pfi_uncapped.py"), "--out",
                        "/proc/wl-nope"], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "--out /proc/wl-nope: cannot write there (No such file or directory); nothing was run"]
