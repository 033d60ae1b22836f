"""No process started by `wattlife run` outlives it (issue #29), whatever kills wattlife (SIGKILL,
SIGTERM, SIGINT to wattlife alone) and however CMD launches the workload: a `bash -c` wrapper, a
wrapper script, a Python parent whose children move to new sessions (as torchrun's workers do), a
double-forked daemon (orphaned while wattlife runs), torchrun itself with a data-loader-like child.
Every process is ended by id at teardown."""

import importlib.util
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import alive, gone

# A workload of `depth` + 1 processes: each writes its pid, starts the next (in a new session if
# asked), the last one says ready; all then loop until killed.
TREE = """import os, subprocess, sys, time
from pathlib import Path
d, depth, new_session = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
(d / f"pid.{os.getpid()}").write_text(str(os.getpid()))
if depth > 0:
    subprocess.Popen([sys.executable, __file__, str(d), str(depth - 1), *sys.argv[3:]],
                     start_new_session=new_session)
    if depth == 1 and sys.argv[4:] == ["daemon"]:  # a double fork: the last one is orphaned
        sys.exit(0)
else:
    (d / "ready").touch()
while True:
    time.sleep(0.05)
"""
SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


def _launchers(tmp_path: Path) -> dict[str, list[str]]:
    tree = tmp_path / "tree.py"
    tree.write_text(TREE)
    py, d = sys.executable, str(tmp_path)
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\n'{py}' '{tree}' '{d}' 1 0\necho finished\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return {
        "bash-c": ["bash", "-c", f"'{py}' '{tree}' '{d}' 1 0; true"],
        "wrapper-script": [str(wrapper)],
        "new-session-grandchildren": [py, str(tree), d, "2", "1"],
        "daemon": [py, str(tree), d, "2", "1", "daemon"],
        "torchrun": [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                     str(tree), d, "1", "0"],
    }


def _pids(tmp_path: Path) -> list[int]:
    return [int(p.read_text()) for p in tmp_path.glob("pid.*") if p.read_text()]


@pytest.fixture
def workload_pids(tmp_path):
    """At teardown, every workload process still alive is SIGKILLed by id (the test has failed)."""
    yield lambda: _pids(tmp_path)
    for pid in _pids(tmp_path):
        if not gone(pid, timeout=0.1):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _check(tmp_path, env_path, children, workload_pids, kind, sig, timeout=120.0):
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(tmp_path / "trace.csv"),
           "--events", str(tmp_path / "events.csv"), "--gpu", "none", "--cpu", "none",
           "--idle-s", "0", "--", *_launchers(tmp_path)[kind]]
    from wattlife.guardian import SCAN_LOG_ENV

    scans = tmp_path / "guardian-scans.log"
    p = children.spawn(cmd, env={**env_path, SCAN_LOG_ENV: str(scans)},
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while not (tmp_path / "ready").exists():
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, "the workload never became ready"
        time.sleep(0.05)
    pids = workload_pids()
    assert len(pids) >= 2
    if kind == "daemon":  # the orphan is known to the guardian from its scans only: wait for a
        # scan that recorded every workload process (no sleep sized for the machine's speed)
        def recorded() -> bool:
            running = {pid for pid in workload_pids() if alive(pid)}  # the middle one exits
            lines = scans.read_text().splitlines() if scans.exists() else []
            return bool(lines) and running <= {int(x) for x in lines[-1].split()}

        while not recorded():
            assert time.monotonic() < deadline, "the guardian never recorded the workload"
            time.sleep(0.05)
    p.send_signal(sig)  # to wattlife alone, not to its group
    p.wait(timeout=60)
    left = [pid for pid in pids if not gone(pid, timeout=15)]
    assert not left, f"{kind}: {len(left)} of {len(pids)} workload processes outlived wattlife"


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("kind", ["bash-c", "wrapper-script", "new-session-grandchildren",
                                  "daemon"])
def test_no_workload_process_outlives_wattlife(tmp_path, env_path, children, workload_pids,
                                               kind, sig):
    _check(tmp_path, env_path, children, workload_pids, kind, sig)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_no_torchrun_worker_outlives_wattlife(tmp_path, env_path, children, workload_pids, sig):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: no torchrun to launch")
    _check(tmp_path, env_path, children, workload_pids, "torchrun", sig)


def test_guardian_ends_a_recorded_tree_when_its_wattlife_dies(tmp_path, children, workload_pids):
    """The guardian alone: its 'wattlife' (a sleeping parent) is SIGKILLed right after saying
    which CMD to watch; CMD's tree, a process in a new session below it included, is ended."""
    from wattlife import guardian

    tree = tmp_path / "tree.py"
    tree.write_text(TREE)
    src = str(Path(guardian.__file__).parents[1])
    parent = (f"import subprocess, sys, time\nsys.path.insert(0, {src!r})\n"
              "from wattlife.guardian import Guardian\ng = Guardian(set())\n"
              f"p = subprocess.Popen([sys.executable, {str(tree)!r}, {str(tmp_path)!r}, '2', "
              "'1'])\ng.watch(p.pid)\ntime.sleep(300)\n")
    scans = tmp_path / "guardian-scans.log"
    p = children.spawn([sys.executable, "-c", parent],
                       env={**os.environ, guardian.SCAN_LOG_ENV: str(scans)})
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pids = workload_pids()
    assert len(pids) == 3
    while not (scans.exists() and scans.read_text().splitlines()
               and set(pids) <= {int(x) for x in scans.read_text().splitlines()[-1].split()}):
        assert time.monotonic() < deadline, "no scan of the guardian saw the whole tree"
        time.sleep(0.05)
    p.kill()
    p.wait()
    assert all(gone(pid, timeout=15) for pid in pids)
