"""What the Slurm profile, as shipped, asks sbatch for: a recording `sbatch` on PATH (no Slurm
here) receives the real plugin's submissions of PFI caps of 8, 16 and 32 GPUs and of a paper
training cell."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
SITE = "slurm={account: acct, gpu_partition: gpuq}"


def _fake_slurm(bindir: Path, log: Path) -> None:
    """sbatch records its arguments and answers a job id; the plugin's other queries answer
    nothing."""
    bindir.mkdir(parents=True)
    (bindir / "sbatch").write_text(f'#!/bin/bash\necho "sbatch $*" >> {log}\nwc -l < {log}\n')
    (bindir / "sacctmgr").write_text("#!/bin/bash\necho acct\n")
    for name in ("sacct", "squeue", "sinfo", "scontrol", "scancel"):
        (bindir / name).write_text("#!/bin/bash\nexit 0\n")
    for f in bindir.iterdir():
        f.chmod(0o755)


def submissions(tmp_path: Path, env: dict, configfile: str, targets: list[str]) -> list[str]:
    """The sbatch lines of `targets` through `--profile profiles/slurm` with the site values
    only."""
    log = tmp_path / "sbatch.log"
    _fake_slurm(tmp_path / "bin", log)
    env = dict(env, PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}")
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--nolock",
           "--configfile", configfile, "--config", f"results_dir={tmp_path / 'res'}", SITE,
           "--", *targets]
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and p.poll() is None:
            if log.exists() and len(log.read_text().splitlines()) >= len(targets):
                break
            time.sleep(0.5)
    finally:
        if p.poll() is None:  # it would wait for the fake jobs forever: end its process group
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        out = p.communicate(timeout=60)[0].decode(errors="replace")
    lines = log.read_text().splitlines() if log.exists() else []
    assert len(lines) == len(targets), out[-3000:]
    return [re.sub(r" --wrap=.*", "", ln) for ln in lines]


def test_sbatch_lines_of_pfi_cells_and_a_paper_cell(tmp_path, env_path):
    cells = yaml.safe_load((REPO / "config/pfi.yaml").read_text())["pfi_matrix"]["cells"]
    by_gpus = {c["gpus"]: name for name, c in cells.items()}
    res = tmp_path / "res"
    targets = [str(res / f"pfi/{by_gpus[g]}/cap-700/curve-point.csv") for g in (8, 16, 32)]
    lines = submissions(tmp_path / "pfi", env_path, "config/pfi.yaml",
                        [t.replace(str(res), str(tmp_path / "pfi/res")) for t in targets])
    got = {g: next(ln for ln in lines if f"_wildcards_{by_gpus[g]}_700 " in ln)
           for g in (8, 16, 32)}
    for g, nodes in ((8, 1), (16, 2), (32, 4)):
        ln = got[g]
        print(f"{g}-GPU PFI cap:", ln)
        assert f"--nodes={nodes} " in ln and "--gres=gpu:8" in ln and "--exclusive" in ln, ln
        assert "-p gpuq" in ln and "-A acct" in ln, ln
        assert "--gpus=" not in ln and "--mem " not in ln, ln
    (paper,) = submissions(tmp_path / "paper", env_path, "config/paper.yaml",
                           [str(tmp_path / "paper/res/runs/qwen/local/ckpt-on/r1/trace.csv")])
    print("paper training cell:", paper)
    assert "--nodes=1 " in paper and "--gres=gpu:4" in paper
    assert "--exclusive" in paper and "-t 120" in paper
    assert "-p gpuq" in paper and "--gpus=" not in paper
