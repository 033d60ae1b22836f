"""What the Slurm profile, as shipped, asks sbatch for: a recording `sbatch` on PATH (no Slurm
here) receives the real plugin's submissions of PFI caps of 8, 16 and 32 GPUs and of a paper
training cell (tests/standins.py: the recording Slurm, `submissions`, the stand-in downloads)."""

import re

import pytest
import yaml

from conftest import REPO
from standins import downloaded, submissions

pytestmark = pytest.mark.slow


def test_sbatch_lines_of_pfi_cells_and_a_paper_cell(tmp_path, env_path):
    """Whole nodes of the cell's hardware, whatever their size: --exclusive, no --mem but the
    whole node's memory (SBATCH_MEM_PER_NODE=0, `submissions`), one CPU for the executor's step
    (the measurement runs in a whole-node step of its own), the partition / constraint of the
    hardware profile; nothing read from sinfo's node sizes."""
    cells = yaml.safe_load((REPO / "config/pfi.yaml").read_text())["pfi_matrix"]["cells"]
    by_gpus = {c["gpus"]: name for name, c in cells.items() if c.get("hardware") != "h100"}
    h100 = next(name for name, c in cells.items() if c.get("hardware") == "h100")
    res = tmp_path / "pfi/res"
    names = [by_gpus[8], by_gpus[16], by_gpus[32], h100]
    lines = submissions(tmp_path / "pfi", env_path, "config/pfi.yaml",
                        [str(res / f"pfi/{n}/cap-700/curve-point.csv") for n in names])
    got = {n: next(ln for ln in lines if re.search(rf"_wildcards_{n}_700_[0-9a-f]{{16}} ", ln))
           for n in names}  # a PFI cap's job: its cell, cap and config slice's hash
    for n, nodes in ((by_gpus[8], 1), (by_gpus[16], 2), (by_gpus[32], 4)):
        ln = got[n]
        print(f"{cells[n]['gpus']}-GPU PFI cap:", ln)
        assert f"--nodes={nodes} " in ln and "--gres=gpu:8" in ln and "--exclusive" in ln, ln
        assert "-p gpuq" in ln and "-A acct" in ln and " -C " not in ln, ln
        assert "--cpus-per-task=1 " in ln and " --mem " not in ln, ln
        assert "--gpus=" not in ln, ln
    ln = got[h100]
    print(f"H100 PFI cap ({cells[h100]['gpus']} GPUs):", ln)
    assert "-p h100q" in ln and "-C h100" in ln and "--exclusive" in ln, ln
    assert "--cpus-per-task=1 " in ln and " --mem " not in ln, ln
    downloaded(tmp_path / "paper", "config/paper.yaml", "wikitext-103")
    (paper,) = submissions(tmp_path / "paper", env_path, "config/paper.yaml",
                           [str(tmp_path / "paper/res/runs/qwen/local/ckpt-on/r1/trace.csv")])
    print("paper training cell:", paper)
    assert "--nodes=1 " in paper and "--gres=gpu:4" in paper
    assert "--exclusive" in paper and "-t 120" in paper
    assert "-p gpuq" in paper and "--gpus=" not in paper
    assert "--cpus-per-task=1 " in paper and " --mem " not in paper


def test_a_users_slurm_extra_adds_to_the_suites_flags(tmp_path, env_path):
    """`slurm.extra` in the config keeps --exclusive on cells of both workload kinds (before:
    `--set-resources execute_tokenizer:slurm_extra=...` replaced it on the `execute_tokenizer_r2`
    rule and all other repeat >= 2 rules). One measuring rule per kind now takes every repeat as
    a wildcard (test_workflow_idioms), and a repeat r >= 2 is submitted only once round r - 1 has
    ended (`round_done`), which these fake jobs never do: the first round's jobs of both kinds,
    all submitted at once (on a cluster no cell of a round waits for the one before it in the
    round's seeded order: that order is a local run's, rules/common.smk ORDER_ENFORCED)."""
    extra = ("slurm={account: acct, gpu_partition: gpuq, extra: '--mail-type=END'}",)
    downloaded(tmp_path, "config/paper.yaml", "wikitext-103", extra)
    downloaded(tmp_path, "config/paper.yaml", "imagenet-1k", extra)
    cells = ["qwen/local/ckpt-on/r1", "qwen/shared/ckpt-off/r1", "resnet/local/ckpt-on/r1"]
    lines = submissions(tmp_path, env_path, "config/paper.yaml",
                        [str(tmp_path / f"res/runs/{c}/trace.csv") for c in cells],
                        config=extra)
    assert len(lines) == len(cells), lines
    assert {"rule_execute_tokenizer", "rule_execute"} <= {
        re.search(r"--comment (rule_\w+?)_wildcards", ln).group(1) for ln in lines}
    for line in lines:
        print("paper cell with a user extra:", line)
        assert "--exclusive" in line and "--mail-type=END" in line, line


def test_a_paper_cell_waits_for_its_dataset_and_transfers_go_to_the_cpu_partition(
        tmp_path, env_path):
    """Before its download has run, the qwen cell is not submitted: the download is, in the CPU
    partition named by `prepare.download_on`, with a runtime from the artefact's size."""
    (line,) = submissions(tmp_path, env_path, "config/paper.yaml",
                          [str(tmp_path / "res/runs/qwen/local/ckpt-on/r1/trace.csv")],
                          config=("prepare={download_on: cpuq}",))
    print("paper transfer (wikitext-103):", line)
    assert "rule_download_wildcards_wikitext-103" in line and "-p cpuq" in line, line
    assert "--exclusive" not in line and "-t 32" in line and "--cpus-per-task=1" in line, line
