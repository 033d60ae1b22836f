"""Tests are guests: the suite submits to no Slurm it did not start, and leaves the checkout's
results/, data/ and .snakemake/ as they were (each Snakemake run works on a copy of the
workflow)."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import REPO, checkout_listing, copy_workflow, listing_changes

SLURM_COMMANDS = ("sbatch", "srun", "salloc", "sinfo", "squeue", "scontrol", "scancel", "sacct",
                  "sacctmgr", "slurmctld", "slurmd")


def _recording_slurm(bindir: Path, log: Path) -> None:
    """Every Slurm command on PATH records its call; scontrol and sinfo answer as a live cluster
    with the partition `debug` would (so nothing is skipped for want of an answer)."""
    bindir.mkdir()
    answers = {"scontrol": "echo 'Slurmctld(primary) at host is UP'",
               "sinfo": "echo '4 8000'", "sbatch": "echo 'Submitted batch job 7'; exit 1"}
    for name in SLURM_COMMANDS:
        (bindir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {log}\n'
                                   f'{answers.get(name, "exit 0")}\n')
        (bindir / name).chmod(0o755)


def _slurm_tests(tmp_path: Path, opt_in: bool) -> tuple[list[str], str]:
    """tests/workflow/test_slurm.py and tests/test_slurm_nodes.py (collection, gating and, where
    they run, one test) in a subprocess with recording Slurm commands first on PATH; the recorded
    calls and pytest's output."""
    log = tmp_path / "slurm-calls.log"
    _recording_slurm(tmp_path / "bin", log)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATTLIFE_TEST_SLURM")}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}" \
                  f"{env['PATH']}"
    if opt_in:
        env["WATTLIFE_TEST_SLURM"] = "1"
    tests = (["tests/workflow/test_slurm.py", "tests/test_slurm_nodes.py"] if not opt_in else
             ["tests/test_slurm_nodes.py::test_a_measuring_step_holds_every_cpu_and_all_memory_"
              "of_any_node"])
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          *tests], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    calls = log.read_text().splitlines() if log.exists() else []
    return calls, out.stdout + out.stderr


def test_no_slurm_command_is_called_without_the_opt_in(tmp_path):
    calls, out = _slurm_tests(tmp_path, opt_in=False)
    assert calls == [], calls
    assert "8 skipped" in out and "WATTLIFE_TEST_SLURM=1 not set" in out, out[-2000:]


def test_with_the_opt_in_the_slurm_tests_do_submit(tmp_path):
    """The other side: the gate is the opt-in, and the recorder does see a submission."""
    calls, out = _slurm_tests(tmp_path, opt_in=True)
    assert any(c.startswith("sbatch --wait --exclusive -p debug") for c in calls), (calls, out)


def test_the_checkout_guard_sees_a_new_file_and_a_changed_one(tmp_path):
    root = tmp_path / "checkout"
    (root / "results" / "reference").mkdir(parents=True)
    (root / "results" / "reference" / "a.csv").write_text("x\n")
    before = checkout_listing(root)
    (root / ".snakemake" / "log").mkdir(parents=True)
    (root / "results" / "reference" / "a.csv").write_text("x,y\n")
    changed = listing_changes(before, checkout_listing(root))
    assert changed == [".snakemake", ".snakemake/log", "results/reference/a.csv"], changed


def test_a_workflow_copy_runs_snakemake_outside_the_checkout(tmp_path, env_path):
    wf = copy_workflow(tmp_path / "wf")
    assert not (wf / "config" / "schema.yaml").is_symlink()  # the links resolved: a plain copy
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"], cwd=wf,
                         env=env_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (wf / ".snakemake").is_dir()


def test_no_test_asserts_a_duration_and_the_time_out_only_guards_hangs():
    """Speed is measured in benchmarks/, never asserted by a test (a loaded machine fails it)."""
    timed = re.compile(r"assert .*(monotonic|perf_counter|time\.time)\(\) - ")
    found = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "tests").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if timed.search(line)]
    assert found == [], found
    opts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert opts["timeout"] >= 3600
    marks = [p.name for p in (REPO / "tests").rglob("*.py") if "mark.timeout(" in p.read_text()
             and p.name != "test_guests.py"]
    assert marks == [], marks
