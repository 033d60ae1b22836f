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

from conftest import copy_workflow
from standins import publish_standin, workflow_slice

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SITE = ("slurm={account: acct, gpu_partition: gpuq, partitions: {h100: h100q},"
        " constraints: {h100: h100}}")
# the partitions' nodes as `sinfo -h -N -o '%P|%c|%m'` lists them: CPUs and memory (MB)
SINFO = "gpuq*|112|2000000\ngpuq*|112|2050000\nh100q|96|1500000\ncpuq|64|256000\n"
FEATURES = "gpuq|(null)\nh100q|h100\ncpuq|(null)\n"  # `sinfo -h -o '%R|%f'`


def _fake_slurm(bindir: Path, log: Path) -> None:
    """sbatch records its arguments and answers a job id; sinfo lists the partitions' nodes;
    the plugin's other queries answer nothing."""
    bindir.mkdir(parents=True)
    (bindir / "sbatch").write_text(  # the line, then the memory the environment asks for
        f'#!/bin/bash\necho "sbatch $* [mem-env ${{SBATCH_MEM_PER_NODE-unset}}]" >> {log}\n'
        f'wc -l < {log}\n')
    (bindir / "sacctmgr").write_text("#!/bin/bash\necho acct\n")
    (bindir / "sinfo").write_text(  # the partitions' features (`%R|%f`), else their nodes
        f"#!/bin/bash\ncase \"$*\" in *%f*) printf '{FEATURES}';; *) printf '{SINFO}';; esac\n")
    for name in ("sacct", "squeue", "scontrol", "scancel"):
        (bindir / name).write_text("#!/bin/bash\nexit 0\n")
    for f in bindir.iterdir():
        f.chmod(0o755)


def submissions(tmp_path: Path, env: dict, configfile: str, targets: list[str],
                extra: tuple[str, ...] = (), config: tuple[str, ...] = ()) -> list[str]:
    """The sbatch lines of `targets` through `--profile profiles/slurm` with the site values
    only (and `extra` options); every job asks for memory: its own `--mem`, else (a measuring
    job) the whole node's through SBATCH_MEM_PER_NODE=0 (the plugin then warns of no `mem_mb`:
    docs/USAGE.md)."""
    log = tmp_path / "sbatch.log"
    _fake_slurm(tmp_path / "bin", log)
    wf = copy_workflow(tmp_path / "workflow")  # its .snakemake/ there, not in the checkout
    env = dict(env, PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}")
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--nolock",
           "--configfile", configfile, "--config", *overrides(tmp_path, config), *extra, "--",
           *targets]
    p = subprocess.Popen(cmd, cwd=wf, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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
    for ln in lines:  # no job without memory: its own --mem, else the whole node's (--mem=0)
        assert " --mem " in ln or ln.endswith("[mem-env 0]"), ln[-300:]
    return [re.sub(r" --wrap=.*", "", ln) for ln in lines]


def overrides(tmp_path: Path, config: tuple[str, ...] = ()) -> list[str]:
    """`submissions`' `--config` entries: its results and storage under `tmp_path`, the site."""
    return [f"results_dir={tmp_path / 'res'}", SITE,
            f"storage={{shared: {tmp_path / 'shared'}, local: {tmp_path / 'local'}}}",
            f"prepare={{upload: {{target: {tmp_path / 'outbox'}}}}}", *config]


def downloaded(tmp_path: Path, configfile: str, artefact: str,
               config: tuple[str, ...] = ()) -> None:
    """A finished download of `submissions(tmp_path, ..., configfile, ..., config=config)` (a
    training cell waits for its dataset's): stand-in files, sealed and published under the
    pointer of the slice that run computes (standins), so the run takes it as current."""
    ident = f"transfers/{artefact}"
    sl = workflow_slice(REPO / configfile, overrides(tmp_path, config), ident, tmp_path)
    publish_standin(tmp_path / "res", ident, sl)


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
