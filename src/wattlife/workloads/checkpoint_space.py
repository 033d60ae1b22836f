"""Where a training cell's checkpoints lie, and their removal once no step needs them.

A cell writes its checkpoints to <root>/checkpoints/<run id>/ (`root`: `storage.shared`, or
`storage.local` for a `local` cell, unless the workload's `checkpoint_to` says which; the run id
is the cell's, `wattlife.custody.measure.cell_run_id`). On the shared filesystem they add up
(a model and its optimizer state per cell). A checkpoint is not a measurement: no seal lists it
(work/summary.json names its path, as text). So `wattlife measure` removes the cell's folder when
its job ends, except for the upload cell (`prepare.upload.cell`), whose checkpoint the upload
step reads and then removes (`wattlife drop-checkpoint`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..config import Settings
from ..errors import InputError

#: the name of the folder holding every cell's checkpoint folder
CHECKPOINTS = "checkpoints"


def checkpoint_root(s: Settings, workload: str, storage: str) -> Path:
    """The folder holding the checkpoint folders of `workload`'s cells on `storage` (its
    environment variables not yet expanded: they are the node's)."""
    spec = s.workloads[workload]
    to = spec.checkpoint_to or storage
    return Path(s.storage["shared"] if to == "shared" else s.storage["local"]) / CHECKPOINTS


def cell_checkpoint_folder(s: Settings, workload: str, storage: str, run_id: str) -> Path:
    """The checkpoint folder of the cell whose run id is `run_id`, on this node."""
    return Path(os.path.expandvars(str(checkpoint_root(s, workload, storage)))) / run_id


def summary_checkpoint_folder(summary: str | Path) -> Path | None:
    """The checkpoint folder of the last checkpoint a cell's work/summary.json lists (None: it
    lists none)."""
    ckpts = json.loads(Path(summary).read_text()).get("checkpoints") or []
    return Path(ckpts[-1]).parent if ckpts else None


def remove_checkpoint_folder(folder: Path) -> str:
    """Remove a cell's checkpoint folder (only a folder directly under a `checkpoints` folder:
    never anything else a wrong path could name); one line saying what was removed."""
    if folder.parent.name != CHECKPOINTS:
        raise InputError(f"{folder}: not a cell's checkpoint folder (<root>/{CHECKPOINTS}/"
                         "<run id>); nothing removed")
    if not folder.exists():
        return f"{folder}: no checkpoint folder (none written, or removed before)"
    files = [p for p in folder.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    shutil.rmtree(folder)
    return f"removed the checkpoint folder {folder} ({len(files)} files, {size} bytes)"
