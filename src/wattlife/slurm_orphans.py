"""The Slurm jobs of a results folder's runs, after a killed controller (`wattlife slurm-orphans`).

The executor plugin names every job of one workflow run `<prefix>_<run uuid>` (the profile's
prefix: `wattlife`) and comments it `rule_<rule>_wildcards_<values joined by _>`; neither says
the results folder. So the controller records, at its start, its run ID (the plugin's "SLURM run
ID: ..." line of Snakemake's log) in `<results>/slurm/runs.csv` (`record_run`), and
`slurm-orphans RESULTS` acts on the jobs of those runs only; `--all` on every `wattlife_*` job of
the user (the old default), `--name` on one run. Each job is listed as what it measures (cell,
repeat, state, elapsed: `describe`), and `--wait` says at each look what is left.

The functions are pure apart from those that call `squeue` / `scancel` (given `run`, for tests).
"""

from __future__ import annotations

import csv
import os
import re
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import SetupError

Runner = Callable[..., subprocess.CompletedProcess[str]]

JOBNAME_PREFIX = "wattlife"  # profiles/slurm: slurm-jobname-prefix (job names wattlife_<run id>)
RUNS_FILE = Path("slurm") / "runs.csv"  # under the results folder
RUNS_COLUMNS = ["run_name", "started_utc", "host", "pid", "workdir"]
SQUEUE_FORMAT = "%i|%T|%j|%k|%M|%R"
_CELL = re.compile(r"^(?P<workload>.+)_(?P<storage>shared|local)_(?P<ckpt>on|off|sync|async)"
                   r"_(?P<repeat>\d+)_[0-9a-f]{16}$")
_CAP = re.compile(r"^(?P<pcell>.+)_(?P<cap>\d+(\.\d+)?)$")


@dataclass(frozen=True)
class SlurmJob:
    """One pending or running job as `squeue -o SQUEUE_FORMAT` lists it."""

    job_id: str
    state: str
    name: str
    comment: str
    elapsed: str = ""
    where: str = ""  # its nodes, or why it is pending


@dataclass(frozen=True)
class JobWhat:
    """What a job measures, read from the plugin's comment."""

    rule: str
    cell: str
    repeat: str


def describe(comment: str) -> JobWhat:
    """The rule, cell and repeat of a job from its comment `rule_<rule>_wildcards_<values>`
    (execute*: workload/storage/ckpt-<checkpoint>, repeat; pfi_cap*: the PFI cell at its cap)."""
    head, _, values = comment.partition("_wildcards_")
    rule = head.removeprefix("rule_").removeprefix("group_")
    m = _CELL.match(values)
    if m:
        return JobWhat(rule, f"{m['workload']}/{m['storage']}/ckpt-{m['ckpt']}", m["repeat"])
    m = _CAP.match(values) if rule.startswith("pfi_cap") else None
    if m:
        return JobWhat(rule, f"pfi/{m['pcell']} at {m['cap']} W", "")
    return JobWhat(rule, values, "")


def parse_squeue(text: str, names: Sequence[str] | None = None,
                 prefix: str = JOBNAME_PREFIX) -> list[SlurmJob]:
    """Jobs from `squeue -h -o SQUEUE_FORMAT` lines: those named one of `names` (runs' Slurm run
    IDs), else every one whose name starts with `<prefix>_` (every run of the suite)."""
    jobs = []
    for line in text.split("\n"):  # lines as Slurm ends them (not NEL, U+2028)
        parts = line.strip().split("|")
        if len(parts) < 4:
            continue
        if len(parts) > 6:  # a comment holding "|": the fields around it are fixed
            parts = parts[:3] + ["|".join(parts[3:-2])] + parts[-2:]
        job = SlurmJob(*parts)
        if (job.name in names) if names is not None else job.name.startswith(f"{prefix}_"):
            jobs.append(job)
    return jobs


