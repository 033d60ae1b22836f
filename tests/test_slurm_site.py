"""What measuring jobs ask Slurm for, what their steps hold, and the recovery after a killed
controller (wattlife.slurm_site, wattlife.runlock), without a Slurm: recording / answering
`srun`, `squeue`, `scancel` on PATH."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from wattlife import slurm_site as S
from wattlife.launch import LaunchSpec, build_command
from wattlife.runlock import LOCK_NAME, run_folder_lock
from wattlife.sweeps.real import device_label


def _site(**kw):
    base = dict(account=None, gpu_partition="gpuq", cpu_partition=None, partitions=None,
                constraints=None, cpus_per_task=None, mem_mb=None, extra=None)
    return SimpleNamespace(**{**base, **kw})


def _answer(text: str, rc: int = 0):
    def run(args, **_kw):
        return subprocess.CompletedProcess(args, rc, stdout=text, stderr="")
    return run


def test_measuring_jobs_ask_for_every_cpu_and_all_memory_of_their_partitions_nodes():
    sinfo = _answer("gpuq*|112|2000000+\ngpuq*|96|1900000\nh100q|64|1000000\n")
    res = S.measuring_resources(_site(partitions={"h100": "h100q"}, constraints={"h100": "h1"}),
                                "h100", run=sinfo)
    assert res == {"slurm_partition": "h100q", "constraint": "h1", "slurm_extra": "--exclusive",
                   "cpus_per_task": 64, "mem_mb": 1000000}
    cell = S.measuring_resources(_site(), None, run=sinfo)  # a training cell: gpu_partition
    assert (cell["slurm_partition"], cell["cpus_per_task"], cell["mem_mb"]) == ("gpuq", 96, 1900000)
    assert S.parse_sinfo("gpuq*|8|100\n", None) == S.NodeShape(8, 100)  # the default partition
    own = S.measuring_resources(_site(cpus_per_task=32, mem_mb=500000), "h200", run=_answer(""))
    assert (own["cpus_per_task"], own["mem_mb"]) == (32, 500000)
    assert "cpus_per_task" not in S.measuring_resources(_site(), None, run=_answer("", 1))


def test_a_users_extra_adds_to_exclusive():
    assert S.merge_extra("--mail-type=END") == "--exclusive --mail-type=END"
    assert S.merge_extra("--exclusive --qos=high") == "--exclusive --qos=high"
    assert S.merge_extra(None) == "--exclusive"


def test_a_step_holding_fewer_cpus_than_its_job_is_refused():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0": "112(x2)",
           "SLURM_MEM_PER_NODE": "2000000", "SLURM_JOB_NUM_NODES": "2"}
    one = S.step_view(env, {0}, "n1")
    assert one["job_cpus_on_node"] == 112 and one["mem_per_node_mb"] == 2000000
    assert "1 of the job's 112 CPUs" in S.step_problem(one)
    assert S.step_problem(S.step_view(env, set(range(112)), "n1")) is None
    assert S.step_problem(S.step_view({}, {0}, "n1")) is None  # not a Slurm job


def _fake_srun(bindir: Path, log: Path) -> None:
    """srun as Slurm sizes a step: --ntasks, else the inherited SLURM_NTASKS, else nodes x
    tasks per node; a step of fewer tasks than nodes shrinks to one node per task (what it
    prints: "can't run 1 processes on 2 nodes, setting nnodes to 1"). Each task runs the command
    with SLURMD_NODENAME set."""
    bindir.mkdir()
    (bindir / "srun").write_text(f"""#!{sys.executable}
import os, re, subprocess, sys
args = sys.argv[1:]
opts = {{}}
while args and args[0].startswith("-"):
    k, _, v = args.pop(0).partition("=")
    opts[k] = v
nodes = int(opts.get("--nodes", 1))
tasks = int(opts.get("--ntasks") or os.environ.get("SLURM_NTASKS") or
            nodes * int(opts.get("--ntasks-per-node", 1)))
if tasks < nodes:
    print(f"srun: can't run {{tasks}} processes on {{nodes}} nodes, setting nnodes to {{tasks}}",
          file=sys.stderr)
    nodes = tasks
with open({str(log)!r}, "a") as fh:
    fh.write(" ".join(sys.argv) + "\\n")
rc = 0
for i in range(tasks):
    env = dict(os.environ, SLURMD_NODENAME=f"node{{i}}", SLURM_PROCID=str(i))
    rc |= subprocess.run(args, env=env).returncode
