"""`wattlife measure`: one training cell measured as an attempt of its own, sealed and published.

Under the cell's lock (`<results>/attempts/<cell>/.wattlife-run.lock`, runlock: a live holder,
e.g. the orphan of a killed controller, is waited for, never run beside), in this order:
1. adopt: if the cell's pointer for this slice is there and sound (an orphan published it after
   this job was scheduled), or a sealed attempt of this slice exists that is not retired, it is
   (re)published and nothing is measured;
2. else a new attempt folder gets the slice (config.json), the launcher's command line (built
   here, from the slice: wattlife.launch) runs with the attempt as its run folder, and on exit 0
   the attempt is sealed (files read-only) and published; otherwise failed.json keeps its reason.
When the job ends (any outcome), the cell's checkpoint folder is removed (`--keep-checkpoint`:
kept, for the upload cell): a checkpoint is not a measurement, no seal lists it. A multi-node
cell in Slurm removes it on every node of its job (a step of one `wattlife drop-checkpoint
--folder` per node: a `local` root is each node's own disk).
The command runs in a session of its own; SIGINT / SIGTERM (the user's say) are forwarded to it,
SIGHUP (the controller's terminal lost) is not: the measurement goes on as an orphan and is adopted.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contracts import write_text
from ..errors import InputError
from ..runlock import run_folder_lock
from .attempts import Attempt, attempts_dir, attempts_of, cell_dir, mark, new_attempt
from .publish import pointer_name, publish, published
from .seal import canonical, seal_attempt, slice_hash, verify_files

log = logging.getLogger("wattlife.measure")
CELL_ID = re.compile(r"^(?P<workload>[^/]+)/(?P<storage>[^/]+)/ckpt-(?P<checkpoint>[^/]+)"
                     r"/r(?P<repeat>[0-9]+)$")
#: what stops a measurement (the user's say: Ctrl-C, Snakemake's or Slurm's SIGTERM), forwarded to
#: the command's session. SIGHUP (the controller's terminal lost) is not: keep_on_hangup
FORWARD = (signal.SIGINT, signal.SIGTERM)


def cell_keys(cell: str) -> dict[str, str]:
    m = CELL_ID.match(cell)
    if not m:
        raise InputError(f"--cell {cell!r}: expected <workload>/<storage>/ckpt-<mode>/r<N>")
    return m.groupdict()


def cell_command(slice_doc: dict[str, Any], cell: str, attempt: Path,
                 order: dict[str, Any] | None = None) -> str:
    """The cell's command line with `attempt` as its run folder (wattlife.launch); `order` (the
    cell's place in its round, `jobs.cell_positions`) joins its keys in meta.json's `cell`."""
    from .. import jobs as J
    from ..launch import LaunchSpec, build_command, train_args

    k = cell_keys(cell)
    ex = J.slice_execution(slice_doc)
    if ex is None:
        raise InputError(f"--slice of {cell}: no `execution` section")
    spec = LaunchSpec.for_execution(ex)
    conf = str(attempt / "config.json")
    inner = train_args(conf, k["workload"], k["storage"], k["checkpoint"], str(attempt / "work"))
    return build_command(spec, config=conf, run_dir=str(attempt), run_id=cell_run_id(cell),
                         cell={**k, **(order or {})}, inner=inner)


def cell_run_id(cell: str) -> str:
    """The run id of a cell's measurement: its events' run_id and its checkpoint folder's name."""
    k = cell_keys(cell)
    return f"{k['workload']}-{k['storage']}-ckpt{k['checkpoint']}-r{k['repeat']}"


def every_node_drop_command(folder: Path, nodes: int) -> str:
    """The command that removes `folder` (its variables expanded by each node) on each of the
    job's `nodes` nodes: one `wattlife drop-checkpoint --folder` per node, a step of its own."""
    from ..launch import each_node_step

    return f"{each_node_step(nodes)} wattlife drop-checkpoint --folder {shlex.quote(str(folder))}"


