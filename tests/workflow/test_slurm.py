"""The workflow through a real Slurm (Debian's slurm-wlm; `.ci/slurm-up.sh` starts it).

Only where the user opted in (WATTLIFE_TEST_SLURM=1; .ci/run sets it once its own cluster is up):
tests/conftest.py skips them otherwise, before anything here asks a Slurm command (nothing runs at
import). The partition is the CI cluster's, `debug`, or WATTLIFE_TEST_SLURM_PARTITION."""

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import SLURM_POLL, SLURM_SNAKEMAKE, copy_workflow, slurm_test_partition
from slurm_cells import tiny_slurm_config
from test_slurm_nodes import node_shapes, steps_of

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _node_gres() -> str:
    """The GRES of this one-node cluster (`.ci/slurm-up.sh` gives it two placeholder GPUs)."""
    return subprocess.run(["scontrol", "show", "node"], capture_output=True, text=True).stdout


def _rerun_then_nothing_to_do(conf: Path, site: list[str], cell: Path, tmp_path: Path,
                              env_path: dict[str, str], first_id: str) -> None:
    """Rerun the one cell through Slurm (the README's form: `wattlife retire`, then rerun): measured
    again, in a new Slurm job;
    then, the run finished and the config unchanged, nothing to do."""
    before = (cell / "trace.csv").read_bytes()
    subprocess.run(["wattlife", "retire", str(tmp_path / "res"), "resnet/local/ckpt-on/r1"],
                   env=env_path, check=True, capture_output=True, timeout=60)
    rerun = subprocess.run([*SLURM_SNAKEMAKE, "--profile", "profiles/slurm",
                            "--configfile", str(conf), *site, "--forcerun",
                            str(cell / "trace.csv"), "--", str(cell / "phases.csv"),
                            str(tmp_path / "res/tables/pfi.csv")], cwd=tmp_path / "workflow",
                           env=env_path, capture_output=True, text=True, timeout=1200)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    new_ids = re.findall(r"SLURM jobid (\d+)", rerun.stdout + rerun.stderr)
    assert len(new_ids) == 1 and new_ids[0] != first_id
    assert (cell / "trace.csv").read_bytes() != before
    again = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm",
                            "--configfile", str(conf), *site, "--", str(cell / "phases.csv"),
                            str(tmp_path / "res/tables/pfi.csv")], cwd=tmp_path / "workflow",
                           env=env_path,
                           capture_output=True, text=True, timeout=300)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]


def test_cells_run_as_slurm_jobs_through_the_slurm_profile(tmp_path, env_path):
    conf_text = subprocess.run(["scontrol", "show", "config"], capture_output=True,
                               text=True).stdout
    # the cluster binds tasks to their CPUs (as GPU clusters do): a 1-CPU step shows as one CPU
    assert re.search(r"TaskPlugin\s*=.*(affinity|cgroup)", conf_text), "run .ci/slurm-up.sh"
    gres = re.search(r"Gres=gpu", _node_gres()) is not None
    # one ResNet cell on local storage through the multi-node launch path on this one node
    # (srun -> a sampler per node -> torchrun -> merge)
    conf = tiny_slurm_config(tmp_path, gpus=gres, storage="local", per_node_sampler=True)
    # the documented command (`--profile profiles/slurm`, as shipped), with only this cluster's
    # site values: its partition, and the status command of a cluster without accounting (and
    # the tests' status polling, conftest.SLURM_POLL)
    part = slurm_test_partition()
    site = ["--config", f"slurm={{gpu_partition: {part}}}", "--slurm-status-command", "squeue",
            *SLURM_POLL]
    wf = copy_workflow(tmp_path / "workflow")
    cell = tmp_path / "res/runs/resnet/local/ckpt-on/r1"
    out = subprocess.run([*SLURM_SNAKEMAKE, "--profile", "profiles/slurm",
                          "--configfile", str(conf), *site, "--", str(cell / "phases.csv"),
                          str(tmp_path / "res/tables/pfi.csv")], cwd=wf, env=env_path,
                         capture_output=True, text=True, timeout=1200)
    log = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0, log
    ids = re.findall(r"SLURM jobid (\d+)", out.stdout + out.stderr)
    assert len(ids) == 1, log  # the cell went through sbatch; the CPU steps ran on this host
    print("Slurm job ids:", ids)
    shown = subprocess.run(["scontrol", "show", "job", ids[0]], capture_output=True,
                           text=True).stdout
    assert "execute" in shown and f"Partition={part}" in shown, shown
    assert re.search(r"OverSubscribe=NO|Shared=0|exclusive", shown, re.I), shown
    # the whole node, whichever of the partition's (mixed) nodes it landed on: every CPU and all
    # the memory a job may have there (RealMemory - MemSpecLimit)
    node = re.search(r"\bNodeList=(\S+)", shown).group(1)
    cpus, mem = node_shapes(part)[node]
    assert re.search(rf"\bNumCPUs={cpus}\b", shown) and f"mem={mem}M" in shown, shown
    # inside the measuring step (and each node's launch-node): every CPU of the job's node
    steps = steps_of(cell / "run.log")
    print(f"measuring steps saw (node {node}):", steps)
    assert steps and all(s["job_id"] == ids[0] and s["cpus_allowed"] >= cpus and s["host"] == node
                         and s["job_cpus_on_node"] == cpus and s["mem_per_node_mb"] == mem
                         for s in steps), steps
    if gres:  # the GPU rule asked for its GPU per node (--gres) and Slurm granted the placeholder
        assert re.search(r"gres/gpu[=:]1|gpu:1", shown), shown
    node_traces = list((cell / "nodes").glob("*/trace.csv"))
    assert len(node_traces) == 1 and (cell / "clock_offsets.csv").exists()
    assert set(pd.read_csv(cell / "trace.csv")["host"]) == {node_traces[0].parent.name}
    ph = pd.read_csv(cell / "phases.csv")
    assert {"stage_copy", "forward", "checkpoint"} <= set(ph["phase"])
    assert pd.read_csv(tmp_path / "res/tables/pfi.csv")["pfi"].notna().all()
    _rerun_then_nothing_to_do(conf, site, cell, tmp_path, env_path, ids[0])


def test_a_cluster_without_accounting_is_named_before_any_job_is_submitted(tmp_path, env_path):
    """Without --slurm-status-command squeue the executor would poll sacct, which never sees a
    job end here (accounting_storage/none): the run stops at once and names the flag."""
    shown = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    if not re.search(r"AccountingStorageType\s*=\s*accounting_storage/none", shown):
        pytest.skip("this cluster has accounting")
    out = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm",
                          "--config", f"results_dir={tmp_path / 'res'}",
                          f"slurm={{gpu_partition: {slurm_test_partition()}}}", *SLURM_POLL, "--",
                          str(tmp_path / "res/tables/pfi.csv")],
                         cwd=copy_workflow(tmp_path / "workflow"), env=env_path,
                         capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode != 0 and "--slurm-status-command squeue" in log, log[-3000:]
    assert "SLURM jobid" not in log, log[-3000:]
