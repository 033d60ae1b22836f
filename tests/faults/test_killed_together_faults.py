"""`wattlife run` killed together with everything that names wattlife on its command line (what
a SIGKILL by the pattern 'wattlife' does; emulated by pid, on this test's own processes only): no
workload process outlives it. The guardian's command line does not name wattlife
(`python -S /dev/fd/N`), so it survives such a kill and ends CMD's tree.

Before: the guardian died with wattlife and the workload went on appending to events.csv."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import gone

sys.path.insert(0, str(Path(__file__).parent))
from test_process_tree_faults import TREE, _pids  # noqa: E402


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _tree(root: int) -> set[int]:
    from wattlife.guardian import descendants, proc_table

    return descendants(proc_table(), {root})


@pytest.fixture
def workload(tmp_path):
    yield tmp_path
    for pid in _pids(tmp_path):  # the test has failed if any is alive: end it by id
        if not gone(pid, timeout=0.1):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("cgroup", ["auto", "off"])  # off: the guardian's tree walk alone
@pytest.mark.parametrize("new_session", ["0", "1"])
def test_killing_all_named_processes_at_once_leaves_no_workload(workload, env_path, children,
                                                                    new_session, cgroup):
    d = workload
    if cgroup == "off":
        env_path = {**env_path, "WATTLIFE_CGROUP": "off"}
    (d / "tree.py").write_text(TREE)
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(d / "trace.csv"),
           "--events", str(d / "events.csv"), "--gpu", "none", "--cpu", "none", "--idle-s", "0",
           "--", sys.executable, str(d / "tree.py"), str(d), "2", new_session]
    p = children.spawn(cmd, env=env_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (d / "ready").exists():
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline, "the workload never became ready"
        time.sleep(0.05)
    pids = _pids(d)
    named = [q for q in _tree(p.pid) if "wattlife" in _cmdline(q)]
    assert p.pid in named and not set(named) & set(pids)
    for q in named:  # all at once, as a kill by pattern would
        os.kill(q, signal.SIGKILL)
    p.wait(timeout=60)
    left = [pid for pid in pids if not gone(pid, timeout=15)]
    assert not left, f"{len(left)} of {len(pids)} workload processes outlived wattlife"