def drop_on_every_node(folder: Path, cell: str, nodes: int) -> bool:
    """Run `every_node_drop_command` (each node's line logged); False where it failed."""
    try:
        p = subprocess.run(["bash", "-c", every_node_drop_command(folder, nodes)],
                           capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        p = subprocess.CompletedProcess([], 1, "", str(exc))
    for line in p.stdout.splitlines():
        log.info("%s: %s", cell, line)
    if p.returncode != 0:
        log.warning("%s: the step removing the checkpoint folder %s on each of the job's %d "
                    "nodes failed (exit %d: %s); removed on this node only: remove it on the "
                    "others by hand", cell, folder, nodes, p.returncode,
                    (p.stderr.strip().splitlines() or ["no output"])[-1])
    return p.returncode == 0


def drop_cell_checkpoints(folder: Path, cell: str, nodes: int = 1) -> None:
    """Remove the cell's checkpoint folder (one log line per node says what): no step reads
    it, except the upload cell's, which is kept (`--keep-checkpoint`). A checkpoint is not a
    measurement: no seal lists it (wattlife.workloads.checkpoint_space). A cell of `nodes` > 1
    in a Slurm job: on each of its nodes (`drop_on_every_node`), else (or where that failed) on
    this node; `folder`'s variables are expanded by the node that removes it."""
    from ..workloads.checkpoint_space import remove_checkpoint_folder

    if nodes > 1 and os.environ.get("SLURM_JOB_ID") and drop_on_every_node(folder, cell, nodes):
        return
    try:
        log.info("%s: %s", cell, remove_checkpoint_folder(Path(os.path.expandvars(folder))))
    except OSError as exc:  # the measurement stands; the folder is left, said
        log.warning("%s: the checkpoint folder %s could not be removed (%s); remove it by hand",
                    cell, folder, exc)


@contextlib.contextmanager
def cell_lock(root: Path, poll_s: float, sleep: Callable[[float], None] = time.sleep
              ) -> Iterator[None]:
    """Hold the cell's run lock; while a live job holds it, wait (one log line naming it)."""
    said = False
    while True:
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(run_folder_lock(root))
            except RuntimeError as busy:
                if not said:
                    log.warning("%s; waiting for it to end, then adopting its result", busy)
                    said = True
            else:
                yield
                return
        sleep(poll_s)


#: every job's custody lines of a cell (or PFI cap, transfer), appended beside its attempts: the
#: rule's log of a job is remade by the next job of the same cell, this file never
JOB_LOG = "custody.log"


@contextlib.contextmanager
def job_log(root: Path) -> Iterator[None]:
    """Append this job's log lines to `root`/custody.log too (host, pid on each line), so that an
    orphan's lines survive the rerun's job, whose rule log has the same name."""
    root.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(root / JOB_LOG, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {socket.gethostname().split('.')[0]} pid {os.getpid()}: %(levelname)s: "
        "%(message)s"))
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        handler.close()


@dataclass(frozen=True)
class Target:
    """What one measuring job measures: `ident` (a cell id, or the published folder relative to
    the results folder), the folder of its attempts, the folder it is published in, the file of
    the attempt that keeps the command's output (None: this process's own output) and what an
    attempt's published files must show to be adopted (None: any sealed attempt of the slice)."""
    ident: str
    attempts: Path
    folder: Path
    output: str | None = "run.log"
    adopt_if: Callable[[Path], bool] | None = None


def cell_target(results: Path, cell: str) -> Target:
    return Target(cell, attempts_dir(results, cell), cell_dir(results, cell))


def adoptable(results: Path, t: Target, h: str) -> Path | None:
    """The pointer of a sound result of slice `h` already there, or publish the newest sealed,
    sound, not retired attempt of that slice; None when there is none."""
    ok = t.adopt_if or (lambda _folder: True)
    pub = published(t.folder)
    if pub and pub[1].get("slice_hash") == h and not verify_files(t.folder, pub[1]["files"]) \
            and ok(t.folder):
        return pub[0]
    candidates: list[Attempt] = [a for a in attempts_of(t.attempts)
                                 if a.state == "sealed" and a.slice_hash == h and not a.retired]
    for a in reversed(candidates):
        if a.seal and not verify_files(a.folder, a.seal["files"]) and ok(a.folder):
            return publish(results, a.folder, t.folder)
    return None


