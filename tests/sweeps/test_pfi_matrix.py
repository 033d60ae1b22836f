"""The PFI study's matrix: hardware profiles, cells, and the dry run of config/pfi.yaml."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from wattlife.config import hardware_profile, load_config, settings
from wattlife.jobs import cell_caps
from wattlife.sweeps.pfi_matrix import matrix_cell_workload

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_hardware_profiles_have_the_studys_grids(gpu):
    p = hardware_profile(gpu)
    assert p.grid_w == (200, 300, 400, 500, 600, 700) and p.grid_large_w == (200, 500, 600, 700)
    assert p.min_cap_w <= min(p.grid_w) and max(p.grid_w) <= p.max_cap_w == p.tdp_w


def test_a_profile_with_caps_outside_its_range_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (REPO / "config/hardware/h200.yaml").read_text()
    bad.write_text(text.replace("min_cap_w: 200", "min_cap_w: 250"))
    with pytest.raises(ValueError, match=r"caps \[200, 200\] outside \[250, 700\]"):
        hardware_profile(bad)
    with pytest.raises(FileNotFoundError, match="h200"):
        hardware_profile("b300")


def test_cells_become_causal_lm_workloads_with_the_protocol():
    cfg = load_config(REPO / "config/pfi.yaml")
    w, c, prof = matrix_cell_workload(settings(cfg), "moe-ft-qwen3-30b-a3b-8g")
    assert w["task"] == "lora" and w["compile"] is True and w["fsdp"] is True
    assert (w["duration_s"], w["eval_at_s"], w["ckpt_at_s"]) == (1800, 900, 1200)
    assert w["peak_tflops"] == prof.peak_tflops_bf16 == 989 and "gpus" not in w and c.gpus == 8
    tasks = {c["task"] for c in cfg["pfi_matrix"]["cells"].values()}
    gpus = {c["gpus"] for c in cfg["pfi_matrix"]["cells"].values()}
    assert tasks == {"pretrain", "lora"} and gpus == {8, 16, 32}
    with pytest.raises(ValueError, match="no such cell"):
        matrix_cell_workload(settings(cfg), "nope")


@pytest.mark.slow
def test_dry_run_of_the_pfi_matrix_lists_every_cell(env_path, workflow_dir):
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile",
                          "config/pfi.yaml", "--cores", "8"], cwd=workflow_dir, env=env_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    cells = set(load_config(REPO / "config/pfi.yaml")["pfi_matrix"]["cells"])
    listed = set(re.findall(r"results/pfi/pfi/([^/\s]+)/curves\.csv", out.stdout))
    assert listed == cells
    counts = {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", out.stdout, re.M)}
    cfg = load_config(REPO / "config/pfi.yaml")
    n_caps = sum(len(cell_caps(cfg, c)) for c in cells)  # one job per (cell, cap)
    assert counts.get("pfi_cap", 0) + counts.get("pfi_cap_multinode", 0) == n_caps
    assert counts["pfi_curve"] == len(cells) and "execute" not in counts
    points = set(re.findall(r"results/pfi/pfi/([^/\s]+)/cap-(\d+)/curve-point\.csv", out.stdout))
    assert points == {(c, f"{w:g}") for c in cells for w in cell_caps(cfg, c)}
    for rule in ("pfi_curves", "pfi", "predictor", "allocate", "figures"):
        assert counts[rule] == 1, rule


@pytest.mark.slow
def test_dry_run_of_the_paper_matrix(env_path, workflow_dir):
    """config/paper.yaml: 12 downloads, 24 cells launched by torchrun (as a Python module)."""
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--configfile",
                          "config/paper.yaml", "--cores", "8"], cwd=workflow_dir, env=env_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out.stdout, re.M))
    assert counts["download"] == "12" and counts["upload"] == "1"
    cells = {k: int(v) for k, v in counts.items() if k.startswith("execute")}
    assert sum(cells.values()) == 24  # resnet's 12, qwen's 12: 4 cells x 3 repeats each
    assert cells == {"execute": 12, "execute_tokenizer": 12}  # one rule per kind, repeats 3
    # the launcher's command is built inside the job (`wattlife measure`), from the cell's slice
    from wattlife.config import load_config
    from wattlife.custody.measure import cell_command
    from wattlife.jobs import cell_slice

    paper = load_config(REPO / "config/paper.yaml")
    cmd = cell_command(cell_slice(paper, "resnet", "local", "on", 1), "resnet/local/ckpt-on/r1",
                       Path("/attempt"))
    assert "-- torchrun --nproc-per-node 4 -m wattlife.cli train" in cmd
    assert "--trace /attempt/trace.csv" in cmd and "wattlife measure" in out.stdout