def queued_jobs(names: Sequence[str] | None = None, run: Runner | None = None) -> list[SlurmJob]:
    """This user's pending and running Slurm jobs of the runs `names` (every suite run: None)."""
    try:
        p = (run or subprocess.run)(["squeue", "-h", "--me", "-o", SQUEUE_FORMAT],
                                    capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"squeue failed ({exc}): is Slurm reachable from here?") from None
    if p.returncode != 0:
        raise SetupError(f"squeue failed: {p.stderr.strip()}: is Slurm reachable from here?")
    return parse_squeue(p.stdout, names)


def cancel_jobs(jobs: Sequence[SlurmJob], run: Runner | None = None) -> None:
    """Cancel `jobs` (scancel <ids>)."""
    if not jobs:
        return
    p = (run or subprocess.run)(["scancel", *(j.job_id for j in jobs)], capture_output=True,
                                text=True, timeout=60)
    if p.returncode != 0:
        raise SetupError("scancel failed for " + " ".join(j.job_id for j in jobs))


def job_table(jobs: Sequence[SlurmJob]) -> list[str]:
    """The lines that say what each job is: id, state, elapsed, rule, cell, repeat, nodes."""
    out = ["JOBID\tSTATE\tELAPSED\tRULE\tCELL\tREPEAT\tNODES/REASON"]
    for j in jobs:
        w = describe(j.comment)
        out.append(f"{j.job_id}\t{j.state}\t{j.elapsed}\t{w.rule}\t{w.cell}\t{w.repeat or '-'}"
                   f"\t{j.where}")
    return out


def progress_line(jobs: Sequence[SlurmJob], waited_s: float, poll_s: float) -> str:
    """One line of `--wait`: how many jobs are left, by state, and since when it waits."""
    states = ", ".join(f"{n} {s}" for s, n in sorted(Counter(j.state for j in jobs).items()))
    return (f"waiting for {len(jobs)} job(s) ({states}; {', '.join(j.job_id for j in jobs)}): "
            f"{waited_s / 60:.1f} min so far, next look in {poll_s:g} s")


def wait_jobs(names: Sequence[str] | None, poll_s: float = 30, run: Runner | None = None,
              say: Callable[[str], None] = print,
              sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> None:
    """Return once no job of the runs `names` (every suite run: None) is pending or running,
    saying at each look what is left (and each job that left)."""
    t0 = clock()
    seen: set[str] = set()
    while True:
        jobs = queued_jobs(names, run)
        ids = {j.job_id for j in jobs}
        for gone in sorted(seen - ids):
            say(f"job {gone} left the queue")
        if not jobs:
            return
        say(progress_line(jobs, clock() - t0, poll_s))
        seen = ids
        sleep(poll_s)


# -- which runs wrote to a results folder -----------------------------------------------------


def run_name_from_log(text: str) -> str | None:
    """The plugin's run ID (the job name of every job of the run) from Snakemake's log text."""
    found = re.findall(r"SLURM run ID: (\S+)", text)
    return found[-1] if found else None


def run_name_from_logs(logs: object) -> str | None:
    """The run ID from Snakemake's log file(s) (onstart's `log`: a path or a list of them)."""
    paths = logs if isinstance(logs, (list, tuple)) else [logs]
    for p in paths:
        if p and Path(str(p)).is_file():
            name = run_name_from_log(Path(str(p)).read_text(errors="replace"))
            if name:
                return name
    return None


def record_run(results: str | Path, run_name: str, workdir: str | None = None) -> Path:
    """Append this controller's Slurm run ID to `<results>/slurm/runs.csv` (one controller per
    results folder at a time: custody's controller lock)."""
    path = Path(results) / RUNS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    row = [run_name, datetime.now(timezone.utc).isoformat(timespec="seconds"),
           socket.gethostname(), str(os.getpid()), workdir or os.getcwd()]
    with path.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(RUNS_COLUMNS)
        w.writerow(row)
    return path


def recorded_runs(results: str | Path) -> list[str]:
    """The Slurm run IDs recorded for `results` (none: an empty list)."""
    path = Path(results) / RUNS_FILE
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return [r["run_name"] for r in csv.DictReader(fh) if r.get("run_name")]
