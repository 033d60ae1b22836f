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

What runs on each node (`launch-node`, `--merge-meta`) is `wattlife.run.node`: code that runs
inside a measurement is sealed (custody.seal.MEASURING_CODE); how its command line is built, here,
is not (a change here re-measures nothing).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from .config import Execution

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
    args = _job_step(nodes, " --whole") + " --kill-on-bad-exit=1 --cpu-bind=none"
    return CLEAR_STEP_ENV + ("exec " if nodes == 1 else "") + args


def _job_step(nodes: int, extra: str) -> str:
    """`srun` of one task on each of `nodes` nodes of this job, beside its other steps."""
    return (f'srun --jobid="$SLURM_JOB_ID" --overlap{extra} --nodes={nodes} --ntasks={nodes}'
            " --ntasks-per-node=1")


def each_node_step(nodes: int) -> str:
    """The shell words that run the next command once on each of `nodes` nodes of this job, as a
    step of its own beside the executor's (cleared step variables, `srun --jobid --overlap`):
    what a node-local thing of the job, e.g. its checkpoint folder, is removed with."""
    return CLEAR_STEP_ENV + _job_step(nodes, "")
