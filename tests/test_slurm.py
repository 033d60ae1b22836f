"""The workflow through a real Slurm (Debian's slurm-wlm, one node; `.ci/slurm-up.sh` starts it)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


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
    cfg["execution"].update(storage=["local"], checkpoint=["on"])
    cfg["sampler"]["idle_baseline_s"] = 0.2
    conf = tmp_path / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    # the shipped profile, pointed at this one-node cluster's partition and without GPUs
    prof = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    prof["default-resources"].update(slurm_partition="debug", mem_mb=1500, cpus_per_task=1,
                                     runtime=15)
    prof["set-resources"] = {"execute": {"cpus_per_task": 2}}
    prof.update({"jobs": 2, "latency-wait": 10, "slurm-status-command": "squeue"})
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(prof))
    cell = tmp_path / "res/runs/resnet/local/ckpt-on/r1"
    out = subprocess.run([sys.executable, "-m", "snakemake", str(cell / "phases.csv"),
                          str(tmp_path / "res/tables/pfi.csv"), "--profile", str(tmp_path / "profile"),
                          "--configfile", str(conf)], cwd=REPO, env=env_path,
                         capture_output=True, text=True, timeout=1200)
    log = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0, log
    assert "sbatch" in log or "SLURM" in log.upper()
    ph = pd.read_csv(cell / "phases.csv")
    assert {"stage_copy", "forward", "checkpoint"} <= set(ph["phase"])
    assert pd.read_csv(tmp_path / "res/tables/pfi.csv")["pfi"].notna().all()
