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
from hypothesis import given
from hypothesis import strategies as st

from wattlife import slurm_site as S
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


def test_measuring_jobs_ask_for_whole_nodes_of_any_size():
    """--exclusive, no memory figure (SBATCH_MEM_PER_NODE=0: every node's allocatable memory),
    one CPU for the executor's step: nothing read from the partition's smallest node."""
    res = S.measuring_resources(_site(partitions={"h100": "h100q"}, constraints={"h100": "h1"}),
                                "h100")
    assert res == {"slurm_partition": "h100q", "constraint": "h1", "slurm_extra": "--exclusive",
                   "cpus_per_task": 1, "mem_mb": 0}
    cell = S.measuring_resources(_site(), None)  # a training cell: gpu_partition
    assert cell["slurm_partition"] == "gpuq"
    own = S.measuring_resources(_site(cpus_per_task=32, mem_mb=500000), "h200")
    assert (own["cpus_per_task"], own["mem_mb"]) == (32, 500000)
    env: dict[str, str] = {}
    S.whole_node_memory(env)
    assert env == {"SBATCH_MEM_PER_NODE": "0"}
    env = {"SBATCH_MEM_PER_NODE": "9000"}  # the user's own: kept
    S.whole_node_memory(env)
    assert env == {"SBATCH_MEM_PER_NODE": "9000"}
    # CPU-only cells ask for a task per node (the plugin's one task would shrink them to one)
    assert S.node_request(2, 0) == {"nodes": 2, "tasks": 2}
    assert S.node_request(4, 8) == {"nodes": 4, "gres": "gpu:8"}


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
    # the job's own allocation on this node (scontrol show job -d) wins over the environment's
    # first node: a 1-CPU node of a mixed allocation is whole with 1 CPU
    small = S.step_view(env, {0}, "n2", alloc=(1, 3856))
    assert (small["job_cpus_on_node"], small["mem_per_node_mb"]) == (1, 3856)
    assert S.step_problem(small) is None
    assert "1 of the job's 2 CPUs" in S.step_problem(S.step_view(env, {0}, "n1", alloc=(2, 7712)))