def _die_with_parent() -> None:
    """preexec_fn: the command gets SIGTERM if this process dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def run_command(cmd: str, logfile: Path | None) -> tuple[int, str | None]:
    """Run `cmd` (bash) with its output in `logfile` (None: this process's), in a session of its
    own (a signal of the controller's terminal never reaches it directly); (exit status, the
    signal that stopped this process meanwhile, forwarded to the command's process group)."""
    got: list[str] = []
    with open(logfile, "wb") if logfile else contextlib.nullcontext(None) as out:
        proc = subprocess.Popen(["bash", "-c", cmd], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                start_new_session=True)

        def forward(signum: int, _frame: Any) -> None:
            got.append(signal.Signals(signum).name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)

        before = {s: signal.signal(s, forward) for s in FORWARD}
        try:
            rc = proc.wait()
        finally:
            for s, h in before.items():
                signal.signal(s, h)
    return (128 - rc if rc < 0 else rc), (got[0] if got else None)


@contextlib.contextmanager
def keep_on_hangup(ident: str) -> Iterator[None]:
    """A lost terminal of the controller (SIGHUP to its process group, this job included) does not
    stop the measurement: it goes on as an orphan, is sealed and published, and the rerun waits
    for it and adopts it (one line in the job's log says so). Stopping it is the user's say:
    SIGTERM / SIGINT (scancel, kill)."""
    said: list[int] = []

    def on_hup(_signum: int, _frame: Any) -> None:
        if not said:
            said.append(1)
            log.warning("%s: the controller's terminal was lost (SIGHUP): measuring on; a rerun "
                        "waits for this attempt and adopts its result", ident)

    before = signal.signal(signal.SIGHUP, on_hup)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, before)


def attempt_new(results: Path, t: Target, slice_doc: dict[str, Any],
                command: Callable[[Path], str]) -> int:
    """Measure `t` in a new attempt running `command(attempt)`; seal and publish it on success,
    else keep it aside with its reason (failed.json)."""
    attempt = new_attempt(t.attempts)
    log.info("%s: measuring in %s", t.ident, attempt)
    write_text(attempt / "config.json", canonical(slice_doc) + "\n")
    started = time.time()
    try:
        rc, sig = run_command(command(attempt), attempt / t.output if t.output else None)
    except Exception as exc:
        mark(attempt, "failed.json", reason=f"not started: {exc}")
        raise
    if rc != 0 or sig:
        why = f"the measuring command exited {rc}" + (f" after {sig}" if sig else "")
        mark(attempt, "failed.json", reason=why, exit_code=rc)
        log.error("%s: %s; attempt %s kept aside, not published (see its output)", t.ident, why,
                  attempt)
        return rc or 1
    seal = seal_attempt(attempt, t.ident, slice_doc, started, time.time(), rc)
    for rel in seal["files"]:
        p = attempt / rel
        p.chmod(p.stat().st_mode & 0o555)
    pointer = publish(results, attempt, t.folder, fresh=seal)
    log.info("%s: sealed and published (%s)", t.ident, pointer)
    return 0


def measure_new(results: Path, cell: str, slice_doc: dict[str, Any]) -> int:
    """Measure the cell in a new attempt; seal and publish it on success."""
    return attempt_new(results, cell_target(results, cell), slice_doc,
                       lambda attempt: cell_command(slice_doc, cell, attempt))


def under_custody(results: Path, t: Target, slice_doc: dict[str, Any],
                  command: Callable[[Path], str], poll_s: float | None = None,
                  after: Callable[[], None] | None = None) -> int:
    """Under `t`'s lock (a live holder waited for): adopt a sealed result of this slice, else
    measure a new attempt; then `after()` (still under the lock, whatever the outcome); the exit
    status."""
    if poll_s is None:
        poll_s = 15.0 if os.environ.get("SLURM_JOB_ID") else 1.0
    with keep_on_hangup(t.ident), job_log(t.attempts), cell_lock(t.attempts, poll_s):
        try:
            done = adoptable(results, t, slice_hash(slice_doc))
            if done is not None:
                log.info("%s: adopted the sealed result of this slice (%s); nothing measured",
                         t.ident, done)
                return 0
            return attempt_new(results, t, slice_doc, command)
        finally:
            if after is not None:
                after()


def measure_cell(results: str | Path, cell: str, slice_doc: dict[str, Any],
                 pointer: str | Path | None = None, poll_s: float | None = None,
                 checkpoints: Path | None = None, checkpoint_nodes: int = 1,
                 order: dict[str, Any] | None = None) -> int:
    """The `wattlife measure` command (see the module docstring); its exit status. With
    `checkpoints` (the cell's checkpoint folder, `cli.custody.checkpoint_folder`), that folder
    is removed when the job ends, on each of the cell's `checkpoint_nodes` nodes
    (`drop_cell_checkpoints`); `order`: the cell's place in its round, recorded in its
    meta.json (`cell_command`)."""
    results = Path(results)
    cell_keys(cell)
    h = slice_hash(slice_doc)
    if pointer is not None and Path(pointer).name != pointer_name(h):
        raise InputError(f"--pointer {pointer}: the slice's hash is {h} ({pointer_name(h)})")
    make = cell_command if order is None else functools.partial(cell_command, order=order)
    return under_custody(results, cell_target(results, cell), slice_doc,
                         lambda attempt: make(slice_doc, cell, attempt), poll_s,
                         after=(lambda: drop_cell_checkpoints(checkpoints, cell,
                                                              checkpoint_nodes))
                         if checkpoints is not None else None)
