"""Which failures of a measuring run are data and which are the infrastructure's (issue 40).

A PFI cap run that runs out of memory, or fails in a way the cap itself causes (a cap the device
refuses, too few steps for a steady state), is a result: its curve point records the failure and
the job succeeds. A lost node, an NCCL error or a kill by a signal (Slurm's time limit,
preemption, a cancelled step) says nothing about the cap: the job must fail (non-zero exit), so
that Snakemake's `retries`, `--keep-going` and Slurm's requeue act on it instead of a placeholder
point being kept as if measured.

`classify` reads the run's exit status and the tail of its output; `run_logged` runs a command
with its output passed through (to the job's log) while keeping that tail.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from typing import TextIO

from ..errors import SetupError

# out of memory (GPU or host): the cap's setting ran out, a recorded point
DATA_MARKERS = (
    r"CUDA out of memory", r"OutOfMemoryError", r"\bout of memory\b", r"oom[-_ ]kill",
)
# the cluster, not the cap: the job fails so that retries / requeue act
INFRASTRUCTURE_MARKERS = (
    r"\bNCCL\b.*(error|Error|ERROR|WARN.*failed)", r"DistBackendError", r"ncclInternalError",
    r"ncclSystemError", r"ncclUnhandledCudaError", r"ncclRemoteError",
    r"[Nn]ode failure", r"NODE_FAIL", r"DUE TO TIME LIMIT", r"CANCELLED AT",
    r"Job step aborted", r"RendezvousTimeoutError", r"RendezvousConnectionError",
    r"Signal \d+ \(SIG\w+\) received",
)
TAIL_LINES = 400
INFRASTRUCTURE_EXIT = 75  # EX_TEMPFAIL: `wattlife pfi-sweep`'s exit on an infrastructure failure


class InfrastructureFailure(SetupError):
    """A run that failed for a reason outside the measured setting (node, network, signal)."""


def _first(patterns: tuple[str, ...], text: str) -> str | None:
    for pat in patterns:
        m = re.search(pat, text)
        if m:
            line_start = text.rfind("\n", 0, m.start()) + 1
            line_end = text.find("\n", m.end())
            return text[line_start:line_end if line_end >= 0 else None].strip()[:200]
    return None


def classify(rc: int, output: str) -> tuple[str | None, str]:
    """(kind, why) of a run's end: kind None (it succeeded), "data" or "infrastructure".
    Out of memory is data whatever followed it (the other ranks' NCCL errors, torchrun's kill);
    then an exit by a signal (rc < 0, or > 128 as a shell reports it) or an infrastructure
    message is the infrastructure's; any other failure stays data, as the cap's own failure."""
    if rc == 0:
        return None, ""
    oom = _first(DATA_MARKERS, output)
    if oom:
        return "data", f"out of memory ({oom})"
    if rc < 0 or rc > 128:
        sig = -rc if rc < 0 else rc - 128
        return "infrastructure", f"ended by signal {sig} (exit {rc})"
    infra = _first(INFRASTRUCTURE_MARKERS, output)
    if infra:
        return "infrastructure", f"exit {rc}: {infra}"
    return "data", f"exit {rc}"


def run_logged(cmd: str, out: TextIO | None = None) -> tuple[int, str]:
    """Run `cmd` in bash, its output (stdout and stderr) passed through to `out` (stdout) line
    by line; returns its exit status and the last TAIL_LINES lines."""
    sink = out or sys.stdout
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", bufsize=1) as p:
        assert p.stdout is not None
        for line in p.stdout:  # a log's lines (not a trace): flushed as they come
            sink.write(line)
            sink.flush()
            tail.append(line)
        rc = p.wait()
    return rc, "".join(tail)
