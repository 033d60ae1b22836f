"""Every shell command README.md shows runs as written (issue 42).

The commands are the lines of the README's ```bash blocks (a trailing `\\` joins lines). Each is
classified in HOW: run as written; dry-run (`-n`: it would measure, or submit to a cluster);
`--help` (it would query a cluster); `make -n` (the target's recipe, not its run: the demo, the
test suite and lint are the suite itself, run by CI); or skipped with the reason. A command the
table does not know fails the test, so a new README command must say how it is checked.

Every block runs as one bash script (`set -e`, so `$R` of one line reaches the next) in a copy
of the checkout in a temporary folder (results/reference linked in read-only, `.venv` a link to
this interpreter's environment, `/tmp/` in a command replaced by the test's own folder): the
checkout is never written to. `make` runs with `-o install`: the environment is this one.
Slurm's commands on PATH are stubs that record any call; a dry run may query, never submit.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

README = REPO / "README.md"

RUN, DRY, HELP, MAKE_N, SKIP = "run", "dry-run", "help", "make -n", "skip"

# command (comment stripped, whitespace collapsed) -> (how, why)
HOW: dict[str, tuple[str, str]] = {
    "make demo": (MAKE_N, "installs (GB), runs the demo (minutes); its pipeline dry-run below"),
    "make test": (MAKE_N, "the whole suite"),
    "make install WATTLIFE_CPU=1": (MAKE_N, "installs (2 GB); test_lock checks its recipe"),
    "source .venv/bin/activate": (RUN, ""),
    ".venv/bin/wattlife pfi results/demo/tables/curves.csv -o /tmp/pfi.csv": (
        RUN, "on the demo's simulated sweep (`wattlife sweep --config config/config.yaml`)"),
    ".venv/bin/snakemake --profile profiles/local -n": (RUN, ""),
    ".venv/bin/snakemake --profile profiles/local --configfile config/node-demo.yaml": (
        DRY, "a measurement (minutes): tests/workflow/test_node_demo.py runs it end to end"),
    "wattlife run -- python examples/torch_loop.py": (RUN, ""),
    "R=$(ls -d runs/torch_loop-* | tail -1)": (RUN, ""),
    "wattlife attribute $R": (RUN, ""),
    "wattlife figures $R": (RUN, ""),
    "snakemake --profile profiles/local --configfile config/gpu1.yaml": (DRY, "needs a GPU"),
    "wattlife retire results/demo resnet/local/ckpt-on/r1": (
        RUN, "a cell not measured yet: nothing to retire (the retire + rerun: test_workflow)"),
    "snakemake --profile profiles/local --forcerun "
    "results/demo/runs/resnet/local/ckpt-on/r1/trace.csv": (DRY, "a measurement"),
    "snakemake --profile profiles/slurm --configfile config/paper.yaml --config "
    "'slurm={account: <account>, gpu_partition: <gpu partition>, "
    "cpu_partition: <cpu partition>}'": (DRY, "submits to a cluster"),
    "snakemake --profile profiles/slurm --configfile config/paper.yaml config/site.yaml": (
        DRY, "submits to a cluster"),
    "wattlife slurm-orphans results/paper": (HELP, "queries the cluster's queue"),
    "wattlife slurm-orphans results/paper --wait": (HELP, "waits on the cluster's queue"),
    "make figures-from-cache": (RUN, ""),
    "wattlife figures results/reference/h200/workflow/tables -o /tmp/h200-figures": (RUN, ""),
    "snakemake --cores 1 --configfile config/paper.yaml --allowed-rules figures --forcerun figures "
    "-- figures": (SKIP, "needs a cluster run's tables: test_figures_from_cache_schedules_"
                         "no_measurement dry-runs it without them and on stub tables"),
    "make test-fast": (MAKE_N, "the suite"),
    "make lint": (MAKE_N, "CI's lint (`.ci/run`)"),
}

SLOW_BLOCKS = ("wattlife run -- python examples/torch_loop.py", "make figures-from-cache")
SLURM_STUBS = ("sbatch", "sinfo", "squeue", "sacct", "scancel", "srun", "scontrol")


def _key(line: str) -> str:
    code = re.sub(r"\s+#.*$", "", line) if not line.lstrip().startswith("#") else ""
    return " ".join(code.split())


def readme_blocks() -> list[list[str]]:
    """The README's bash blocks, each a list of its commands (continuations joined)."""
    blocks = []
    for body in re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.S | re.M):
        commands = [_key(c) for c in body.replace("\\\n", " ").splitlines()]
        blocks.append([c for c in commands if c])
    return blocks


