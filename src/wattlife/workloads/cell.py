"""Setting up one matrix cell of a workload: the process group (`workloads.dist`), the device,
the dataset staged where the cell says, the checkpoint folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ..config import WorkloadSpec
from ..contracts import STAGE_COPY
from ..errors import InputError, SetupError
from ..markers import ENV_RUN_ID, phase
from .dist import Dist, barrier, init_distributed
from .summary import Summary

__all__ = ["Dist", "barrier", "checkpoint_dir", "init_distributed", "resolve_device",
           "stage_dataset", "start_cell"]


def resolve_device(name: str, dist: Dist) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise SetupError("workload asks for device 'cuda' but no GPU is visible")
        return torch.device("cuda", dist.local_rank)
    return torch.device(name)


def stage_dataset(data_root: Path, storage: str, local_root: Path, dist: Dist) -> Path:
    """`shared`: read in place. `local`: copy to node-local disk first, as a `stage_copy` phase
    (local rank 0 copies, the others wait)."""
    data_root = Path(data_root)
    if not data_root.exists():
        raise FileNotFoundError(f"dataset path {data_root} does not exist (run the preparation "
                                "stage, or `wattlife gen-images` for generated data)")
    if storage == "shared":
        return data_root
    if storage != "local":
        raise InputError(f"storage must be 'shared' or 'local', got {storage!r}")
    dest = Path(os.path.expandvars(str(local_root))) / data_root.name
    with phase(STAGE_COPY):
        if dist.local_rank == 0:
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(data_root, dest)
        barrier(dist)
    return dest


def checkpoint_dir(ckpt_root: Path, workdir: Path) -> Path:
    run = os.environ.get(ENV_RUN_ID) or Path(workdir).name
    folder = Path(os.path.expandvars(str(ckpt_root))) / run
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def start_cell(spec: WorkloadSpec, data_root: Path, storage: str, local_root: Path,
               workdir: Path) -> tuple[Dist, Any, Summary, Path]:
    """What every workload does first: join the process group, pick the device, put the phase
    boundaries on the GPU timeline when training on a GPU, and stage the dataset."""
    from ..markers import configure

    dist = init_distributed()
    device = resolve_device(spec.device, dist)
    configure(gpu_timeline=device.type == "cuda" and spec.gpu_timeline)
    summary = Summary(workdir, dist)
    root = stage_dataset(data_root, storage, local_root, dist)
    # the dataset's size (for the staging break-even); walked on the copy, never on the shared FS
    summary.dataset_bytes = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) \
        if storage == "local" else None
    return dist, device, summary, root
