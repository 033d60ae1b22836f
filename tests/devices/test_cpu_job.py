"""CPU energy of the job, not of the machine: the estimate charges a run the CPU time of its own
process tree (CMD and its descendants), reports the rest of the machine's load beside it, and a
run beside a busy process outside its tree is flagged (estimate and RAPL alike)."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

BUSY = "while True: pass"  # a process outside the run's tree, busy on one CPU
# burns `s` seconds of its own CPU time, then exits
BURN = "import time\nwhile time.process_time() < {s}: pass\n"
# the job: a child that burns 1.0 s of CPU, then the job itself 0.5 s, then 0.5 s asleep so that
# the sampler's last look at the tree comes after the burning (the tree's CPU time after the last
# look before CMD exits is not counted: a known limit, docs/GAPS.md)
JOB = ("import subprocess, sys, time\n"
       f"subprocess.run([sys.executable, '-c', {BURN.format(s=1.0)!r}], check=True)\n"
       "while time.process_time() < 0.5: pass\n"
       "time.sleep(0.5)\n")


def _run(tmp_path: Path, children, env, code: str, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "-o", str(tmp_path / "run"), "--gpu",
           "none", "--idle-s", "0.2", "--interval-ms", "50", *extra, "--", sys.executable, "-c",
           code]
    out = children.run(cmd, timeout=300, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return {"meta": json.loads((tmp_path / "run" / "meta.json").read_text()),
            "trace": pd.read_csv(tmp_path / "run" / "trace.csv"), "stderr": out.stderr}


def _busy_outside(children, env) -> None:
    children.spawn([sys.executable, "-c", BUSY], env=env)


def test_an_idle_job_beside_a_busy_process_is_charged_idle_power_and_flagged(tmp_path,
                                                                           children, env_path):
    _busy_outside(children, env_path)
    r = _run(tmp_path, children, env_path, "import time; time.sleep(2)", "--cpu", "estimate")
    info = next(b for b in r["meta"]["sampler"]["backends"] if b["backend"] == "cpu-estimate")
    assert info["scope"] == "process tree of CMD" and "process tree" in info["model"]
    assert info["job_cpu_share"] < 0.05, info  # it slept
    assert info["others_cpu_share"] > 0.3 / info["n_cpus"], info  # the busy loop, and more
    tr = r["trace"]
    m = r["meta"]
    during = tr[(tr["t_ns"] > m["workload_start_ns"] + 2e8) & (tr["t_ns"] < m["workload_end_ns"])]
    power = during.loc[during["metric"] == "power_w", "value"]
    idle_w, max_w = info["idle_w"], info["max_w"]
    # before: idle + (max - idle) x the machine's load (the busy loop's CPU charged to the run)
    assert power.mean() < idle_w + 0.05 * (max_w - idle_w), power.describe()
    others = during.loc[during["metric"] == "util_cpu_others", "value"]
    assert others.mean() > 30 / info["n_cpus"]
    assert any("other processes used" in n for n in m["sensor_notes"]), m["sensor_notes"]
    assert "wattlife run: warning: other processes used" in r["stderr"]


def test_the_job_is_charged_its_whole_trees_cpu_time(tmp_path, children, env_path):
    """1.0 s of CPU in a child, 0.5 s in CMD itself (plus two interpreters' start-up): the tree's
    CPU seconds, whatever else the machine runs."""
    _busy_outside(children, env_path)
    r = _run(tmp_path, children, env_path, JOB, "--cpu", "estimate")
    info = next(b for b in r["meta"]["sampler"]["backends"] if b["backend"] == "cpu-estimate")
    assert 1.45 <= info["job_cpu_s"] <= 3.5, info


def test_rapl_beside_a_busy_process_is_flagged(tmp_path, children, env_path):
    zone = tmp_path / "rapl" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("1000\n")
    cfg = tmp_path / "sampler.yaml"
    cfg.write_text(f"sampler:\n  rapl_root: {tmp_path / 'rapl'}\n")
    _busy_outside(children, env_path)
    r = _run(tmp_path, children, env_path, "import time; time.sleep(2)", "--cpu", "rapl",
             "--config", str(cfg))
    info = next(b for b in r["meta"]["sampler"]["backends"] if b["backend"] == "rapl")
    assert info["energy_scope"].startswith("the whole CPU package")
    assert info["load"]["others_cpu_share"] > 0.3 / info["load"]["n_cpus"], info
    notes = [n for n in r["meta"]["sensor_notes"] if "other processes used" in n]
    assert notes and "RAPL measures the whole package" in notes[0], r["meta"]["sensor_notes"]


def test_a_quiet_machine_gives_no_warning():
    from wattlife.devices.cpu_load import TreeLoad

    load = TreeLoad()
    load.watch_pid = None
    load.sample()
    assert load.warning("x") is None and load.summary()["job_cpu_share"] is None


def test_tree_processes_walks_the_tree_once_for_both_users(children):
    """`cpu_load.tree_processes`: the root and its descendants, each a cached Process flagged new
    only the first time; an ended child leaves the cache; None for no pid or a gone one. TreeLoad
    and the simulated GPU both read the tree through it."""
    import time

    import psutil

    from wattlife.devices.cpu_load import TreeLoad, tree_processes
    from wattlife.devices.simgpu import SimGpuBackend

    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
            "print(c.pid, flush=True)\n"
            "while time.process_time() < 0.3: pass\n"
            "c.wait()\n"  # reaps the child once the test kills it
            "time.sleep(30)\n")
    root = children.spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(root.stdout.readline())
    cache: dict = {}
    assert tree_processes(None, cache) is None
    first = tree_processes(root.pid, cache)
    assert first is not None and {p.pid: new for p, new in first} == {root.pid: True, child: True}
    again = tree_processes(root.pid, cache)
    assert again is not None and [new for _, new in again] == [False, False]
    assert all(p is cache[p.pid] for p, _ in again)
    psutil.Process(child).kill()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and child in {p.pid for p, _ in
                                                     tree_processes(root.pid, cache) or []}:
        time.sleep(0.05)
    assert set(cache) == {root.pid}
    load, sim = TreeLoad(), SimGpuBackend()
    load.watch_pid = sim.watch_pid = root.pid
    assert sim._activity() == 0.0  # first look: no cpu_percent reading yet
    time.sleep(0.3)
    assert load.tree_seconds() > 0.2 and set(load._procs) == {root.pid}
    assert set(sim._procs) == {root.pid}
    root.kill()
    root.wait(5)
    assert tree_processes(root.pid, {}) is None
