"""Cells on a multi-node Slurm of mixed node sizes, and the admin's prolog / epilog (issue 40).

The CI cluster (`.ci/slurm-up.sh`): three slurmd on one host, partition `debug` mixing 2-CPU and
1-CPU nodes, one node with MemSpecLimit, Prolog=/Epilog= the suite's own (simulated caps). Only
where the user opted in (WATTLIFE_TEST_SLURM=1; tests/conftest.py skips these otherwise, before
anything here asks a Slurm command). Each test prints what it saw (the closing note's evidence)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from conftest import SLURM_POLL, SLURM_SNAKEMAKE, copy_workflow, slurm_test_partition
from slurm_cells import tiny_slurm_config

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _sh(*args: str, timeout: float = 60) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout).stdout


def node_shapes(partition: str) -> dict[str, tuple[int, int]]:
    """Each node of `partition`: (CPUs, memory a job may allocate: RealMemory - MemSpecLimit)."""
    out = {}
    for name in _sh("sinfo", "-h", "-N", "-p", partition, "-o", "%N").split():
        text = _sh("scontrol", "show", "node", "-o", name)
        fields = dict(re.findall(r"(\w+)=(\S+)", text))
        out[name] = (int(fields["CPUTot"]),
                     int(fields["RealMemory"]) - int(fields.get("MemSpecLimit", 0)))
    return out


def steps_of(run_log: Path) -> list[dict]:
    text = run_log.read_text()
    return [json.loads(m) for m in re.findall(r"wattlife: slurm step (\{.*\})", text)]


def hooks_log() -> Path | None:
    """The log of the cluster's wattlife prolog / epilog (from the site file), where the cluster
    runs them."""
    conf = _sh("scontrol", "show", "config")
    site = Path("/etc/wattlife/slurm.env")
    if "profiles/slurm/prolog.sh" not in conf or not site.exists():
        return None
    m = re.search(r"^WATTLIFE_POWERCAP_LOG=(.+)$", site.read_text(), re.M)
    return Path(m.group(1).strip()) if m else None


def hook_lines(log: Path, job: str) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [ln for ln in lines if f" job={job} " in ln]


@pytest.mark.parametrize("gpus", [False, True], ids=["cpu-only", "gres"])  # (not "gpu": a marker)
def test_a_two_node_cell_runs_on_both_nodes_end_to_end(tmp_path, env_path, gpus):
    part = slurm_test_partition()
    shapes = node_shapes(part)
    if len(shapes) < 2:
        pytest.skip(f"partition {part} has one node")
    # shared storage: the CI's nodes share one host, so a node-local staging folder would be one
    # folder for both (on a cluster each node stages into its own disk; see the local test below)
    conf = tiny_slurm_config(tmp_path, gpus=gpus, storage="shared", nodes=2)
    wf = copy_workflow(tmp_path / "workflow")
    cell = tmp_path / "res/runs/resnet/shared/ckpt-on/r1"
    out = subprocess.run([*SLURM_SNAKEMAKE, "--verbose", "--profile", "profiles/slurm",
                          "--configfile", str(conf), "--config",
                          f"slurm={{gpu_partition: {part}}}", "--slurm-status-command", "squeue",
                          *SLURM_POLL,
                          "--", str(cell / "phases.csv")], cwd=wf, env=env_path,
                         capture_output=True, text=True, timeout=1200)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-6000:]
    ids = re.findall(r"SLURM jobid (\d+)", log)
    sbatch = re.findall(r"sbatch call: (sbatch .*?) --wrap", log)
    assert len(ids) == 1 and len(sbatch) == 1, log[-4000:]
    print(f"sbatch ({'gpu' if gpus else 'cpu-only'} 2-node cell): {sbatch[0]}")
    # the job asked for 2 whole nodes (CPU-only: a task per node, not the plugin's one task)
    assert "--nodes=2" in sbatch[0] and "--exclusive" in sbatch[0]
    assert ("--gres=gpu:1" in sbatch[0]) if gpus else ("--ntasks=2" in sbatch[0])
    shown = _sh("scontrol", "show", "job", "-d", ids[0])
    print("allocation:", *re.findall(r"(NumNodes=\S+|TRES=\S+|Nodes=\S+ CPU_IDs=\S+ Mem=\S+)",
                                     shown))
    assert "NumNodes=2" in shown, shown
    # each node's launch-node in a step of its own holding all of that node (any size)
    steps = steps_of(cell / "run.log")
    print("steps saw:", steps)
    hosts = {s["host"] for s in steps}
    assert len(steps) == 2 and len(hosts) == 2 and hosts <= set(shapes), steps
    for s in steps:
        cpus, mem = shapes[s["host"]]
        assert s["job_id"] == ids[0] and s["job_cpus_on_node"] == cpus, s
        assert s["cpus_allowed"] >= cpus and s["mem_per_node_mb"] == mem, s
    assert {p.name for p in (cell / "nodes").iterdir() if p.is_dir()} == hosts
    assert set(pd.read_csv(cell / "trace.csv")["host"]) == hosts
    ev = pd.read_csv(cell / "events.csv")
    assert set(ev["rank"]) == {0, 1} and set(ev["host"]) == hosts
    ph = pd.read_csv(cell / "phases.csv")
    for h in hosts:  # both ranks' phases attributed
        assert {"forward", "backward"} <= set(ph.loc[ph["host"] == h, "phase"]), ph
    # the merged trace is consistent with its meta.json (no "twice the rows" warning)
    chk = subprocess.run(["wattlife", "check", str(cell)], env=env_path, capture_output=True,
                         text=True, timeout=300)
    assert chk.returncode == 0 and "trace.rows" not in chk.stdout + chk.stderr, chk.stdout
    log_file = hooks_log()
    if log_file:  # PrologFlags=Alloc: the prolog ran on both nodes, the epilog put both back
        _wait(lambda: len(hook_lines(log_file, ids[0])) >= 4, "both nodes' epilogs")
        lines = hook_lines(log_file, ids[0])
        print("prolog/epilog:", *lines, sep="\n  ")
        for h in hosts:
            assert any(f"prolog job={ids[0]} node={h} rc=0" in ln for ln in lines), lines
            assert any(f"epilog job={ids[0]} node={h} rc=0" in ln for ln in lines), lines


def test_a_two_node_local_cells_checkpoint_folders_are_removed_on_both_nodes(tmp_path, env_path):
    """A 2-node cell checkpointing to `local` storage: each node writes its own checkpoint folder
    (here `local` is <tmp>/local/$SLURMD_NODENAME, expanded by each node: this host's nodes share
    one disk, so a folder per node name stands for each node's own disk), and when the job ends
    `measure` removes it on both nodes (a step of one `drop-checkpoint --folder` per node), no
    other folder. Before: only the first node's went; the other node's stayed."""
    from wattlife.custody import attempts_dir

    part = slurm_test_partition()
    if len(node_shapes(part)) < 2:
        pytest.skip(f"partition {part} has one node")
    local = tmp_path / "local"
    conf = tiny_slurm_config(tmp_path, gpus=False, storage="local", nodes=2,
                             local=f"{local}/$SLURMD_NODENAME")
    beside = local / "wl2/checkpoints/resnet-local-ckpton-r9"  # another run's folder: stays
    beside.mkdir(parents=True)
    cell = tmp_path / "res/runs/resnet/local/ckpt-on/r1"
    out = subprocess.run([*SLURM_SNAKEMAKE, "--profile", "profiles/slurm",
                          "--configfile", str(conf), "--config",
                          f"slurm={{gpu_partition: {part}}}", "--slurm-status-command", "squeue",
                          *SLURM_POLL,
                          "--", str(cell / "phases.csv")],
                         cwd=copy_workflow(tmp_path / "workflow"), env=env_path,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    hosts = {s["host"] for s in steps_of(cell / "run.log")}
    assert len(hosts) == 2, hosts
    custody = (attempts_dir(tmp_path / "res", "resnet/local/ckpt-on/r1") / "custody.log")
    lines = [ln for ln in custody.read_text().splitlines() if "checkpoint folder" in ln]
    print("checkpoint folders:", *lines, sep="\n  ")
    for h in hosts:  # each node staged and checkpointed into its own folder, then removed it
        assert {p.name for p in (local / h).iterdir()} > {"checkpoints"}, h  # + its dataset
        assert not (local / h / "checkpoints/resnet-local-ckpton-r1").exists(), h
        assert any(f"{h}: removed the checkpoint folder {local / h}/checkpoints/" in ln
                   for ln in lines), lines
    assert beside.is_dir()


def _wait(ok, what: str, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(1)


def test_a_measuring_step_holds_every_cpu_and_all_memory_of_any_node(tmp_path, env_path):
    """On each node of the mixed partition (the 1-CPU node, the MemSpecLimit node, the others):
    a job asking what the rules ask (wattlife.slurm_site) and started as the executor starts one
    (a 1-task 1-CPU step) runs its measurement step (wattlife.launch.whole_step) with all the
    CPUs and all the memory the job may have there; the step check compares with the job's own
    allocation on that node."""
    from types import SimpleNamespace

    from wattlife import slurm_site as S
    from wattlife.launch import whole_step

    part = slurm_test_partition()
    site = SimpleNamespace(account=None, gpu_partition=part, cpu_partition=None,
                           partitions=None, constraints=None, cpus_per_task=None, mem_mb=None,
                           extra=None)
    res = S.measuring_resources(site)
    env = dict(env_path)
    S.whole_node_memory(env)
    probe = (f"{sys.executable} -c 'from wattlife.run.node import short_host; "
             "from wattlife.slurm_site import check_step; check_step(short_host())'")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun -n1 --cpus-per-task=1 bash -s <<'EOF'\n"
                      f"{whole_step(1)} {probe}\nEOF\n")
    for node in _sh("sinfo", "-h", "-N", "-p", part, "-o", "%N").split():
        out = tmp_path / f"{node}.out"
        args = ["sbatch", "--wait", *res["slurm_extra"].split(), "-p", part, "-w", node,
                "--ntasks=1", f"--cpus-per-task={res['cpus_per_task']}", "-o", str(out),
                *([f"--mem={res['mem_mb']}"] if res["mem_mb"] else []), str(script)]
        sub = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        text = out.read_text() if out.exists() else ""
        assert sub.returncode == 0, sub.stderr + text
        cpus, mem = node_shapes(part)[node]
        step = steps_of(out)
        print(f"{node} ({cpus} CPUs, {mem} MB allocatable): {' '.join(args[:-1])} -> {step}")
        assert len(step) == 1 and step[0]["host"] == node, text
        assert step[0]["job_cpus_on_node"] == cpus and step[0]["cpus_allowed"] >= cpus, step
        assert step[0]["mem_per_node_mb"] == mem, step


def _submit(*args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-p", slurm_test_partition(), "--mem=100",
                          "-o", "/dev/null", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


@pytest.fixture(scope="module", autouse=True)
def timed_out_job() -> Iterator[str | None]:
    """The prolog / epilog test's job that Slurm ends at its time limit (`--time=1`: a minute,
    and up to 30 s more until the controller's next look), submitted when the module starts so
    that its minute passes while the tests before that one run (inside it, the test waited
    60-90 s for nothing else). One CPU on the partition's smallest node (wl3 on CI): the 2-node
    cells keep the other nodes; a test run alone that needs that node waits out the minute.
    None where the cluster runs no suite prolog / epilog (that test skips)."""
    if hooks_log() is None:
        yield None
        return
    shapes = node_shapes(slurm_test_partition())
    node = min(sorted(shapes), key=lambda n: shapes[n])  # fewest CPUs, then least memory
    yield _submit("--time=1", "-w", node, "--wrap", "sleep 600")


def test_the_clusters_prolog_and_epilog_restore_caps_however_a_job_ends(timed_out_job):
    """Slurm's own Prolog=/Epilog= (profiles/slurm, installed as the README says: absolute paths,
    the site file, simulated caps): for a job that completes, fails, is cancelled, is killed at
    its time limit (`timed_out_job`, submitted when the module started), and a 2-node job, each
    node's prolog saved the limits and its epilog restored them and removed the record."""
    log = hooks_log()
    if log is None:
        pytest.skip("this cluster does not run the suite's prolog / epilog (.ci/slurm-up.sh does)")
    nodes = sorted(node_shapes(slurm_test_partition()))
    jobs = {"completed": _submit("--wrap", "true"),
            "failed": _submit("--wrap", "exit 3"),
            "cancelled": _submit("--wrap", "sleep 600"),
            "timeout": timed_out_job,
            "two-node": _submit("-N2", "--ntasks=2", "--wrap", "true")}
    _wait(lambda: "RUNNING" in _sh("squeue", "-h", "-j", jobs["cancelled"], "-o", "%T"),
          "the job to cancel to run")
    subprocess.run(["scancel", jobs["cancelled"]], check=True, timeout=60)
    want = {k: 4 if k == "two-node" else 2 for k in jobs}
    _wait(lambda: all(len(hook_lines(log, j)) >= want[k] for k, j in jobs.items()),
          "every job's epilog", timeout=400)
    for kind, job in jobs.items():
        lines = hook_lines(log, job)
        state = re.search(r"JobState=(\S+)", _sh("scontrol", "show", "job", job))
        print(f"{kind} (job {job}, {state.group(1) if state else '?'}):", *lines, sep="\n  ")
        ran_on = {re.search(r"node=(\S+)", ln).group(1) for ln in lines}
        assert len(ran_on) == (2 if kind == "two-node" else 1) and ran_on <= set(nodes), lines
        for n in ran_on:
            pro = [ln for ln in lines if f"prolog job={job} node={n} rc=0" in ln]
            epi = [ln for ln in lines if f"epilog job={job} node={n} rc=0" in ln]
            assert len(pro) == 1 and len(epi) == 1 and "restored" in epi[0], lines
            state_file = re.search(r"state=(\S+?):", epi[0]).group(1)
            assert not Path(state_file).exists()
    assert "TIMEOUT" in _sh("scontrol", "show", "job", jobs["timeout"])


