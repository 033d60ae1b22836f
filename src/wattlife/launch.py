"""The one place a measured job's command line is built: torchrun, srun, a sampler per node, and
power caps on every node of the job.

Used by the workflow's `execute` rule (training cells) and by `wattlife pfi-sweep --cap` (one PFI
cell at one cap). Layout of a run folder D:

- one node: `wattlife run` (or `wattlife launch-node` when a cap is set) wraps the launcher and
  writes D/trace.csv, D/events.csv (+ events.rank<N>.csv of the other ranks), D/meta.json;
- several nodes (or `per_node=True`): `srun` starts one `wattlife launch-node` per node, each
  setting the cap on its own GPUs, sampling its own node and wrapping its node's torchrun
  (c10d rendezvous on the job's first node), writing D/nodes/<host>/{trace,events,meta}; then
  `wattlife merge-nodes` merges them into D/trace.csv and D/events.csv and checks the nodes'
  clocks (D/clock_offsets.csv), and `wattlife launch-node --merge-meta` writes D/meta.json.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import Execution, SamplerSettings
from .errors import InputError
from .nodename import short_node_name

RDZV_PORT = 29500


@dataclass(frozen=True)
class LaunchSpec:
    """How one job starts: its nodes, GPUs per node, launcher, and the power cap (if any)."""

    nodes: int = 1
    gpus_per_node: int = 1
    launcher: str = ""             # one-node prefix, e.g. "torchrun --nproc-per-node 4"
    per_node: bool = False         # the multi-node path (srun + a sampler per node) on one node too
    cap_w: float | None = None     # per-GPU power cap set on every node before the run
    powercap_backend: str = "simulated"
    allow_real: bool = False

    @classmethod
    def for_execution(cls, ex: Execution) -> LaunchSpec:
        """A training cell's launch, from the `execution` section."""
        return cls(nodes=ex.nodes, gpus_per_node=ex.gpus_per_node, launcher=ex.launcher.strip(),
                   per_node=ex.per_node_sampler)

    @property
    def multi(self) -> bool:
        return self.nodes > 1 or self.per_node

    def ranks_per_node(self) -> int:
        """Processes each node starts (torchrun's --nproc-per-node)."""
        if self.multi or self.cap_w is not None:
            return self.gpus_per_node
        m = re.search(r"--nproc[-_]per[-_]node[=\s]+(\d+)", self.launcher)
        return int(m.group(1)) if m else 1


def train_args(config: str, workload: str, storage: str, checkpoint: str,
               workdir: str) -> list[str]:
    """`wattlife train` arguments of one cell."""
    return ["train", "--config", config, "--workload", workload, "--storage", storage,
            "--checkpoint", checkpoint, "--workdir", workdir]


def run_files(run_dir: str, spec: LaunchSpec) -> dict[str, Any]:
    """Every file a launch writes under its run folder, for the rule to declare."""
    d = run_dir.rstrip("/")
    out: dict[str, Any] = {"trace": f"{d}/trace.csv", "events": f"{d}/events.csv",
                           "meta": f"{d}/meta.json"}
    if spec.multi:
        out["nodes"] = f"{d}/nodes"
        out["clock"] = f"{d}/clock_offsets.csv"
    else:
        out["ranks"] = [f"{d}/events.rank{r}.csv" for r in range(1, spec.ranks_per_node())]
    return out


