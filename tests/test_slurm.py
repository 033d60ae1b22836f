"""The workflow through a real Slurm (Debian's slurm-wlm, one node; `.ci/slurm-up.sh` starts it)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _node_gres() -> str:
    """The GRES of this one-node cluster (`.ci/slurm-up.sh` gives it two placeholder GPUs)."""
    return subprocess.run(["scontrol", "show", "node"], capture_output=True, text=True).stdout


def _slurm_up() -> bool:
    if shutil.which("srun") is None:
        return False
    return subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout.count("UP") > 0


@pytest.mark.skipif(not _slurm_up(), reason="no Slurm controller answering here")
def test_cells_run_as_slurm_jobs_through_the_slurm_profile(tmp_path, env_path):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp_path / "res")
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")}
    cfg["data"]["images"].update(classes=2, train_per_class=6, val_per_class=2)
    cfg["workloads"]["resnet"].update(steps=2, val_every=0, ckpt_every=1, image_size=32,
                                      batch_size=4)
    # the multi-node launch path on this one node: srun -> a sampler per node -> torchrun -> merge
    cfg["execution"].update(storage=["local"], checkpoint=["on"], per_node_sampler=True)
    cfg["sampler"]["idle_baseline_s"] = 0.2
    conf = tmp_path / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    # the documented command (`--profile profiles/slurm`), with this one-node cluster's partition
    # and sizes given the way the README tells a user to give theirs
    gres = re.search(r"Gres=gpu", _node_gres()) is not None
    over = ["--default-resources", "slurm_partition=debug", "mem_mb=1500", "cpus_per_task=1", "runtime=15",
            "--set-resources", "execute:cpus_per_task=2"] + (["execute:gpu=1"] if gres else []) + [
            "--jobs", "2", "--latency-wait", "10", "--slurm-status-command", "squeue"]
    cell = tmp_path / "res/runs/resnet/local/ckpt-on/r1"
    out = subprocess.run([sys.executable, "-m", "snakemake", str(cell / "phases.csv"),
                          str(tmp_path / "res/tables/pfi.csv"), "--profile", "profiles/slurm",
                          "--configfile", str(conf), *over], cwd=REPO, env=env_path,
                         capture_output=True, text=True, timeout=1200)
    log = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0, log
    ids = re.findall(r"SLURM jobid (\d+)", out.stdout + out.stderr)
    assert len(ids) >= 2, log  # the cell and the sweep, at least, went through sbatch
    print("Slurm job ids:", ids)
    if gres:  # the GPU rule asked for a GPU the plugin's way and Slurm granted the placeholder
        job = subprocess.run(["scontrol", "show", "job", ids[0]], capture_output=True, text=True).stdout
        execute_ids = [i for i in ids if "execute" in subprocess.run(
            ["scontrol", "show", "job", i], capture_output=True, text=True).stdout]
        assert execute_ids, job
        shown = subprocess.run(["scontrol", "show", "job", execute_ids[0]], capture_output=True, text=True).stdout
        assert re.search(r"gres/gpu[=:]1|gpu:1", shown), shown
    node_traces = list((cell / "nodes").glob("*/trace.csv"))
    assert len(node_traces) == 1 and (cell / "clock_offsets.csv").exists()
    assert set(pd.read_csv(cell / "trace.csv")["host"]) == {node_traces[0].parent.name}
    ph = pd.read_csv(cell / "phases.csv")
    assert {"stage_copy", "forward", "checkpoint"} <= set(ph["phase"])
    assert pd.read_csv(tmp_path / "res/tables/pfi.csv")["pfi"].notna().all()
