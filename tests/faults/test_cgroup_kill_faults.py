"""`wattlife run` SIGKILLed by pid together with its guardian, at the same moment (issue 41): where
the machine offers a writable cgroup v2 with `cgroup.kill`, CMD's tree is in a cgroup of its own
and the sentinel (a third small process) kills it; no workload process outlives the run. Killing
all three at once is the limit: the next `wattlife run` in that cgroup ends the leftovers and
says so.

Before: the workload tree went on running (and appending to events.csv) for ever.
Every process the test starts is ended by id at teardown; the cgroups it leaves are removed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import alive, gone

sys.path.insert(0, str(Path(__file__).parent))
from test_process_tree_faults import TREE, _pids  # noqa: E402


def _cgroup_writable() -> bool:
    from wattlife.workload_cgroup import WorkloadCgroup

    cg, _ = WorkloadCgroup.create()
    if cg is None:
        return False
    cg.remove()
    return True


pytestmark = pytest.mark.skipif(not _cgroup_writable(),
                                reason="no writable cgroup v2 with cgroup.kill here")


def _helpers(wattlife_pid: int) -> dict[str, int]:
    """The guardian and the sentinel: wattlife's children running this package's guardian.py."""
    from wattlife.guardian import proc_table

    out = {}
    for pid, row in proc_table().items():
        if row[0] != wattlife_pid:
            continue
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words[1:3] == [b"-S", words[2]] and words[2].startswith(b"/dev/fd/"):
            out["sentinel" if words[3:4] == [b"--sentinel"] else "guardian"] = pid
    return out


@pytest.fixture
def workload(tmp_path):
    started: list[int] = []
    yield tmp_path, started
    for pid in _pids(tmp_path) + started:  # the test has failed if any is alive: end it by id
        if not gone(pid, timeout=0.1):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    from wattlife.workload_cgroup import leftovers, parent_dir, remove_cgroup

    parent, _ = parent_dir()
    for cg in leftovers(parent) if parent else []:
        remove_cgroup(cg)


def _start(d: Path, children, env_path) -> tuple[subprocess.Popen, dict[str, int]]:
    (d / "tree.py").write_text(TREE)
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(d / "trace.csv"),
           "--events", str(d / "events.csv"), "--gpu", "none", "--cpu", "none", "--idle-s", "0",
           "--", sys.executable, str(d / "tree.py"), str(d), "2", "1"]
    p = children.spawn(cmd, env=env_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (d / "ready").exists():
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, "the workload never became ready"
        time.sleep(0.05)
    helpers = _helpers(p.pid)
    assert set(helpers) == {"guardian", "sentinel"}, helpers
    return p, helpers


def test_killing_wattlife_and_its_guardian_together_leaves_no_workload(workload, env_path,
                                                                       children):
    d, started = workload
    p, helpers = _start(d, children, env_path)
    started.extend(helpers.values())
    pids = _pids(d)
    assert len(pids) == 3 and all(alive(q) for q in pids)
    for q in (p.pid, helpers["guardian"]):
        os.kill(q, signal.SIGKILL)
    p.wait(timeout=60)
    left = [pid for pid in pids if not gone(pid, timeout=15)]
    assert not left, f"{len(left)} of {len(pids)} workload processes outlived wattlife"
    assert gone(helpers["sentinel"], timeout=15), "the sentinel did not exit after acting"
    from wattlife.workload_cgroup import leftovers, parent_dir

    parent, _ = parent_dir()
    assert parent is not None and not leftovers(parent), "the run's cgroup was not removed"


def test_all_three_killed_the_next_run_ends_the_leftovers(workload, env_path, children):
    d, started = workload
    p, helpers = _start(d, children, env_path)
    started.extend(helpers.values())
    pids = _pids(d)
    # all three stopped first, then killed: killed one by one, the sentinel would see wattlife's
    # pipe close and act before its own SIGKILL came (a race of the test, not the limit it shows)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for q in (helpers["sentinel"], helpers["guardian"], p.pid):
            os.kill(q, sig)
    p.wait(timeout=60)
    assert all(alive(q) for q in pids)  # the stated limit: nothing of the run is left to act
    nxt = subprocess.run(
        [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(d / "t2.csv"), "--events",
         str(d / "e2.csv"), "--gpu", "none", "--cpu", "none", "--idle-s", "0", "--", "true"],
        env=env_path, capture_output=True, text=True, timeout=120)
    assert nxt.returncode == 0, nxt.stderr
    assert "ended 3 process(es) left by a killed wattlife run" in nxt.stderr, nxt.stderr
    left = [pid for pid in pids if not gone(pid, timeout=15)]
    assert not left, f"{len(left)} of {len(pids)} workload processes outlived the next run"