def _script(commands: list[str], tmp: Path) -> str:
    lines = ["set -euo pipefail"]
    for cmd in commands:
        how, _ = HOW[cmd]
        cmd = cmd.replace("/tmp/", f"{tmp}/out/")
        if how == RUN and cmd.startswith("make "):  # the environment is this one: no install
            lines.append(cmd.replace("make ", "make -o install ", 1))
        elif how == RUN:
            lines.append(cmd)
        elif how == DRY:
            lines.append(f"{cmd} -n")
        elif how == HELP:
            lines.append(" ".join(cmd.split()[:2]) + " --help")
        elif how == MAKE_N:
            lines.append(f"make -n -o install {cmd.split(' ', 1)[1]}")
    return "\n".join(lines) + "\n"


def checkout_copy(dest: Path) -> Path:
    """The tracked files of the checkout, results/reference linked, .venv this environment."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for name in files:
        if not name or name.startswith("results/") or not (REPO / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    (dest / "results").mkdir(exist_ok=True)
    (dest / "results" / "reference").symlink_to(REPO / "results" / "reference")
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


@pytest.fixture
def copy(tmp_path, env_path):
    work = checkout_copy(tmp_path / "checkout")
    stubs = tmp_path / "slurm-stubs"
    stubs.mkdir()
    for name in SLURM_STUBS:
        record = f'echo "{name} $*" >> {tmp_path}/slurm-calls'
        (stubs / name).write_text(f"#!/bin/sh\n{record}\nexit 1\n")
        (stubs / name).chmod(0o755)
    env = dict(env_path)
    env["PATH"] = f"{stubs}:{env['PATH']}"
    (tmp_path / "out").mkdir()
    return work, env, tmp_path


def test_every_readme_command_is_classified():
    commands = [c for block in readme_blocks() for c in block]
    assert commands, "no ```bash block in README.md"
    unknown = [c for c in commands if c not in HOW]
    assert not unknown, f"README.md commands without a HOW entry in {__file__}: {unknown}"
    assert not set(HOW) - set(commands), f"HOW names commands README.md no longer shows: " \
        f"{sorted(set(HOW) - set(commands))}"
    assert all(how != SKIP or why for how, why in HOW.values())


def test_readme_is_a_guide_of_at_most_250_lines():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    # "regenerate figures" never in the form that schedules the whole study (issue 42)
    assert "paper.yaml -R figures" not in text and "--allowed-rules figures" in text


def _blocks_params():
    params = []
    for i, block in enumerate(readme_blocks()):
        marks = [pytest.mark.slow] if any(c in SLOW_BLOCKS for c in block) else []
        params.append(pytest.param(i, block, marks=marks, id=f"block{i}-{block[0][:30]}"))
    return params


@pytest.mark.parametrize("index,block", _blocks_params())
def test_readme_block_runs(copy, index, block):
    work, env, tmp = copy
    if any("results/demo/tables/curves.csv" in c for c in block):
        # the demo's simulated power-cap sweep, as its `powercap_sweep` rule makes it
        subprocess.run([str(Path(sys.prefix) / "bin" / "wattlife"), "sweep", "--config",
                        "config/config.yaml", "-o", "results/demo/tables/curves.csv"],
                       cwd=work, env=env, capture_output=True, check=True, timeout=120)
    script = _script(block, tmp)
    done = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    calls = (tmp / "slurm-calls").read_text() if (tmp / "slurm-calls").exists() else ""
    assert not re.search(r"^(sbatch|srun|scancel)", calls, re.M), calls
    if "wattlife figures $R" in block:
        run = sorted(work.glob("runs/torch_loop-*"))[-1]
        assert (run / "phases.csv").is_file() and list((run / "figures").glob("fig1_*.png"))
        torch_loop_energy_per_item(run, done.stdout)
    if "make figures-from-cache" in block:
        reference_figures_drawn(work / "results" / "reference-figures")
        assert list((tmp / "out" / "h200-figures").glob("fig1_*.png"))


def torch_loop_energy_per_item(run: Path, shown: str) -> None:
    """examples/torch_loop.py's run as the README runs it (its default 40 steps), attributed and
    drawn (`shown`: what the block printed): per-phase and per-item energy from the events'
    `step(items=...)` (the first 3 steps warm-up, contracts.warmup_count), its throughput, fig. 1,
    its folder's name as its id. (tests/run/test_own_script.py checks hf_trainer.py's the same
    way; this README run is the torch_loop example's one end-to-end run in the suite.)"""
    import pandas as pd

    assert "J/item" in shown and "items/s (all ranks)" in shown, shown
    ph = pd.read_csv(run / "tables" / "phase_summary.csv")
    assert {"data_load", "h2d", "forward", "backward", "optimizer"} <= set(ph["phase"])
    ev = pd.read_csv(run / "events.csv")
    steps = ev.loc[ev["phase"] == "step", "items"]
    batch, steady = steps.iloc[0], len(steps) - 3
    assert len(steps) == 40 and batch == 128  # the example's defaults, as the README runs it
    assert set(ph["items"].dropna()) == {batch * steady}  # the events' items, steady steps
    fwd = ph[(ph["phase"] == "forward") & (ph["device_kind"] == "cpu")].iloc[0]
    assert fwd["energy_per_item_j"] == pytest.approx(fwd["energy_j"] / (batch * steady))
    assert pd.read_csv(run / "tables" / "throughput.csv")["throughput"].iloc[0] > 0
    assert f"{run.name}/figures/fig1_phase_energy_time.png" in shown, shown
    assert set(pd.read_csv(run / "tables" / "phases.csv")["workload"]) == {run.name}  # its id


