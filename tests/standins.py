"""Stand-ins for workflow tests on Slurm without Slurm and without measuring:
- a Slurm whose `sbatch` records what the real plugin submits (`fake_slurm`, `submissions`: the
  Slurm profile as shipped, the site values only);
- finished measurements (`publish_standin`, `downloaded`: a training cell waits for its
  dataset's download): the files, sealed and published as the workflow's own jobs do
  (wattlife.custody), under the pointer of the slice the workflow computes for the same config
  (`workflow_slice`), so that the workflow sees a current measurement and never remakes it (a
  stand-in without its pointer is a missing measurement: its link rule takes a request and
  its job runs)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from snakemake.cli import parse_config
from snakemake.utils import update_config

from conftest import REPO, copy_workflow
from wattlife import custody as C
from wattlife.config import load_config
from wattlife.custody.attempts import new_attempt
from wattlife.custody.seal import seal_attempt
from wattlife.jobs import measurement_slices

#: what a finished transfer's link rule declares (rules/prepare.smk, link_transfer)
TRANSFER_FILES = ("config.json", "trace.csv", "events.csv", "meta.json", "record.json",
                  "run.log")


def workflow_slice(configfile: Path, entries: Sequence[str], ident: str, scratch: Path,
                   transfers: int = 1) -> dict[str, Any]:
    """The slice the workflow computes for measurement `ident` (`transfers/<artefact>`, a cell
    id, `pfi/<cell>/cap-<W>`) from `configfile` and the `--config` entries, merged as Snakemake
    merges them, defaults filled (`scratch`: a folder for the merged file)."""
    cfg = yaml.safe_load(Path(configfile).read_text())
    update_config(cfg, parse_config(list(entries)))
    scratch.mkdir(parents=True, exist_ok=True)
    merged = scratch / "standin-config.yaml"
    merged.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return measurement_slices(load_config(merged), transfers)[ident][1]


def publish_standin(res: Path, ident: str, slice_doc: dict[str, Any],
                    names: Iterable[str] = TRANSFER_FILES) -> Path:
    """Empty files `names` as a sealed attempt of `ident` under `res`, published (its folder's
    hard links and pointer, as `wattlife attempt` leaves them); the pointer's path."""
    root, folder = C.folders_of(res, ident)
    attempt = new_attempt(root)
    for name in names:
        (attempt / name).write_text("")
    now = time.time()
    seal_attempt(attempt, ident, slice_doc, now, now, 0)
    return C.publish(res, attempt, folder)


SITE = ("slurm={account: acct, gpu_partition: gpuq, partitions: {h100: h100q},"
        " constraints: {h100: h100}}")
# the partitions' nodes as `sinfo -h -N -o '%P|%c|%m'` lists them: CPUs and memory (MB)
SINFO = "gpuq*|112|2000000\ngpuq*|112|2050000\nh100q|96|1500000\ncpuq|64|256000\n"
FEATURES = "gpuq|(null)\nh100q|h100\ncpuq|(null)\n"  # `sinfo -h -o '%R|%f'`


def fake_slurm(bindir: Path, log: Path) -> None:
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
    fake_slurm(tmp_path / "bin", log)
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
            # at once (SIGTERM made it try to cancel the fake jobs for 10 s; nothing here is
            # read after its sbatch lines)
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
