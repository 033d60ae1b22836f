"""This node's part of a measured job (`wattlife launch-node`): the cap set on its GPUs, its
command under its own sampler; and one meta.json of a multi-node run's nodes. Code that runs
inside a measurement (part of the sealed measuring code, `custody.seal.MEASURING_CODE`); how the
command line that starts it is built is `wattlife.launch`'s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config import SamplerSettings
from ..errors import InputError
from ..nodename import short_node_name


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
    from ..devices.powercap import PowerCapController, cap_backend
    from ..runlock import run_folder_lock
    from ..sampler import with_sim_gpu_cap
    from ..slurm_site import check_step
    from . import run_under_sampler

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