def test_the_jobs_allocation_on_each_node_is_read_from_scontrol():
    detail = ("JobId=51 JobName=j.sh\n   NumNodes=3 NumCPUs=5\n"
              "     Nodes=wl[1-2] CPU_IDs=0-1 Mem=7712 GRES=\n"
              "     Nodes=wl3 CPU_IDs=0,2-3 Mem=3856 GRES=\n")
    expand = {"wl[1-2]": ["wl1", "wl2"], "wl3": ["wl3"]}.__getitem__
    assert S.parse_job_detail(detail, "wl2", expand) == (2, 7712)
    assert S.parse_job_detail(detail, "wl3", expand) == (3, 3856)
    assert S.parse_job_detail(detail, "wl9", expand) is None

    def run(args, **_kw):
        text = detail if args[2] == "job" else "\n".join(expand(args[3])) + "\n"
        return subprocess.CompletedProcess(args, 0, stdout=text, stderr="")
    assert S.job_allocation("51", "wl1", run) == (2, 7712)


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 20)), max_size=8))
def test_cpu_id_lists_count_every_cpu(ranges):
    text = ",".join(f"{lo}-{lo + n}" if n else str(lo) for lo, n in ranges) or "0"
    assert S.count_cpu_ids(text) == (sum(n + 1 for _, n in ranges) if ranges else 1)


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
    """Inside the executor's step (SLURM_NTASKS=1, SLURM_NNODES=1, its one node inherited) the
    suite's srun still starts one task per node: the step's variables are cleared first, the
    job named (--jobid), the whole node asked for (--whole, unbound)."""
    from wattlife.launch import whole_step

    log = tmp_path / "srun.log"
    _fake_srun(tmp_path / "bin", log)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
               SLURM_JOB_ID="77", SLURM_NTASKS="1", SLURM_NNODES="1", SLURM_NODELIST="node0",
               SLURM_STEP_ID="0", SLURM_CPUS_PER_TASK="1")
    out = subprocess.run(["bash", "-c", f"({whole_step(2)} bash -c 'echo launch-node on "
                          "$SLURMD_NODENAME ${SLURM_NNODES:-cleared}')"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["launch-node on node0 cleared",
                                          "launch-node on node1 cleared"], out
    assert "setting nnodes" not in out.stderr
    assert ("--jobid=77 --overlap --whole --nodes=2 --ntasks=2 --ntasks-per-node=1"
            " --kill-on-bad-exit=1 --cpu-bind=none") in log.read_text()


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
    """By default only the jobs of the results folder's recorded runs (issue 40: it listed every
    wattlife_* job, and --cancel cancelled them all)."""
    from wattlife.slurm_orphans import record_run

    bindir = tmp_path / "bin"
    bindir.mkdir()
    state = tmp_path / "queue"
    state.write_text("11|RUNNING|wattlife_abc|rule_execute_wildcards_resnet_local_on_1|1:00|n1\n"
                     "12|PENDING|wattlife_abc|rule_execute_wildcards_resnet_local_on_2|0:00|n1\n"
                     "14|RUNNING|wattlife_zzz|rule_execute_wildcards_other_local_on_1|2:00|n2\n"
                     "13|RUNNING|other|x|1:00|n3\n")
    (bindir / "squeue").write_text(f"#!/bin/bash\ncat {state}\n")
    (bindir / "scancel").write_text(f"#!/bin/bash\necho \"$*\" > {tmp_path}/cancelled\n"
                                    f"grep -v '^1[12]|' {state} > {state}.new; mv {state}.new "
                                    f"{state}\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = dict(env_path, PATH=f"{bindir}{os.pathsep}{env_path['PATH']}")
    record_run(tmp_path / "res", "wattlife_abc")
    ls = subprocess.run(["wattlife", "slurm-orphans", str(tmp_path / "res")], env=env,
                        capture_output=True, text=True)
    assert ls.returncode == 3 and "11\tRUNNING" in ls.stdout, ls
    assert "13\t" not in ls.stdout and "14\t" not in ls.stdout, ls
    every = subprocess.run(["wattlife", "slurm-orphans", "--all"], env=env, capture_output=True,
                           text=True)
    assert "14\tRUNNING" in every.stdout and "13\t" not in every.stdout, every
    cancel = subprocess.run(["wattlife", "slurm-orphans", str(tmp_path / "res"), "--cancel",
                             "--poll-s", "0.1"], env=env, capture_output=True, text=True)
    assert cancel.returncode == 0 and "safe to rerun" in cancel.stdout, cancel
    assert (tmp_path / "cancelled").read_text().split() == ["11", "12"]
    assert "14|RUNNING" in state.read_text()  # another results folder's job: untouched


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


def _hook(name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[1]
    return subprocess.run([str(repo / f"profiles/slurm/{name}.sh")], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_admins_prolog_and_epilog_save_and_restore_limits_by_job_id(tmp_path):
    """profiles/slurm/{prolog,epilog}.sh as Slurm runs them: no PATH, none of the user's
    environment, only the job's id and node name; everything else from the one site file. The
    prolog records the node's limits (simulated backend) under the job's id and node (not a
    user's path); the epilog, run whatever ended the job, restores them and removes the record;
    each says what it did in the site's log."""
    repo = Path(__file__).resolve().parents[1]
    site = tmp_path / "slurm.env"
    site.write_text(f"WATTLIFE={Path(sys.executable).parent / 'wattlife'}\n"
                    f"PYTHONPATH={repo / 'src'}\nWATTLIFE_POWERCAP_BACKEND=simulated\n"
                    f"WATTLIFE_POWERCAP_DIR={tmp_path / 'pc'}\n"
                    f"WATTLIFE_POWERCAP_LOG={tmp_path / 'hooks.log'}\n")
    env = {"SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "wl2", "WATTLIFE_SITE_ENV": str(site)}
    pro = _hook("prolog", env)
    assert pro.returncode == 0, pro.stderr + (tmp_path / "hooks.log").read_text()
    state = tmp_path / "pc/job-4242-wl2.json"
    doc = json.loads(state.read_text())
    assert doc["backend"] == "simulated" and doc["limits_w"], doc
    epi = _hook("epilog", env)
    assert epi.returncode == 0 and not state.exists(), epi.stderr
    again = _hook("epilog", env)
    assert again.returncode == 0  # nothing was saved: nothing to restore
    log = (tmp_path / "hooks.log").read_text().splitlines()
    assert [w.split()[1:4] for w in log] == [["prolog", "job=4242", "node=wl2"],
                                             ["epilog", "job=4242", "node=wl2"],
                                             ["epilog", "job=4242", "node=wl2"]], log
    assert "rc=0" in log[1] and "restored" in log[1] and "no state file" in log[2], log


def test_a_prolog_without_the_sites_wattlife_says_where_to_set_it(tmp_path):
    site = tmp_path / "slurm.env"
    site.write_text(f"WATTLIFE_POWERCAP_DIR={tmp_path / 'pc'}\n"
                    f"WATTLIFE_POWERCAP_LOG={tmp_path / 'hooks.log'}\n")
    pro = _hook("prolog", {"SLURM_JOB_ID": "1", "WATTLIFE_SITE_ENV": str(site)})
    assert pro.returncode == 127
    assert f"set it (absolute path) in {site}" in (tmp_path / "hooks.log").read_text()