def reference_figures_drawn(out: Path) -> None:
    """`make figures-from-cache`'s first command (`wattlife figures --reference`: the reference
    tables made from the committed CSVs, then every reference figure drawn from them) drew the
    H200 and A100 figures into `out`, none of them empty. (The suite's one run of it: the test
    that called write_reference_tables and draw_reference itself repeated this command.)"""
    made = [p for p in out.iterdir() if p.is_file()]
    names = {m.name for m in made}
    assert {"h200_sampler.png", "h200_attribution.png", "h200_fig1_phase_energy_time.png",
            "h200_fig2_device_share.png", "a100_fig6_power_throughput.png",
            "a100_fig7_pfi.png", "a100_fig8_allocation.png"} <= names, names
    assert all(m.stat().st_size > 5000 for m in made), [(m.name, m.stat().st_size) for m in made]


def _jobs(stdout: str) -> dict[str, int]:
    """Snakemake's dry-run job table: rule -> count (without the `total` row)."""
    table = stdout.split("Job stats:", 1)[1] if "Job stats:" in stdout else ""
    rows = re.findall(r"^(\w+)\s+(\d+)$", table, re.M)
    return {rule: int(n) for rule, n in rows if rule != "total"}


def test_figures_from_cache_schedules_no_measurement(copy):
    """The README's Snakemake form of "figures from cache": without the study's tables it stops
    (MissingInputException) before scheduling anything; with them it schedules `figures` alone.
    The form the README used to show (`-R figures`) schedules all 140 jobs of the study."""
    work, env, _ = copy
    cmd = ["snakemake", "--cores", "1", "--configfile", "config/paper.yaml", "--allowed-rules",
           "figures", "--forcerun", "figures", "-n", "--", "figures"]
    missing = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    out = missing.stdout + missing.stderr
    assert missing.returncode != 0 and "MissingInputException" in out and not _jobs(out), out

    old = subprocess.run(["snakemake", "--cores", "1", "--configfile", "config/paper.yaml", "-R",
                          "figures", "-n"], cwd=work, env=env, capture_output=True, text=True,
                         timeout=120)
    assert old.returncode == 0 and _jobs(old.stdout).get("execute", 0) > 0  # the old form

    tables = work / "results" / "paper" / "tables"
    tables.mkdir(parents=True)
    for rule_input in re.findall(r"results/paper/tables/(\w+\.csv)", out):
        (tables / rule_input).write_text("stub\n")
    present = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert present.returncode == 0, present.stdout + present.stderr
    assert _jobs(present.stdout) == {"figures": 1}, present.stdout
