"""How long Snakemake takes to build the DAG of a preset with many repeats (issue 40): a dry run
of `config/paper.yaml` with `execution.repeats: N`, in a scratch copy of the workflow (its
.snakemake/ and results there, never in the checkout), timed from the outside.

    PYTHONPATH=src python3 benchmarks/dag_time.py --repeats 100 --runs 3

Prints the wall and CPU time of each dry run, their medians, the number of jobs and the
machine's load average (on a loaded machine the wall time is the other work's as much as this
one's: compare the CPU seconds, and figures of one call only).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "rules", "config", "scripts", "profiles", "report", "envs")


def scratch_workflow(dest: Path) -> Path:
    """A copy of the workflow's files (links resolved) in `dest`."""
    for name in WORKFLOW_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=False)
        else:
            shutil.copy2(src, dest / name)
    return dest


def dry_run(wf: Path, preset: str, repeats: int) -> tuple[float, float, int]:
    """Wall and CPU seconds (user + system of the child) of one `snakemake -n` of `preset` with
    `repeats`, and its job count."""
    path = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{path}")
    overlay = wf / f"repeats-{repeats}.yaml"
    overlay.write_text(f"results_dir: {wf / 'res'}\nexecution: {{repeats: {repeats}}}\n")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "8", "--configfile", preset,
           str(overlay)]
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, cwd=wf, env=env, capture_output=True, text=True)
    took, r1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        sys.exit(f"dry run failed (rc {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")
    m = re.search(r"^total\s+(\d+)$", p.stdout, re.M)
    return took, cpu, int(m.group(1)) if m else -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--preset", default="config/paper.yaml")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wattlife-dag-") as tmp:
        wf = scratch_workflow(Path(tmp))
        times, cpus, jobs = [], [], -1
        for _ in range(a.runs):
            took, cpu, jobs = dry_run(wf, a.preset, a.repeats)
            times.append(took)
            cpus.append(cpu)
    print(f"preset {a.preset}, repeats {a.repeats}: {jobs} jobs")
    print("dry-run wall s: " + ", ".join(f"{t:.2f}" for t in times)
          + f"; median {statistics.median(times):.2f}")
    print("dry-run CPU s (user + system): " + ", ".join(f"{t:.2f}" for t in cpus)
          + f"; median {statistics.median(cpus):.2f}")
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