def _q(args: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def build_command(spec: LaunchSpec, *, config: str, run_dir: str, run_id: str, cell: dict[str, Any],
                  inner: list[str], state_dir: str | None = None,
                  in_slurm: bool | None = None) -> str:
    """The shell command of one measured job. `inner` is the program each rank runs as a Python
    module of wattlife (e.g. `train_args(...)`); `config` holds the job's sampler section.
    `in_slurm` (default: SLURM_JOB_ID is set): a one-node command runs in a whole-node step of
    its own (`srun --whole`, see `whole_step`); a multi-node one always does."""
    f = run_files(run_dir, spec)
    cell_json = json.dumps(cell, sort_keys=True)
    cap: list[str] = []
    if spec.cap_w is not None:
        cap = ["--cap", f"{spec.cap_w:g}", "--powercap-backend", spec.powercap_backend,
               "--state-dir", state_dir or run_dir] + (["--allow-real"] if spec.allow_real else [])
    if in_slurm is None:
        in_slurm = bool(os.environ.get("SLURM_JOB_ID"))
    if not spec.multi:
        one = _one_node_args(spec, config, f, run_id, cell_json, cap, inner)
        return f"{whole_step(1)} {_q(one)}" if in_slurm else _q(one)
    per_node = ["wattlife", "launch-node", "--config", config, "--node-dir", f["nodes"],
                "--run-id", run_id, "--cell", cell_json, *cap, "--", "torchrun",
                f"--nnodes={spec.nodes}", f"--nproc-per-node={spec.gpus_per_node}",
                "--rdzv-backend=c10d"]
    nodes = shlex.quote(f["nodes"])
    return (f"{RDZV_HEAD} && ({whole_step(spec.nodes)} {_q(per_node)}"
            f" --rdzv-endpoint=\"$head:{RDZV_PORT}\" "
            f"{_q(['-m', 'wattlife.cli'] + inner)})"
            f" && wattlife merge-nodes --traces {nodes}/*/trace.csv --events {nodes}/*/events.csv"
            f" --trace {shlex.quote(f['trace'])} --events-out {shlex.quote(f['events'])}"
            f" && wattlife launch-node --merge-meta {nodes} --meta {shlex.quote(f['meta'])}")


def _one_node_args(spec: LaunchSpec, config: str, f: dict[str, Any], run_id: str,
                   cell_json: str, cap: list[str], inner: list[str]) -> list[str]:
    """A one-node job's command words: the sampler (`run`, or `launch-node` with a cap) around
    the launcher and `inner`."""
    if spec.cap_w is None:
        launcher = spec.launcher.split()
        under_torchrun = bool(launcher) and launcher[0].endswith("torchrun")
        prog = ["-m", "wattlife.cli"] if under_torchrun else ["wattlife"]
        wrap = ["wattlife", "run", "--config", config, "--trace", f["trace"], "--events",
                f["events"], "--meta", f["meta"], "--run-id", run_id, "--cell", cell_json, "--"]
        return wrap + launcher + prog + inner
    wrap = ["wattlife", "launch-node", "--config", config, "--trace", f["trace"], "--events",
            f["events"], "--meta", f["meta"], "--run-id", run_id, "--cell", cell_json, *cap, "--"]
    torchrun = ["torchrun", f"--nproc-per-node={spec.gpus_per_node}", "-m", "wattlife.cli"]
    return wrap + torchrun + inner


# the rendezvous host: the job's first node (its node list from the controller, not from the
# executor's one-node step), by the address Slurm reaches it at (NodeAddr; the node name where
# Slurm has none)
RDZV_HEAD = ('nodelist=$(squeue -h -j "$SLURM_JOB_ID" -o %N)'
             ' && first=$(scontrol show hostnames "$nodelist" | head -n 1)'
             ' && head=$(scontrol show node -o "$first"'
             ' | sed -n "s/.* NodeAddr=\\([^ ]*\\).*/\\1/p")'
             ' && head=${head:-$first}')
# the executor's step variables (SLURM_NNODES=1, SLURM_NODELIST=<its node>, SLURM_NTASKS=1,
# SLURM_CPUS_PER_TASK, SLURM_CPU_BIND, ...) would shape an srun started inside it ("Only
# allocated 1 nodes asked for 2"); cleared, srun asks the controller for the job's allocation
CLEAR_STEP_ENV = ('for v in $(compgen -e | grep "^SLURM_"'
                  ' | grep -vx -e SLURM_JOB_ID -e SLURM_CONF); do unset "$v"; done; ')


def whole_step(nodes: int) -> str:
    """The shell words that start the next command as a job step of its own on `nodes` nodes of
    this job, one task per node, each holding all of the job's CPUs, memory and GPUs on its node
    (`--whole`), whatever the executor's step holds: (cleared step variables) `srun --jobid
    --whole`. Unbound (`--cpu-bind=none`): a task keeps its step's CPUs (the node's cgroup where
    task/cgroup confines it), not the one CPU a binding plugin gives a 1-CPU task. `exec` for one
    node: srun replaces the shell, so a signal to the job's command reaches it (srun forwards)."""
    args = (f'srun --jobid="$SLURM_JOB_ID" --overlap --whole --nodes={nodes} --ntasks={nodes}'
            " --ntasks-per-node=1 --kill-on-bad-exit=1 --cpu-bind=none")
    return CLEAR_STEP_ENV + ("exec " if nodes == 1 else "") + args


def short_host() -> str:
    """This node's name as a folder name (Slurm's node name in a job: wattlife.nodename)."""
    return short_node_name()


def run_node(cmd: list[str], *, settings: SamplerSettings, run_id: str, cell: dict[str, Any],
             trace: str | None = None, events: str | None = None, meta: str | None = None,
             node_dir: str | None = None, cap_w: float | None = None, backend: str = "simulated",
             allow_real: bool = False, state_dir: str | None = None) -> int:
    """This node's part of a job: set the cap on its GPUs (restored whatever happens), run `cmd`
    under its own sampler, return `cmd`'s exit code. With `node_dir`, files go to
    node_dir/<host>/ (one folder per node of a multi-node job). `settings`: the typed `sampler`
    settings (the CLI builds them from the job's --config)."""
    from .devices.powercap import PowerCapController, cap_backend
    from .run import run_under_sampler
    from .runlock import run_folder_lock
    from .sampler import with_sim_gpu_cap
    from .slurm_site import check_step

    host = short_host()
    check_step(host)  # in a Slurm job: what this node's step holds; a 1-CPU step is refused
    if node_dir:
        d = Path(node_dir) / host
        trace, events, meta = str(d / "trace.csv"), str(d / "events.csv"), str(d / "meta.json")
    if not (trace and events):
        raise InputError("launch-node: give --trace and --events, or --node-dir")
    folder = Path(node_dir).parent if node_dir else Path(trace).parent
    if cap_w is None:
        with run_folder_lock(folder):  # one job per run folder (orphans of a killed controller)
            return run_under_sampler(cmd, trace, events, meta, settings=settings, run_id=run_id,
                                     cell=cell)
    state = Path(state_dir or Path(trace).parent) / f"powercap-state-{host}.json"
    with run_folder_lock(folder), \
            PowerCapController(backend, state_file=state, allow_real=allow_real) as ctl:
        ctl.set_cap(cap_w)
        if cap_backend(backend).simulated:  # the simulated GPU's power follows the cap
            settings = with_sim_gpu_cap(settings, ctl.dev.get(0))
        return run_under_sampler(cmd, trace, events, meta, settings=settings, run_id=run_id,
                                 cell={**cell, "cap_w": cap_w})


def merge_meta(node_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """One meta.json for a multi-node run: the first node's, with every node's under `nodes`, the
    worst exit code and the rows of the merged trace (the sum of the nodes' sampler rows)."""
    metas = sorted(Path(node_dir).glob("*/meta.json"))
    if not metas:
        raise FileNotFoundError(f"{node_dir}: no <host>/meta.json (did every node's sampler run?)")
    docs = [json.loads(m.read_text()) for m in metas]
    doc = dict(docs[0])
    doc["nodes"] = {m.parent.name: d for m, d in zip(metas, docs, strict=True)}
    doc["exit_code"] = max((d.get("exit_code") or 0) for d in docs)
    rows = [(d.get("sampler") or {}).get("rows") for d in docs]
    if isinstance(doc.get("sampler"), dict) and all(isinstance(r, int) for r in rows):
        doc["sampler"] = {**doc["sampler"], "rows": sum(rows)}  # the merged trace: every node's
    Path(out).write_text(json.dumps(doc, indent=2, default=str))
    return doc