def test_a_lost_nodes_cap_record_stays_for_the_admin_and_its_return_runs_the_epilog():
    """A node lost mid-job (its slurmd killed, the node set DOWN as the controller does when it
    stops answering): the job ends NODE_FAIL, no epilog runs and the prolog's record of the
    node's limits stays; the admin's `wattlife powercap restore --state <record>` (USAGE.md)
    restores them and removes it; when the node's slurmd returns, Slurm runs the job's epilog
    there, which finds no record and passes (rc 0). Only on the cluster .ci/slurm-up.sh starts
    (ClusterName=wattlife), which it starts again."""
    log = hooks_log()
    conf = _sh("scontrol", "show", "config")
    if log is None or not re.search(r"ClusterName\s*=\s*wattlife\b", conf):
        pytest.skip("not the CI cluster of .ci/slurm-up.sh (this test kills one of its slurmd)")
    node = "wl3"
    pidfile = Path(f"/run/slurmd-{node}.pid")
    job = _submit("--no-requeue", "-w", node, "--wrap", "srun sleep 300")
    site = Path("/etc/wattlife/slurm.env").read_text()
    record = Path(re.search(r"^WATTLIFE_POWERCAP_DIR=(.+)$", site, re.M).group(1).strip()) \
        / f"job-{job}-{node}.json"
    wattlife = re.search(r"^WATTLIFE=(.+)$", site, re.M).group(1).strip()
    _wait(lambda: "RUNNING" in _sh("squeue", "-h", "-j", job, "-o", "%T") and record.exists(),
          "the job to run and its prolog's record")
    try:
        subprocess.run(["kill", "-9", pidfile.read_text().strip()], check=True, timeout=30)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down",
                        "reason=wattlife test: node lost"], check=True, timeout=30)
        _wait(lambda: "NODE_FAIL" in _sh("scontrol", "show", "job", job), "NODE_FAIL")
        time.sleep(3)
        assert record.exists() and not [ln for ln in hook_lines(log, job) if "epilog" in ln]
        print("lost node:", *hook_lines(log, job), f"record kept: {record}", sep="\n  ")
        admin = subprocess.run([wattlife, "powercap", "restore", "--state", str(record)],
                               capture_output=True, text=True, timeout=120,
                               env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src"),
                                    "WATTLIFE_POWERCAP_BACKEND": "simulated"})
        print("admin's restore:", admin.returncode, admin.stdout.strip(), admin.stderr.strip())
        assert admin.returncode == 0 and "restored" in admin.stdout + admin.stderr
        assert not record.exists()
    finally:
        up = subprocess.run(["bash", str(REPO / ".ci/slurm-up.sh")], capture_output=True,
                            text=True, timeout=300)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                       capture_output=True, timeout=30)
    assert up.returncode == 0, up.stderr[-2000:]
    _wait(lambda: any("epilog" in ln for ln in hook_lines(log, job)), "the returned node's epilog")
    print("node back:", *hook_lines(log, job), sep="\n  ")
    (epi,) = [ln for ln in hook_lines(log, job) if "epilog" in ln]
    assert f"epilog job={job} node={node} rc=0" in epi and not record.exists()