sys.exit(rc)
""")
    (bindir / "srun").chmod(0o755)
    (bindir / "scontrol").write_text("#!/bin/bash\necho node0\necho node1\n")
    (bindir / "scontrol").chmod(0o755)


def test_a_multi_node_cell_starts_one_launch_node_per_node_inside_a_one_task_step(tmp_path):
    """Inside the executor's step (SLURM_NTASKS=1 inherited) the suite's srun still starts one
    task per node: it gives --ntasks itself."""
    log = tmp_path / "srun.log"
    _fake_srun(tmp_path / "bin", log)
    spec = LaunchSpec(nodes=2, gpus_per_node=8, per_node=True)
    cmd = build_command(spec, config="c.json", run_dir="R", run_id="x", cell={}, inner=["train"])
    parts = cmd.split(" && ")
    at = next(i for i, p in enumerate(parts) if p.startswith("srun "))
    srun = parts[at].split(" wattlife launch-node")[0]  # the suite's srun, as built
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
               SLURM_NTASKS="1", SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0="112(x2)")
    out = subprocess.run(["bash", "-c", " && ".join(parts[:at] + [srun])
                          + " bash -c 'echo launch-node on $SLURMD_NODENAME'"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["launch-node on node0", "launch-node on node1"], out
    assert "setting nnodes" not in out.stderr
    assert "--ntasks=2 --ntasks-per-node=1" in log.read_text()
    assert "--cpus-per-task=112 --cpu-bind=cores" in log.read_text()


def test_a_second_job_on_a_cell_refuses_while_the_first_is_alive(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "100")
    with run_folder_lock(tmp_path):
        doc = json.loads((tmp_path / LOCK_NAME).read_text())
        assert doc["job_id"] == "100" and doc["pid"] == os.getpid()
        with run_folder_lock(tmp_path):  # a child of this job (launch-node): shares it
            pass
        monkeypatch.delenv("WATTLIFE_RUN_LOCK")
        monkeypatch.setenv("SLURM_JOB_ID", "200")  # an orphan's twin
        with pytest.raises(RuntimeError, match="Slurm job 100 .* is measuring this run"):
            with run_folder_lock(tmp_path, job_alive=lambda j: True):
                pass
        with run_folder_lock(tmp_path, job_alive=lambda j: False):  # job 100 has left the queue
            assert json.loads((tmp_path / LOCK_NAME).read_text())["job_id"] == "200"
    assert not (tmp_path / LOCK_NAME).exists()


def test_orphans_are_listed_and_cancelled_by_the_runs_job_name(tmp_path, env_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    state = tmp_path / "queue"
    state.write_text("11|RUNNING|wattlife_abc|rule_execute_wildcards_resnet_local_on_1\n"
                     "12|PENDING|wattlife_abc|rule_execute_wildcards_resnet_local_on_2\n"
                     "13|RUNNING|other|x\n")
    (bindir / "squeue").write_text(f"#!/bin/bash\ncat {state}\n")
    (bindir / "scancel").write_text(f"#!/bin/bash\necho \"$*\" > {tmp_path}/cancelled\n"
                                    f": > {state}\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = dict(env_path, PATH=f"{bindir}{os.pathsep}{env_path['PATH']}")
    ls = subprocess.run(["wattlife", "slurm-orphans"], env=env, capture_output=True, text=True)
    assert ls.returncode == 3 and "11\tRUNNING" in ls.stdout and "13" not in ls.stdout, ls
    cancel = subprocess.run(["wattlife", "slurm-orphans", "--name", "wattlife_abc", "--cancel",
                             "--poll-s", "0.1"], env=env, capture_output=True, text=True)
    assert cancel.returncode == 0 and "safe to rerun" in cancel.stdout, cancel
    assert (tmp_path / "cancelled").read_text().split() == ["11", "12"]


def test_missing_accounting_is_named_with_the_flag_to_add():
    conf = "AccountingStorageType   = accounting_storage/none\nMinJobAge = 300\n"
    why = S.status_preflight("sacct", run=_answer(conf))
    assert "--slurm-status-command squeue" in why and "accounting_storage/none" in why
    assert S.status_preflight("squeue", run=_answer(conf)) is None
    dbd = "AccountingStorageType = accounting_storage/slurmdbd"
    assert S.status_preflight(None, run=_answer(dbd)) is None


def test_a_curve_rows_gpu_model_is_the_device_that_ran_it():
    assert device_label("NVIDIA H100 80GB HBM3", "NVIDIA H100", False) == "NVIDIA H100"
    with pytest.raises(ValueError, match="hardware is NVIDIA H100 but the job ran on NVIDIA H200"):
        device_label("NVIDIA H200", "NVIDIA H100", False, "c")
    assert device_label("Simulated H200 (sim)", "NVIDIA H100", True) == "Simulated H200 (sim)"
    assert device_label(None, "NVIDIA H100", True) == "Simulated H200 (sim)"
    assert device_label(None, "NVIDIA H100", False) == "NVIDIA H100"


def test_the_admins_prolog_and_epilog_save_and_restore_limits_by_job_id(tmp_path, env_path):
    """profiles/slurm/{prolog,epilog}.sh with the simulated backend: the prolog records the
    node's limits under the job's id (not a user's path); the epilog, run whatever ended the job
    (here the job was never even started), restores them and removes the record."""
    env = dict(env_path, SLURM_JOB_ID="4242", WATTLIFE_POWERCAP_DIR=str(tmp_path / "pc"),
               WATTLIFE_POWERCAP_BACKEND="simulated")
    repo = Path(__file__).resolve().parents[1]
    pro = subprocess.run([str(repo / "profiles/slurm/prolog.sh")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert pro.returncode == 0, pro.stderr
    state = tmp_path / "pc/job-4242.json"
    doc = json.loads(state.read_text())
    assert doc["backend"] == "simulated" and doc["limits_w"], doc
    epi = subprocess.run([str(repo / "profiles/slurm/epilog.sh")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert epi.returncode == 0 and "restored" in epi.stdout, epi.stderr
    assert not state.exists()
    again = subprocess.run([str(repo / "profiles/slurm/epilog.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "no state file" in again.stdout  # nothing was saved
