"""Custody of a measurement on the CI Slurm (issue 39; `.ci/slurm-up.sh` starts it): the controller
(`--profile profiles/slurm`, a copy of the workflow in a temporary folder) is SIGKILLed, or its
terminal is lost, while its cell's Slurm job measures; the job carries on as an orphan. With the
README's recovery (`wattlife slurm-orphans RESULTS --wait`, `--unlock`, rerun) and with the naive
one (`--unlock`, rerun at once): the cell is measured once, by the orphan, its result published and
adopted, the tables count it once, and nothing is left to do."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import test_custody_workflow as W

from conftest import SLURM_POLL, SLURM_SNAKEMAKE, slurm_test_partition
from wattlife import custody as C

# only where the user opted in (WATTLIFE_TEST_SLURM=1, tests/conftest.py): nothing here asks a
# Slurm command at import; the partition is the CI cluster's (`debug`) unless the user names one
pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SITE = ["--profile", "profiles/slurm", "--config",
        f"slurm={{gpu_partition: {slurm_test_partition()}}}", "--slurm-status-command", "squeue",
        *SLURM_POLL]  # conftest.SLURM_POLL: how often the controller asks Slurm, nothing else


@pytest.fixture
def swf(tmp_path):
    """tests/custody/test_custody_workflow.py's copy of the workflow and its one-cell config."""
    return W.make_wf(tmp_path)


def slurm_snake(wf, *args, timeout=1500):
    return subprocess.run([*SLURM_SNAKEMAKE, *SITE, "--configfile",
                           str(wf["conf"]), *args, "--", str(wf["cell"] / "phases.csv")],
                          cwd=wf["wf"], env=wf["env"], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("readme, lost", [(True, False), (False, False), (False, True)],
                         ids=["slurm-orphans-wait", "naive", "lost-terminal-naive"])
def test_a_killed_slurm_controller_then_rerun_measures_the_cell_once(swf, readme, lost):
    """SIGKILL of the controller, or its terminal lost (a real pty hung up: SIGHUP to it and its
    process group)."""
    wf = swf
    argv = [*SITE, "--configfile", str(wf["conf"]), "--", str(wf["cell"] / "phases.csv")]
    term = W.Terminal(wf, "first", argv) if lost else None
    if term is None:
        log = open(wf["tmp"] / "first.log", "w")
    first = term.proc if term else subprocess.Popen(
        [sys.executable, "-m", "snakemake", *argv], cwd=wf["wf"], env=wf["env"], stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
        W.wait_for(lambda: W.in_flight(wf) or first.poll() is not None, "the cell's Slurm job", 900)
        assert first.poll() is None, (wf["tmp"] / "first.log").read_text()[-3000:]
        if term:
            term.hang_up()
            assert first.wait(60) == -signal.SIGHUP
        else:
            os.kill(first.pid, signal.SIGKILL)  # the controller only: its Slurm job carries on
            first.wait(60)
    finally:
        if term:
            term.hang_up()
        if first.poll() is None:
            first.kill()
            first.wait()
    orphan = re.findall(r"SLURM jobid (\d+)", (wf["tmp"] / "first.log").read_text())
    assert len(orphan) == 1
    if readme:
        waited = subprocess.run(["wattlife", "slurm-orphans", str(wf["res"]), "--wait",
                                 "--poll-s", "2"],
                                env=wf["env"], capture_output=True, text=True, timeout=900)
        assert waited.returncode == 0 and "safe to rerun" in waited.stdout, waited.stderr
    assert slurm_snake(wf, "--unlock", timeout=300).returncode == 0
    rerun = slurm_snake(wf)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    attempts = C.attempts_of(C.attempts_dir(wf["res"], W.CELL))
    assert len(attempts) == 1 and attempts[0].published  # the orphan's measurement, adopted
    assert attempts[0].seal["slurm"]["job_id"] == orphan[0]
    assert C.cell_problems(wf["cell"], ("phases.csv",)) == []
    again = slurm_snake(wf, "-n", timeout=300)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]
    new_jobs = re.findall(r"SLURM jobid (\d+)", rerun.stdout + rerun.stderr)
    how = ("lost terminal, " if lost else "") + ("README" if readme else "naive")
    print(f"{how} recovery on Slurm: measured {len(attempts)} (job "
          f"{orphan[0]}), published 1, spares 0, rerun's Slurm jobs {new_jobs}")
    W.wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", orphan[0]], capture_output=True,
                                        text=True).stdout.strip(), "the orphan to leave", 300)
